// Starting and stopping a Server: its endpoints bound (CURVE on tcp://), its
// ZAP handler and I/O thread started, and everything joined in order at the end.
#include "rpc/server.h"

#include <sys/stat.h>

#include "rpc/keys.h"
#include "rpc/server_impl.h"

namespace gpubox::rpc {
namespace {

// ZeroMQ draft option (libzmq built with ENABLE_DRAFTS, scripts/setup.sh): the
// ROUTER hands up an empty message from a peer whose connection closed.
#ifndef ZMQ_ROUTER_NOTIFY
#define ZMQ_ROUTER_NOTIFY 97
#define ZMQ_NOTIFY_DISCONNECT 2
#endif

}  // namespace

Status Server::Impl::bind(const std::string& endpoint, std::vector<std::string>* bound) {
  auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
  socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.limits.max_message_bytes));
  socket->set(zmq::sockopt::sndhwm, 0);  // DATA is bounded by credit, finals by max_in_flight
  socket->set(zmq::sockopt::linger, 200);
  int notify = ZMQ_NOTIFY_DISCONNECT;
  if (zmq_setsockopt(socket->handle(), ZMQ_ROUTER_NOTIFY, &notify, sizeof notify) != 0) {
    return Status(ErrorCode::internal, "libzmq lacks ZMQ_ROUTER_NOTIFY (build it with drafts: scripts/setup.sh)");
  }
  bool is_curve = false;
  std::string address = endpoint;
  if (endpoint.rfind("ipc://", 0) == 0) {
    std::string path = endpoint.substr(6);
    if (path.empty() || path[0] != '/') return Status(ErrorCode::invalid_request, "endpoint " + endpoint + ": expected an absolute path");
    ::unlink(path.c_str());
  } else if (endpoint.rfind("tcp://", 0) == 0) {
    if (options.secret_key.empty() || !options.authorized) {
      return Status(ErrorCode::invalid_request, "endpoint " + endpoint + ": tcp:// requires a CURVE secret key and an allow-list");
    }
    socket->set(zmq::sockopt::curve_server, 1);
    socket->set(zmq::sockopt::curve_secretkey, options.secret_key);
    socket->set(zmq::sockopt::zap_domain, "gpubox");
    if (address.size() > 2 && address.compare(address.size() - 2, 2, ":0") == 0) {
      address.replace(address.size() - 1, 1, "*");
    }
    is_curve = true;
  } else {
    return Status(ErrorCode::invalid_request, "endpoint " + endpoint + ": expected ipc://PATH or tcp://HOST:PORT");
  }
  try {
    socket->bind(address);
  } catch (const zmq::error_t& e) {
    return Status::from_errno(e.num(), "cannot bind " + endpoint);
  }
  std::string last = socket->get(zmq::sockopt::last_endpoint);
  if (!is_curve) ::chmod(last.substr(6).c_str(), 0600);
  bound->push_back(last);
  sockets.push_back(std::move(socket));
  curve.push_back(is_curve);
  return Status::ok();
}

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, const MethodRegistry& methods) {
  auto impl = std::make_unique<Impl>(std::move(options), methods);
  if (impl->outbox_fd < 0) return Status::from_errno(errno, "eventfd");
  std::string public_key;
  if (!impl->options.secret_key.empty()) {
    auto derived = public_key_of(impl->options.secret_key);
    if (!derived) return derived.status();
    public_key = *derived;
  }
  try {
    impl->zap.start(impl->context);
  } catch (const zmq::error_t& e) {
    return Status(ErrorCode::internal, std::string("ZAP handler: ") + e.what());
  }
  std::vector<std::string> bound;
  Status status;
  for (const auto& endpoint : impl->options.endpoints) {
    status = impl->bind(endpoint, &bound);
    if (!status) break;
  }
  if (!status || bound.empty()) {
    impl->sockets.clear();
    impl->context.shutdown();
    impl->zap.join();
    return status ? Status(ErrorCode::invalid_request, "no RPC endpoint configured") : status;
  }
  Impl* raw = impl.get();
  impl->io_thread = std::thread([raw] { raw->io_loop(); });
  std::unique_ptr<Server> server(new Server(std::move(impl)));
  server->bound_ = std::move(bound);
  server->public_key_ = std::move(public_key);
  return server;
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  impl_->stopping = true;
  impl_->wake();
  impl_->io_thread.join();
  impl_->context.shutdown();
  impl_->zap.join();
  // impl_'s destructor joins the worker pool: handlers have seen their calls stop.
}

bool Server::watch(int fd, std::function<bool()> ready) { return impl_->watches.watch(fd, std::move(ready)); }

void Server::unwatch(int fd) { impl_->watches.unwatch(fd); }

ServerStats Server::stats() const {
  return ServerStats{impl_->calls_total.load(), impl_->in_flight_total.load(), impl_->rejected_total.load()};
}

}  // namespace gpubox::rpc
