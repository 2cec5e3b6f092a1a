// The host's side of a kernel.relay stream as the agent reads it
// (rpc/PROTOCOL.md, "Kernel relay"): each DATA message decoded and checked
// before anything reaches the kernel's sockets. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "rpc/call.h"
#include "base/status.h"

namespace gpubox {

enum class RelayChannel { shell, control, stdin_channel };
std::string_view relay_channel_name(RelayChannel channel);

// A Jupyter message has a signature, header, parent header, metadata and
// content after its delimiter; buffers may follow, up to the attachment limit.
inline constexpr std::size_t kRelayMinFrames = 5;
inline constexpr std::uint32_t kRelayMaxPeerId = 0xffffffffu;

// One DATA message from the host.
struct RelayInput {
  enum class Kind { message, close, restart };
  Kind kind = Kind::message;
  RelayChannel channel = RelayChannel::shell;  // message
  std::uint32_t peer = 0;                      // message, close
  std::string msg_type;                        // message: the header's msg_type
  // message: signature, header, parent_header, metadata, content, buffers…
  std::vector<zmq::message_t> frames;
};

// {"ch": "shell"|"control"|"stdin", "peer": uint} with the message's frames
// as attachments; {"close": peer}; {"restart": true}. Anything else is
// invalid_request naming what is wrong; the attachments are moved out.
Result<RelayInput> decode_relay_input(rpc::Incoming& incoming);

}  // namespace gpubox
