// `gpubox attach`'s relay: serves a sandbox's kernel to local Jupyter
// frontends on 127.0.0.1 sockets laid out by a connection file (ROUTERs for
// shell, control and stdin, an XPUB for iopub, a heartbeat echo), carrying
// their messages over one kernel.relay RPC stream (rpc/PROTOCOL.md, "Kernel
// relay"). Each frontend message is verified with the local key and re-signed
// with the kernel's, which the agent hands over on the stream (CURVE-encrypted
// on tcp://); the kernel's messages are re-signed with the local key. Every
// frontend (routing identity) gets its own peer on the agent, so replies and
// input requests reach the frontend that asked. A shutdown_request is
// answered here and ends the attach; the sandbox's kernel lives on (with
// restart: true its executor restarts first). One thread owns everything here.
#pragma once

#include <functional>
#include <memory>
#include <zmq.hpp>

#include "host/attach/connection_file.h"
#include "rpc/client.h"
#include "base/status.h"

namespace gpubox::host {

class AttachRelay {
 public:
  // Binds the five local sockets; a port of 0 picks a free one, reported by connection().
  static Result<std::unique_ptr<AttachRelay>> bind(ConnectionInfo local);
  AttachRelay(const AttachRelay&) = delete;
  AttachRelay& operator=(const AttachRelay&) = delete;
  ~AttachRelay();

  const ConnectionInfo& connection() const { return local_; }

  enum class Ending {
    stopped,   // stop_fd became readable (a signal)
    shutdown,  // a frontend sent shutdown_request; it was answered
  };
  // Opens kernel.relay on client and serves until one of the endings;
  // on_ready runs once the agent has opened the relay (before it, no frontend
  // message is read); its error ends the run. unavailable when the agent goes away (agent_alive()
  // false, checked every second, or the stream's error); the agent's error
  // otherwise. ready() says whether on_ready ran.
  Result<Ending> run(rpc::Client& client, int stop_fd, const std::function<bool()>& agent_alive,
                     const std::function<Status()>& on_ready);
  bool ready() const;

 private:
  struct Impl;
  explicit AttachRelay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  ConnectionInfo local_;
};

}  // namespace gpubox::host
