// FdWatchList: the FdWatch (rpc/fd_watch.h) of a thread that already polls,
// the server's I/O thread. watch() and unwatch() come from any thread and
// only queue a request; the polling thread applies them between polls, adds
// the watched descriptors to its poll and runs the ready functions of those
// that polled readable. The other methods are the polling thread's.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "base/thread_annotations.h"
#include "rpc/fd_watch.h"

namespace gpubox::rpc {

class FdWatchList : public FdWatch {
 public:
  // wake: makes the polling thread leave its poll soon (from any thread).
  explicit FdWatchList(std::function<void()> wake) : wake_(std::move(wake)) {}

  bool watch(int fd, std::function<bool()> ready) override EXCLUDES(mutex_);
  void unwatch(int fd) override EXCLUDES(mutex_);

  // The polling thread, before it polls for the first time.
  void bind_to_this_thread() { polling_thread_ = std::this_thread::get_id(); }
  // Applies the requests queued since the last poll.
  void apply_requests() EXCLUDES(mutex_);
  // Appends a ZMQ_POLLIN item per watched descriptor.
  void add_poll_items(std::vector<zmq::pollitem_t>& items) const;
  // Calls the ready function of each watched descriptor that polled readable
  // (or at its end), items[first] onwards being add_poll_items()'s; one that
  // returns false (or throws) is no longer watched.
  void run_ready(const std::vector<zmq::pollitem_t>& items, std::size_t first);
  // The polling thread ends: nothing is watched any more, waiting unwatch()
  // calls return and later watch() calls are refused.
  void end() EXCLUDES(mutex_);

 private:
  // An empty ready unwatches; done (when set) is fulfilled once applied.
  struct Request {
    int fd;
    std::function<bool()> ready;
    std::shared_ptr<std::promise<void>> done;
  };

  const std::function<void()> wake_;
  std::atomic<std::thread::id> polling_thread_;  // read by unwatch() on any thread
  Mutex mutex_;
  std::vector<Request> requests_ GUARDED_BY(mutex_);
  bool ended_ GUARDED_BY(mutex_) = false;
  std::map<int, std::function<bool()>> watched_;  // the polling thread's
};

}  // namespace gpubox::rpc
