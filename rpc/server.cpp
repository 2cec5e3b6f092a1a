// Over 600 lines: the I/O thread's ZeroMQ loop, request dispatch and the streams' credit accounting all work on that thread's state; the worker pool and framing are their own files.
#include "rpc/server.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>
#include <set>
#include <zmq_addon.hpp>

#include "base/thread_annotations.h"
#include "rpc/keys.h"
#include "rpc/message.h"
#include "rpc/worker_pool.h"

namespace gpubox::rpc {

void MethodRegistry::add(std::string name, Handler handler, Dispatch dispatch) {
  methods_[std::move(name)] = Method{std::move(handler), dispatch, nullptr};
}

void MethodRegistry::add(std::string name, Handler handler, FastPath fast) {
  methods_[std::move(name)] = Method{std::move(handler), Dispatch::worker, std::move(fast)};
}

void MethodRegistry::add_prefix(std::string prefix, Handler handler) {
  prefixes_[std::move(prefix)] = Method{std::move(handler), Dispatch::worker, nullptr};
}

const MethodRegistry::Method* MethodRegistry::find(const std::string& name) const {
  if (auto it = methods_.find(name); it != methods_.end()) return &it->second;
  const Method* best = nullptr;
  std::size_t best_length = 0;
  for (const auto& [prefix, method] : prefixes_) {
    if (prefix.size() >= best_length && name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
      best = &method;
      best_length = prefix.size();
    }
  }
  return best;
}

std::vector<std::string> MethodRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& [name, method] : methods_) names.push_back(name);
  for (const auto& [prefix, method] : prefixes_) names.push_back(prefix + "*");
  return names;
}

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

namespace {

// ZeroMQ draft option (libzmq built with ENABLE_DRAFTS, scripts/setup.sh): the
// ROUTER hands up an empty message from a peer whose connection closed.
#ifndef ZMQ_ROUTER_NOTIFY
#define ZMQ_ROUTER_NOTIFY 97
#define ZMQ_NOTIFY_DISCONNECT 2
#endif

// Deadlines beyond this (about 100 years) are treated as this, so that
// now + timeout cannot overflow the clock's nanosecond count.
constexpr std::uint64_t kMaxTimeoutMs = 100ull * 365 * 24 * 3600 * 1000;

std::string z85_of(const void* key32) {
  char text[41];
  zmq_z85_encode(text, static_cast<const std::uint8_t*>(key32), 32);
  return text;
}

Outgoing error_message(std::uint64_t id, const Status& status) {
  Outgoing out;
  out.header.id = id;
  out.header.kind = Kind::error;
  out.body = encode_body(error_body(status));
  return out;
}

// Runs a handler at the exception boundary: whatever it throws becomes `internal`.
Result<nlohmann::json> run_handler(const Handler& handler, CallContext& call) {
  try {
    return handler(call);
  } catch (const std::exception& e) {
    return Status(ErrorCode::internal, std::string("method failed: ") + e.what());
  } catch (...) {
    return Status(ErrorCode::internal, "method failed with an unknown exception");
  }
}

// Runs a fast path at the exception boundary: one that throws did not take the call.
bool try_fast_path(const FastPath& fast, const std::shared_ptr<CallContext>& call) {
  try {
    return fast(call);
  } catch (...) {
    return false;
  }
}

// The RESULT (with the handler's result attachments) or ERROR that ends a call.
Outgoing finish_message(std::uint64_t id, const Result<nlohmann::json>& result, CallContext& call) {
  if (!result) {
    if (call.error_details().is_object()) {
      Outgoing out = error_message(id, result.status());
      nlohmann::json body = error_body(result.status());
      body["details"] = call.error_details();
      out.body = encode_body(body);
      return out;
    }
    return error_message(id, result.status());
  }
  Outgoing out;
  out.header.id = id;
  out.header.kind = Kind::result;
  out.body = encode_body(result.value().is_null() ? nlohmann::json::object() : result.value());
  out.attachments = call.take_result_attachments();
  return out;
}

}  // namespace

struct Server::Impl {
  Impl(ServerOptions opts, const MethodRegistry& registry)
      : options(std::move(opts)), methods(registry), pool(options.max_workers),
        outbox_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~Impl() {
    if (outbox_fd >= 0) ::close(outbox_fd);
  }

