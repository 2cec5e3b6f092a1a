// The agent's side of one serve worker process (Service's internals): the
// process, its channel and pipes, and the calls in flight to it
// (PendingCall). Thread-safe where each member says: handler threads, the
// worker's reader thread and the RPC I/O thread share them.
#pragma once

#include <sys/eventfd.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/process_table.h"
#include "agent/serve/memfd_pool.h"
#include "agent/serve/worker_wire.h"
#include "base/fd.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "rpc/call.h"

namespace gpubox::serve {

// Eventfd helpers: wake a waiter, and take the wake-ups before waiting again.
void signal_event(int fd);
void drain_event(int fd);
// body[key] when it is a string, else "".
std::string body_string(const nlohmann::json& body, const char* key);
// The end of a call from the worker's message that ends it: the RESULT's
// value (its tensors set as the result attachments), or the error (a raised
// exception's details set); nullopt for a message that does not end the call.
std::optional<Result<nlohmann::json>> outcome(WireMessage& message, rpc::CallContext& call);

// One call in flight to a worker: what the worker's reader thread delivers for it.
struct PendingCall {
  // The handler thread's own eventfd, reused by its calls (drained before
  // each wait); shared, so a late signal never lands on a closed descriptor.
  PendingCall() : event_fd(thread_event()), event(event_fd->get()) {}
  static std::shared_ptr<Fd> thread_event() {
    thread_local auto fd = std::make_shared<Fd>(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    return fd;
  }
  // The call of a fast path (Service::take_call): no handler relays it, so
  // the message that ends it answers it where it is read.
  explicit PendingCall(std::shared_ptr<rpc::CallContext> taken) : PendingCall() {
    direct = taken.get();
    owner = std::move(taken);
    relayed_by_handler = false;
  }
  // A call that streams nothing (a plain function's) is answered right here,
  // where the worker's message is read, while its handler (if any) still
  // waits in relay(): one thread wake-up fewer on its way back. False:
  // push() it for relay().
  bool answer(WireMessage& message) {
    MutexLock lock(answer_mutex);
    if (!direct || answered) return false;
    auto result = outcome(message, *direct);
    if (!result) return false;
    direct->answer(*result);
    answered = true;
    signal_event(event);
    direct = nullptr;
    owner.reset();
    return true;
  }
  // relay() is done, or the call stopped: nothing answers the call from now on.
  void close() {
    MutexLock lock(answer_mutex);
    direct = nullptr;
    owner.reset();
  }
  void push(WireMessage message) {
    if (!relayed_by_handler) return;  // nobody reads its inbox: only a message that ends it counts
    {
      MutexLock lock(mutex);
      inbox.push_back(std::move(message));
    }
    signal_event(event);
  }
  void fail(Status reason) {
    {
      MutexLock lock(answer_mutex);
      if (owner) {
        if (!answered) owner->answer(reason);
        answered = true;
        direct = nullptr;
        owner.reset();
        return;
      }
    }
    {
      MutexLock lock(mutex);
      failed = std::move(reason);
    }
    signal_event(event);
  }

  Mutex mutex;
  std::deque<WireMessage> inbox GUARDED_BY(mutex);
  std::optional<Status> failed GUARDED_BY(mutex);  // the worker ended
  const std::shared_ptr<Fd> event_fd;
  const int event;  // readable once something was pushed (or the call answered)

  Mutex answer_mutex;
  rpc::CallContext* direct GUARDED_BY(answer_mutex) = nullptr;  // the call, while it may be answered here
  std::shared_ptr<rpc::CallContext> owner GUARDED_BY(answer_mutex);  // a fast path's call, until answered or closed
  bool answered GUARDED_BY(answer_mutex) = false;

  bool relayed_by_handler = true;  // false for a fast path's call; set by the constructor only
};

// One worker process: its channel, output pipes, exit status and calls in flight.
struct WorkerProcess {
  // One message to the worker, after a "released" one naming the worker's
  // memfds the agent no longer maps (so it can reuse them). The large
  // attachments go into a warm memfd of the pool when one can be had.
  Status send(const nlohmann::json& body, const std::vector<zmq::message_t>& attachments = {}) {
    MutexLock lock(write_mutex);
    if (auto files = unmapped->take(); !files.empty()) {
      if (Status sent = write_message(channel.get(), released_body(files)); !sent) return sent;
    }
    std::optional<MemfdPool::Lease> lease;
    if (std::uint64_t extent = memfd_extent(attachments)) {
      auto lent = pool.lend(extent);
      if (lent) lease = std::move(*lent);
    }
    MemfdTarget target = lease ? lease->target() : MemfdTarget{};
    Status sent = write_message(channel.get(), body, attachments, lease ? &target : nullptr);
    if (!sent && lease) pool.give_back(lease->slot->id);  // the worker may never have got it
    return sent;
  }
  // The fast path's send (on the RPC I/O thread): false, with nothing sent,
  // when it would wait (the channel busy, released memfds to report first,
  // no room in its buffer).
  bool try_send(const nlohmann::json& body, const std::vector<zmq::message_t>& attachments) {
    if (!write_mutex.try_lock()) return false;
    MutexLock lock(write_mutex, std::adopt_lock);
    if (!unmapped->empty()) return false;
    return try_write_message(channel.get(), body, attachments);
  }
  // Registers a call; false when the process has already ended.
  bool add(std::uint64_t id, std::shared_ptr<PendingCall> call) {
    MutexLock lock(mutex);
    if (ended) return false;
    pending[id] = std::move(call);
    return true;
  }
  void remove(std::uint64_t id) {
    MutexLock lock(mutex);
    pending.erase(id);
  }
  std::shared_ptr<PendingCall> find(std::uint64_t id) {
    MutexLock lock(mutex);
    auto it = pending.find(id);
    return it == pending.end() ? nullptr : it->second;
  }

  pid_t pid = 0;
  std::thread reader;  // runs Service::run_worker; joined on the supervision thread once it is done
  Fd channel;
  Fd out;
  Fd err;
  Fd exited;  // eventfd: readable once the process was reaped
  Fd turn;    // eventfd: the RPC I/O thread hands the channel's next message to its reader thread
  std::thread log_thread;
  Mutex write_mutex;  // one message at a time on the channel
  MemfdPool pool;          // the agent's memfds for the worker's inputs
  std::shared_ptr<ReleaseList> unmapped = std::make_shared<ReleaseList>();  // the worker's, no longer mapped here

  Mutex mutex;
  std::condition_variable_any changed;
  std::map<std::uint64_t, std::shared_ptr<PendingCall>> pending GUARDED_BY(mutex);
  bool ended GUARDED_BY(mutex) = false;
  std::optional<ExitStatus> exit GUARDED_BY(mutex);
};

}  // namespace gpubox::serve
