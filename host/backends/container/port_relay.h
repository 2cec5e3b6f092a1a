// PortRelay: publishes one TCP port of a network namespace that has nothing
// but loopback (a container run with --network none, where the engine cannot
// publish ports) on an address of the host's, as Docker's userland proxy does.
// A detached process listens in the host's namespace, then enters the
// container's: every connection it accepts is spliced to 127.0.0.1:PORT
// there, and nothing in the container can reach out through it. It exits
// when the container's PID 1 does. start_port_relay forks: call it while the
// caller has one thread. Needs the right to enter the namespace (root, or the
// engine's own user for a rootless engine's containers).
#pragma once

#include <cstdint>
#include <string>

#include "host/process_identity.h"
#include "base/status.h"

namespace gpubox::host {

struct RelayStarted {
  ProcessIdentity relay;  // the relay process, detached (it outlives the caller)
  std::uint16_t port = 0; // the host port it listens on (chosen by the kernel when 0 was asked)
};

// Listens on host_ip:host_port (0: any free port) and relays to
// 127.0.0.1:target_port in the network namespace of container_pid, until
// container_pid exits. invalid_request when the address cannot be bound.
Result<RelayStarted> start_port_relay(pid_t container_pid, const std::string& host_ip, std::uint16_t host_port,
                                      std::uint16_t target_port);

}  // namespace gpubox::host