  Status bind(const std::string& endpoint, std::vector<std::string>* bound);
  void start_zap();
  void zap_loop();
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
  void enqueue(Queued&& queued);
  // Raises outbox_fd: the I/O thread wakes from its poll (any thread).
  void wake();
  void drain_outbox();
  void send_now(std::size_t socket, const std::string& routing_id, Outgoing& message);
  void apply_watch_commands();
  void run_watches(const std::vector<zmq::pollitem_t>& items, std::size_t first);

  ServerOptions options;
  const MethodRegistry& methods;
  zmq::context_t context{1};
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;  // owned by the I/O thread once it runs
  std::vector<bool> curve;                              // per socket: CURVE and the allow-list apply
  std::unique_ptr<zmq::socket_t> zap_socket;            // owned by the ZAP thread
  std::thread zap_thread;
  std::thread io_thread;
  std::thread::id io_thread_id;
  WorkerPool pool;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> calls_total{0}, in_flight_total{0}, rejected_total{0};

  const int outbox_fd;  // raised when the outbox gains messages from other threads
  Mutex outbox_mutex;
  std::vector<Queued> outbox GUARDED_BY(outbox_mutex);

  // FdWatch's requests for the I/O thread; an empty ready unwatches, and
  // done (when set) is fulfilled once the request was applied.
  struct WatchCommand {
    int fd;
    std::function<bool()> ready;
    std::shared_ptr<std::promise<void>> done;
  };
  std::vector<WatchCommand> watch_commands GUARDED_BY(outbox_mutex);
  bool io_ended GUARDED_BY(outbox_mutex) = false;  // nothing is watched any more

  // I/O thread only.
  std::map<CallKey, std::shared_ptr<CallState>> calls;
  std::map<PeerKey, std::size_t> in_flight_per_peer;
  std::set<std::pair<Clock::time_point, CallKey>> deadlines;
  std::map<int, std::function<bool()>> watches;
};

void Server::Impl::start_zap() {
  zap_socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::rep);
  zap_socket->set(zmq::sockopt::linger, 0);
  zap_socket->bind("inproc://zeromq.zap.01");
  zap_thread = std::thread([this] { zap_loop(); });
}

// ZAP (RFC 27): admits a CURVE client only when its public key is on the allow-list.
void Server::Impl::zap_loop() {
  ::pthread_setname_np(::pthread_self(), "rpc-zap");
  while (true) {
    try {
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(*zap_socket, std::back_inserter(request))) continue;
      if (request.size() < 6) continue;
      std::string mechanism = request[5].to_string();
      std::string key;
      bool allowed = false;
      if (mechanism == "CURVE" && request.size() >= 7 && request[6].size() == 32) {
        key = z85_of(request[6].data());
        allowed = options.authorized && options.authorized->allows(key);
      }
      std::array<zmq::const_buffer, 6> reply = {
          zmq::str_buffer("1.0"), zmq::buffer(request[1].data(), request[1].size()),
          allowed ? zmq::str_buffer("200") : zmq::str_buffer("400"),
          allowed ? zmq::str_buffer("OK") : zmq::str_buffer("client key not authorized"),
          zmq::buffer(key), zmq::str_buffer("")};
      zmq::send_multipart(*zap_socket, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal (or a debugger): the handler must outlive it
      break;                           // ETERM: the context is shutting down
    }
  }
  zap_socket.reset();
}

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

