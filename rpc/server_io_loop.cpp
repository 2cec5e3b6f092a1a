// The server's I/O thread: one poll over every socket, the outbox's eventfd
// and the watched descriptors; each client message decoded and dispatched;
// what other threads queued sent in order.
#include <pthread.h>

#include <zmq_addon.hpp>

#include "rpc/server_impl.h"

namespace gpubox::rpc {

void Server::Impl::io_loop() {
  ::pthread_setname_np(::pthread_self(), "rpc-io");
  io_thread_id = std::this_thread::get_id();
  watches.bind_to_this_thread();
  std::vector<zmq::pollitem_t> items;
  while (!stopping.load(std::memory_order_relaxed)) {
    watches.apply_requests();
    items.clear();
    for (auto& socket : sockets) items.push_back({socket->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, outbox_fd, ZMQ_POLLIN, 0});
    const std::size_t first_watch = items.size();
    watches.add_poll_items(items);
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(next_deadline_ms()));
    } catch (const zmq::error_t& e) {
      // A signal: the agent blocks them all, but a program embedding the
      // server may not, and must not lose its server to one.
      if (e.num() == EINTR) continue;
      break;
    }
    for (std::size_t i = 0; i < sockets.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) receive(i);
    }
    watches.run_ready(items, first_watch);
    if (items[first_watch - 1].revents & ZMQ_POLLIN) {
      std::uint64_t value;
      [[maybe_unused]] auto n = ::read(outbox_fd, &value, sizeof value);
    }
    drain_outbox();
    expire_deadlines();
    drain_outbox();
  }
  // Shutting down: every call still in flight is answered, then the sockets close.
  auto remaining = calls;
  for (auto& [key, state] : remaining) stop_call(key, state, Status(ErrorCode::unavailable, "the agent is shutting down"));
  drain_outbox();
  sockets.clear();
  watches.end();
}

void Server::Impl::receive(std::size_t socket) {
  // A bounded batch, so replies and other sockets get their turn.
  for (int i = 0; i < 256; ++i) {
    std::vector<zmq::message_t> frames;
    std::optional<std::size_t> got;
    try {
      got = zmq::recv_multipart(*sockets[socket], std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (!got) return;
    handle(socket, frames);
  }
}

void Server::Impl::handle(std::size_t socket, std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) {
    ++rejected_total;
    return;
  }
  std::string routing_id = frames[0].to_string();
  if (frames.size() == 2 && frames[1].size() == 0) {
    // ZMQ_ROUTER_NOTIFY's disconnect event (a client may send the same to end its own calls).
    peer_disconnected(socket, routing_id);
    return;
  }
  std::vector<std::string_view> views;
  views.reserve(frames.size() - 1);
  for (std::size_t i = 1; i < frames.size(); ++i) views.push_back(frames[i].to_string_view());
  std::string peer = "local";
  if (curve[socket]) {
    const char* user = nullptr;
    try {
      user = frames[1].gets("User-Id");
    } catch (const zmq::error_t&) {
    }
    peer = user ? user : "";
    if (!options.authorized->allows(peer)) {
      // Checked before anything else is decoded: a refused key gets nothing else.
      reject({socket, routing_id, peek_request_id(views[0])},
             Status(ErrorCode::permission_denied, "client key is not (or no longer) authorized"));
      return;
    }
  }
  auto request = parse_request(views, options.limits);
  if (!request) {
    reject({socket, routing_id, peek_request_id(views[0])}, request.status());
    return;
  }
  if (options.on_activity) options.on_activity();
  const Header& header = request->header;
  CallKey key{socket, routing_id, header.id};
  switch (header.kind) {
    case Kind::call:
      start_call(socket, routing_id, peer, *request, frames);
      return;
    case Kind::cancel: {
      auto it = calls.find(key);
      if (it != calls.end()) stop_call(key, it->second, Status(ErrorCode::cancelled, "cancelled by the client"));
      return;
    }
    case Kind::credit: {
      auto it = calls.find(key);
      if (it == calls.end()) return;
      {
        MutexLock lock(it->second->mutex);
        it->second->credit_out += header.credit;
      }
      it->second->changed.notify_all();
      return;
    }
    case Kind::data:
      deliver_data(key, std::move(request->body), frames);
      return;
    case Kind::result:
    case Kind::error:
      return;  // refused by parse_request
  }
}

void Server::Impl::enqueue(Queued&& queued) {
  bool must_wake;
  {
    MutexLock lock(outbox_mutex);
    must_wake = outbox.empty() && std::this_thread::get_id() != io_thread_id;
    outbox.push_back(std::move(queued));
  }
  if (must_wake) wake();
}

void Server::Impl::wake() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(outbox_fd, &one, sizeof one);
}

void Server::Impl::drain_outbox() {
  std::vector<Queued> batch;
  {
    MutexLock lock(outbox_mutex);
    batch.swap(outbox);
  }
  for (auto& queued : batch) {
    if (queued.call) {
      CallKey key{queued.socket, queued.routing_id, queued.message.header.id};
      auto it = calls.find(key);
      if (it == calls.end() || it->second != queued.call) continue;  // answered already
      if (queued.final) erase_call(key);
    }
    send_now(queued.socket, queued.routing_id, queued.message);
  }
}

void Server::Impl::send_now(std::size_t socket, const std::string& routing_id, Outgoing& message) {
  if (socket >= sockets.size()) return;
  zmq::socket_t& out = *sockets[socket];
  std::string header = encode_header(message.header);
  try {
    out.send(zmq::buffer(routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    out.send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    auto body_flags = message.attachments.empty() ? zmq::send_flags::dontwait : zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    out.send(zmq::buffer(message.body), body_flags);
    for (std::size_t i = 0; i < message.attachments.size(); ++i) {
      bool last = i + 1 == message.attachments.size();
      out.send(message.attachments[i], last ? zmq::send_flags::dontwait : zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t&) {
    // The peer is gone; ROUTER drops what it cannot route.
  }
}

}  // namespace gpubox::rpc
