#include "agent/methods/relay_frames.h"

#include <nlohmann/json.hpp>

#include "rpc/params.h"

namespace gpubox {

std::string_view relay_channel_name(RelayChannel channel) {
  switch (channel) {
    case RelayChannel::shell:
      return "shell";
    case RelayChannel::control:
      return "control";
    case RelayChannel::stdin_channel:
      return "stdin";
  }
  return "shell";
}

namespace {

Status refuse(const std::string& what) { return Status(ErrorCode::invalid_request, "kernel.relay: " + what); }

// The header frame must be a JSON object naming its msg_type.
Result<std::string> header_msg_type(const zmq::message_t& frame) {
  nlohmann::json header = nlohmann::json::parse(frame.to_string_view(), nullptr, false);
  if (!header.is_object()) return refuse("attachment 1 (the message's header) is not a JSON object");
  auto type = header.find("msg_type");
  if (type == header.end() || !type->is_string() || type->get_ref<const std::string&>().empty()) {
    return refuse("attachment 1 (the message's header) has no msg_type string");
  }
  return type->get<std::string>();
}

}  // namespace

Result<RelayInput> decode_relay_input(rpc::Incoming& incoming) {
  if (!incoming.body.is_object()) return refuse("expected a map body");
  rpc::ParamReader fields(incoming.body);
  auto channel = fields.string("ch");
  auto peer = fields.integer("peer", 0, kRelayMaxPeerId);
  auto close = fields.integer("close", 0, kRelayMaxPeerId);
  auto restart = fields.boolean("restart");
  if (Status status = fields.finish(); !status) return status;
  RelayInput input;
  int kinds = (channel ? 1 : 0) + (close ? 1 : 0) + (restart ? 1 : 0);
  if (kinds != 1) return refuse("expected exactly one of ch (a message), close (a peer) and restart");
  if (close) {
    if (peer || !incoming.attachments.empty()) return refuse("close takes no peer and no attachments");
    input.kind = RelayInput::Kind::close;
    input.peer = static_cast<std::uint32_t>(*close);
    return input;
  }
  if (restart) {
    if (!*restart || peer || !incoming.attachments.empty()) return refuse("restart must be true, alone");
    input.kind = RelayInput::Kind::restart;
    return input;
  }
  if (*channel == "shell") {
    input.channel = RelayChannel::shell;
  } else if (*channel == "control") {
    input.channel = RelayChannel::control;
  } else if (*channel == "stdin") {
    input.channel = RelayChannel::stdin_channel;
  } else {
    return refuse("ch: expected \"shell\", \"control\" or \"stdin\"");
  }
  if (!peer) return refuse("a message needs its peer (an integer)");
  if (incoming.attachments.size() < kRelayMinFrames) {
    return refuse("a message needs at least 5 attachments (signature, header, parent_header, metadata, content), got " +
                  std::to_string(incoming.attachments.size()));
  }
  auto type = header_msg_type(incoming.attachments[1]);
  if (!type) return type.status();
  input.peer = static_cast<std::uint32_t>(*peer);
  input.msg_type = std::move(*type);
  input.frames = std::move(incoming.attachments);
  return input;
}

}  // namespace gpubox
