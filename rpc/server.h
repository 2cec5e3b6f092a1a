// Server: the agent's one RPC endpoint set. An I/O thread owns every ZeroMQ
// socket (ROUTER per endpoint, CURVE on tcp://, a ZAP handler for the
// allow-list); handlers run on a worker pool so a long call never delays
// another; inline methods (sys.ping) and fast paths run on the I/O thread
// itself, which also watches other descriptors for them (FdWatch). Construct
// and destroy from one thread; stats(), watch() and unwatch() may be called
// from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rpc/authorized_keys.h"
#include "rpc/call.h"
#include "rpc/fd_watch.h"
#include "rpc/method_registry.h"
#include "rpc/protocol.h"

namespace gpubox::rpc {

struct ServerOptions {
  std::vector<std::string> endpoints;             // ipc://PATH or tcp://HOST:PORT (port 0: any free port)
  std::string secret_key;                         // Z85; required when an endpoint is tcp://
  std::shared_ptr<AuthorizedKeys> authorized;     // required when an endpoint is tcp://
  Limits limits;
  std::size_t max_workers = 64;
  // Called (on the I/O thread) whenever a request arrives; the idle watchdog's input.
  std::function<void()> on_activity;
};

struct ServerStats {
  std::uint64_t calls = 0;       // CALLs accepted
  std::uint64_t in_flight = 0;   // unfinished now
  std::uint64_t rejected = 0;    // messages refused before reaching a handler
};

class Server : public FdWatch {
 public:
  // Binds every endpoint and starts the I/O thread. The registry must outlive the server.
  static Result<std::unique_ptr<Server>> start(ServerOptions options, const MethodRegistry& methods);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Stops every call in flight (error "unavailable"), waits for the handlers, closes the sockets.
  ~Server() override;

  // FdWatch, on the I/O thread: a ready function runs there between messages.
  bool watch(int fd, std::function<bool()> ready) override;
  void unwatch(int fd) override;

  // The endpoints as bound (a tcp port 0 replaced by the port chosen).
  const std::vector<std::string>& endpoints() const { return bound_; }
  std::string public_key() const { return public_key_; }
  ServerStats stats() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> bound_;
  std::string public_key_;
};

}  // namespace gpubox::rpc
