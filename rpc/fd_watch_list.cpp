#include "rpc/fd_watch_list.h"

#include <future>

namespace gpubox::rpc {

bool FdWatchList::watch(int fd, std::function<bool()> ready) {
  if (!ready) return false;
  {
    MutexLock lock(mutex_);
    if (ended_) return false;
    requests_.push_back({fd, std::move(ready), nullptr});
  }
  wake_();
  return true;
}

void FdWatchList::unwatch(int fd) {
  bool on_polling_thread = std::this_thread::get_id() == polling_thread_.load();
  auto done = on_polling_thread ? nullptr : std::make_shared<std::promise<void>>();
  {
    MutexLock lock(mutex_);
    if (ended_) return;
    requests_.push_back({fd, nullptr, done});
  }
  wake_();
  if (done) done->get_future().wait();
}

void FdWatchList::apply_requests() {
  std::vector<Request> requests;
  {
    MutexLock lock(mutex_);
    requests.swap(requests_);
  }
  for (auto& request : requests) {
    if (request.ready) {
      watched_[request.fd] = std::move(request.ready);
    } else {
      watched_.erase(request.fd);
    }
    if (request.done) request.done->set_value();
  }
}

void FdWatchList::add_poll_items(std::vector<zmq::pollitem_t>& items) const {
  for (const auto& [fd, ready] : watched_) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
}

void FdWatchList::run_ready(const std::vector<zmq::pollitem_t>& items, std::size_t first) {
  for (std::size_t i = first; i < items.size(); ++i) {
    if (!(items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) continue;
    auto it = watched_.find(items[i].fd);
    if (it == watched_.end()) continue;
    bool keep = false;
    try {
      keep = it->second();
    } catch (...) {
    }
    if (!keep) watched_.erase(it);
  }
}

void FdWatchList::end() {
  std::vector<Request> unapplied;
  {
    MutexLock lock(mutex_);
    ended_ = true;
    unapplied.swap(requests_);
  }
  for (auto& request : unapplied) {
    if (request.done) request.done->set_value();
  }
  watched_.clear();
}

}  // namespace gpubox::rpc
