// A call's life on the I/O thread: started (or refused), fed the client's
// DATA, stopped (cancel, deadline, disconnect, shutdown) and unregistered.
#include "rpc/server_impl.h"

namespace gpubox::rpc {
namespace {

// Deadlines beyond this (about 100 years) are treated as this, so that
// now + timeout cannot overflow the clock's nanosecond count.
constexpr std::uint64_t kMaxTimeoutMs = 100ull * 365 * 24 * 3600 * 1000;

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

}  // namespace gpubox::rpc
