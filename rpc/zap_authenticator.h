// ZapAuthenticator: the ZAP handler (RFC 27) of a server's ZeroMQ context; it
// admits a CURVE client only when its public key is on the allow-list. Its
// own thread owns its socket; start() and join() are called from the thread
// that owns the server.
#pragma once

#include <memory>
#include <thread>
#include <zmq.hpp>

#include "rpc/authorized_keys.h"

namespace gpubox::rpc {

class ZapAuthenticator {
 public:
  // authorized may be null: then every CURVE client is refused.
  explicit ZapAuthenticator(std::shared_ptr<AuthorizedKeys> authorized) : authorized_(std::move(authorized)) {}
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  // Binds the context's ZAP endpoint and starts answering there; throws zmq::error_t.
  void start(zmq::context_t& context);
  // Waits for the handler's thread to end. REQUIRES: the context was shut down.
  void join();

 private:
  void answer_requests();

  std::shared_ptr<AuthorizedKeys> authorized_;
  std::unique_ptr<zmq::socket_t> socket_;  // owned by thread_ once it runs
  std::thread thread_;
};

}  // namespace gpubox::rpc