void Server::Impl::io_loop() {
  ::pthread_setname_np(::pthread_self(), "rpc-io");
  io_thread_id = std::this_thread::get_id();
  std::vector<zmq::pollitem_t> items;
  while (!stopping.load(std::memory_order_relaxed)) {
    apply_watch_commands();
    items.clear();
    for (auto& socket : sockets) items.push_back({socket->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, outbox_fd, ZMQ_POLLIN, 0});
    const std::size_t first_watch = items.size();
    for (const auto& [fd, ready] : watches) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
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
    run_watches(items, first_watch);
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
  std::vector<WatchCommand> unapplied;
  {
    MutexLock lock(outbox_mutex);
    io_ended = true;
    unapplied.swap(watch_commands);
  }
  for (auto& command : unapplied) {
    if (command.done) command.done->set_value();
  }
  watches.clear();
}

void Server::Impl::apply_watch_commands() {
  std::vector<WatchCommand> commands;
  {
    MutexLock lock(outbox_mutex);
    commands.swap(watch_commands);
  }
  for (auto& command : commands) {
    if (command.ready) {
      watches[command.fd] = std::move(command.ready);
    } else {
      watches.erase(command.fd);
    }
    if (command.done) command.done->set_value();
  }
}

// Calls the ready function of each watched descriptor that polled readable
// (or at its end); one that returns false (or throws) is no longer watched.
void Server::Impl::run_watches(const std::vector<zmq::pollitem_t>& items, std::size_t first) {
  for (std::size_t i = first; i < items.size(); ++i) {
    if (!(items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) continue;
    auto it = watches.find(items[i].fd);
    if (it == watches.end()) continue;
    bool keep = false;
    try {
      keep = it->second();
    } catch (...) {
    }
    if (!keep) watches.erase(it);
  }
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

// Refuses a message. When its id names a call in flight on this connection,
// that call ends with the error (its work stops), so that it still gets exactly
// one RESULT or ERROR; otherwise the error is sent for the id. Messages
// without a readable id are dropped.
void Server::Impl::reject(const CallKey& key, const Status& status) {
  ++rejected_total;
  if (key.id == 0) return;
  auto it = calls.find(key);
  if (it != calls.end()) {
    auto state = it->second;
    stop_call(key, state, status);
    return;
  }
  auto out = error_message(key.id, status);
  send_now(key.socket, key.routing_id, out);
}

// The connection is gone, and with it every answer's destination: its calls
// stop, so their work (processes, transfers) ends instead of running unseen.
void Server::Impl::peer_disconnected(std::size_t socket, const std::string& routing_id) {
  std::vector<std::pair<CallKey, std::shared_ptr<CallState>>> orphans;
  for (auto it = calls.lower_bound(CallKey{socket, routing_id, 0});
       it != calls.end() && it->first.socket == socket && it->first.routing_id == routing_id; ++it) {
    orphans.emplace_back(it->first, it->second);
  }
  for (auto& [key, state] : orphans) stop_call(key, state, Status(ErrorCode::cancelled, "the client disconnected"));
}

void Server::Impl::start_call(std::size_t socket, const std::string& routing_id, const std::string& peer,
                              ParsedRequest& request, std::vector<zmq::message_t>& frames) {
  const Header& header = request.header;
  CallKey key{socket, routing_id, header.id};
  auto refuse = [&](const Status& status) { reject(key, status); };
  if (calls.count(key)) {
    return refuse(Status(ErrorCode::invalid_request, "header[1] id: request " + std::to_string(header.id) + " is already in flight on this connection"));
  }
  auto peer_entry = in_flight_per_peer.find({socket, routing_id});
  if (peer_entry != in_flight_per_peer.end() && peer_entry->second >= options.limits.max_in_flight) {
    return refuse(Status(ErrorCode::resource_exhausted, "more than " + std::to_string(options.limits.max_in_flight) +
                                                            " requests in flight on this connection; wait for some to finish"));
  }
  auto body = std::move(request.body);
  const MethodRegistry::Method* method = methods.find(header.method);
  if (!method) return refuse(Status(ErrorCode::unknown_method, "no method named '" + header.method + "'; sys.info lists them"));

  std::vector<zmq::message_t> attachments;
  for (std::size_t i = 3; i < frames.size(); ++i) attachments.push_back(std::move(frames[i]));
  ++calls_total;
  if (method->dispatch == MethodRegistry::Dispatch::io_thread) {
    // Runs to completion right here: nothing to register, no deadline to watch.
    auto state = std::make_shared<CallState>(header.id, header.method, std::nullopt, kDefaultWindow);
    CallContext call(state, std::move(body), std::move(attachments), peer, [](Outgoing&&) {});
    Outgoing out = finish_message(header.id, run_handler(method->handler, call), call);
    send_now(socket, routing_id, out);
    return;
  }

  std::optional<Clock::time_point> deadline;
  if (header.timeout_ms) {
    deadline = Clock::now() + std::chrono::milliseconds(std::min(header.timeout_ms, kMaxTimeoutMs));
  }
  auto state = std::make_shared<CallState>(header.id, header.method, deadline, header.credit ? header.credit : kDefaultWindow);
  auto send = [this, socket, routing_id, state](Outgoing&& out) {
    enqueue(Queued{socket, routing_id, std::move(out), state, false});
  };
  auto finish = [this, socket, routing_id, state](const Result<nlohmann::json>& result, CallContext& call) {
    enqueue(Queued{socket, routing_id, finish_message(state->id, result, call), state, /*final=*/true});
  };
  auto call_context = std::make_shared<CallContext>(state, std::move(body), std::move(attachments), peer, send, finish);

  calls.emplace(key, state);
  ++in_flight_per_peer[{socket, routing_id}];
  ++in_flight_total;
  if (deadline) deadlines.emplace(*deadline, key);

  if (method->fast && try_fast_path(method->fast, call_context)) return;
  auto run = [call_context, handler = &method->handler] {
    Result<nlohmann::json> result = run_handler(*handler, *call_context);
    call_context->answer(result);  // unless already answered: early, cancelled, deadline, shutdown
  };
  pool.submit(std::move(run));
}

void Server::Impl::deliver_data(const CallKey& key, nlohmann::json&& body, std::vector<zmq::message_t>& frames) {
  auto it = calls.find(key);
  if (it == calls.end()) return;  // late DATA for a call that has ended
  auto state = it->second;
  Incoming incoming{std::move(body), {}};
  for (std::size_t i = 3; i < frames.size(); ++i) incoming.attachments.push_back(std::move(frames[i]));
  if (state->deliver(std::move(incoming))) return;
  stop_call(key, state, Status(ErrorCode::resource_exhausted, "DATA beyond the credit the agent granted"));
}

void Server::Impl::stop_call(const CallKey& key, const std::shared_ptr<CallState>& state, const Status& reason) {
  if (!state->stop(reason)) return;
  if (auto callback = state->take_stop_callback()) pool.submit(std::move(callback));
  auto out = error_message(key.id, reason);
  send_now(key.socket, key.routing_id, out);
  erase_call(key);
}

void Server::Impl::erase_call(const CallKey& key) {
  auto it = calls.find(key);
  if (it == calls.end()) return;
  if (it->second->deadline) deadlines.erase({*it->second->deadline, key});
  calls.erase(it);
  --in_flight_total;
  auto peer = in_flight_per_peer.find({key.socket, key.routing_id});
  if (peer != in_flight_per_peer.end() && --peer->second == 0) in_flight_per_peer.erase(peer);
}

void Server::Impl::expire_deadlines() {
  auto now = Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    CallKey key = deadlines.begin()->second;
    auto it = calls.find(key);
    if (it == calls.end()) {
      deadlines.erase(deadlines.begin());
      continue;
    }
    auto state = it->second;
    stop_call(key, state, Status(ErrorCode::deadline_exceeded, "the request ran past its deadline"));
  }
}

int Server::Impl::next_deadline_ms() const {
  if (deadlines.empty()) return 1000;
  auto wait = deadlines.begin()->first - Clock::now();
  if (wait <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::min<long long>(1000, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
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
    impl->start_zap();
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
    impl->zap_thread.join();
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
  impl_->zap_thread.join();
  // impl_'s destructor joins the worker pool: handlers have seen their calls stop.
}

bool Server::watch(int fd, std::function<bool()> ready) {
  if (!ready) return false;
  {
    MutexLock lock(impl_->outbox_mutex);
    if (impl_->io_ended) return false;
    impl_->watch_commands.push_back({fd, std::move(ready), nullptr});
  }
  impl_->wake();
  return true;
}

void Server::unwatch(int fd) {
  bool on_io_thread = std::this_thread::get_id() == impl_->io_thread_id;
  auto done = on_io_thread ? nullptr : std::make_shared<std::promise<void>>();
  {
    MutexLock lock(impl_->outbox_mutex);
    if (impl_->io_ended) return;
    impl_->watch_commands.push_back({fd, nullptr, done});
  }
  impl_->wake();
  if (done) done->get_future().wait();
}

ServerStats Server::stats() const {
  return ServerStats{impl_->calls_total.load(), impl_->in_flight_total.load(), impl_->rejected_total.load()};
}

}  // namespace gpubox::rpc
