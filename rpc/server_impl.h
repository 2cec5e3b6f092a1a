// Server::Impl: one Server's state, shared by the files that each do one part
// of its work (server.cpp: starting, binding, stopping; server_io_loop.cpp:
// the I/O thread's loop, message dispatch and outbox; server_calls.cpp: a
// call from CALL to its RESULT or ERROR). Private to rpc/. Which thread owns
// what is said at each member.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <compare>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "base/thread_annotations.h"
#include "rpc/fd_watch_list.h"
#include "rpc/message.h"
#include "rpc/server.h"
#include "rpc/worker_pool.h"
#include "rpc/zap_authenticator.h"

namespace gpubox::rpc {

// The server's bookkeeping types, named (not file-local) because Server::Impl,
// which has external linkage, holds them.
namespace server_state {

// Identifies a call: which socket, which connection (routing id), which id.
struct CallKey {
  std::size_t socket;
  std::string routing_id;
  std::uint64_t id;
  auto operator<=>(const CallKey&) const = default;
};
using PeerKey = std::pair<std::size_t, std::string>;

struct Queued {
  std::size_t socket;
  std::string routing_id;
  Outgoing message;
  // The call the message belongs to: sent only while that call is still
  // registered, so nothing follows its RESULT/ERROR.
  std::shared_ptr<CallState> call;
  bool final = false;  // RESULT/ERROR: unregisters the call
};

}  // namespace server_state

using server_state::CallKey;
using server_state::PeerKey;
using server_state::Queued;

struct Server::Impl {
  Impl(ServerOptions opts, const MethodRegistry& registry)
      : options(std::move(opts)), methods(registry), pool(options.max_workers),
        outbox_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~Impl() {
    if (outbox_fd >= 0) ::close(outbox_fd);
  }

  Status bind(const std::string& endpoint, std::vector<std::string>* bound);
  void io_loop();
  void receive(std::size_t socket);
  void handle(std::size_t socket, std::vector<zmq::message_t>& frames);
  void reject(const CallKey& key, const Status& status);
  void peer_disconnected(std::size_t socket, const std::string& routing_id);
  void start_call(std::size_t socket, const std::string& routing_id, const std::string& peer, ParsedRequest& request,
                  std::vector<zmq::message_t>& frames);
  void deliver_data(const CallKey& key, nlohmann::json&& body, std::vector<zmq::message_t>& frames);
  void stop_call(const CallKey& key, const std::shared_ptr<CallState>& state, const Status& reason);
  void erase_call(const CallKey& key);
  void expire_deadlines();
  int next_deadline_ms() const;
  // Queues a message for the I/O thread to send (any thread).
  void enqueue(Queued&& queued);
  // Raises outbox_fd: the I/O thread wakes from its poll (any thread).
  void wake();
  void drain_outbox();
  void send_now(std::size_t socket, const std::string& routing_id, Outgoing& message);

  ServerOptions options;
  const MethodRegistry& methods;
  zmq::context_t context{1};
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;  // owned by the I/O thread once it runs
  std::vector<bool> curve;                              // per socket: CURVE and the allow-list apply
  ZapAuthenticator zap{options.authorized};             // the allow-list at CURVE handshakes (its own thread)
  std::thread io_thread;
  std::thread::id io_thread_id;
  WorkerPool pool;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> calls_total{0}, in_flight_total{0}, rejected_total{0};

  const int outbox_fd;  // raised when the outbox gains messages from other threads
  Mutex outbox_mutex;
  std::vector<Queued> outbox GUARDED_BY(outbox_mutex);
  FdWatchList watches{[this] { wake(); }};  // Server's FdWatch, run by the I/O thread

  // I/O thread only.
  std::map<CallKey, std::shared_ptr<CallState>> calls;
  std::map<PeerKey, std::size_t> in_flight_per_peer;
  std::set<std::pair<Clock::time_point, CallKey>> deadlines;
};

}  // namespace gpubox::rpc
