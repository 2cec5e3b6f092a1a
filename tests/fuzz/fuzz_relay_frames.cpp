// Fuzzes the bytes `gpubox attach` relays: frame 0 is a kernel.relay DATA
// body (msgpack), the rest its attachments, as the agent's decoder takes them;
// the same frames are also read the way the host reads a local frontend's
// message (delimiter, header, HMAC check) and frame 1 as a connection file.
// Nothing may throw or crash, and whatever is accepted must hold what the
// relay relies on.
#include <cstdint>
#include <cstdlib>

#include "agent/methods/relay_frames.h"
#include "fuzz_input.h"
#include "host/attach/connection_file.h"
#include "host/attach/jupyter_wire.h"
#include "rpc/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return -1;
  auto frames = gpubox::fuzz::split_frames(data, size, 70);
  if (frames.empty()) return 0;

  // The agent's side: a DATA message of kernel.relay.
  auto body = gpubox::rpc::decode_body(frames[0], 1 << 20);
  if (body) {
    gpubox::rpc::Incoming incoming{std::move(*body), {}};
    for (std::size_t i = 1; i < frames.size(); ++i) incoming.attachments.emplace_back(frames[i].data(), frames[i].size());
    std::size_t attachments = incoming.attachments.size();
    auto input = gpubox::decode_relay_input(incoming);
    if (input && input->kind == gpubox::RelayInput::Kind::message) {
      if (input->frames.size() != attachments || attachments < gpubox::kRelayMinFrames || input->msg_type.empty()) std::abort();
    }
    if (input && input->kind != gpubox::RelayInput::Kind::message && attachments != 0) std::abort();
  }

  // The host's side: a frontend's multipart message on a local ROUTER.
  std::vector<zmq::message_t> message;
  for (auto frame : frames) message.emplace_back(frame.data(), frame.size());
  auto delimiter = gpubox::host::locate_delimiter(message);
  if (delimiter) {
    std::size_t d = *delimiter;
    if (message.size() - d - 1 < gpubox::host::kJupyterParts) std::abort();
    (void)gpubox::host::header_msg_type(message[d + 2].to_string_view());
    gpubox::host::HmacSigner signer("fuzz-key");
    std::string signature = signer.sign(&message[d + 2]);
    if (!signer.verify(signature, &message[d + 2])) std::abort();
    if (signer.verify(message[d + 1].to_string_view(), &message[d + 2]) != (message[d + 1].to_string_view() == signature)) {
      std::abort();
    }
  }
  if (frames.size() > 1) {
    auto info = gpubox::host::parse_connection_file(frames[1]);
    if (info && (info->shell_port < 1 || info->hb_port > 65535)) std::abort();
  }
  return 0;
}
