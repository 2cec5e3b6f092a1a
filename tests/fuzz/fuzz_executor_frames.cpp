// Fuzzes what the agent reads from the Python executor's channel, which user
// code can write to: any bytes are split into frames (never more bytes than
// arrived, never an oversized allocation), and each frame either fails to
// parse or is judged by well_formed_frame without throwing.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernel/frame_channel.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 60000) return -1;  // one pipe's worth, so the write below never blocks
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) std::abort();
  if (size > 0 && ::write(fds[1], data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fds[1]);
  gpubox::kernel::FrameReader reader;
  std::size_t framed = 0;
  gpubox::kernel::FrameReader::Fill fill;
  do {
    fill = reader.fill(fds[0]);
    std::string payload;
    while (reader.next(payload)) {
      framed += 4 + payload.size();
      if (framed > size) std::abort();
      auto frame = nlohmann::json::parse(payload, nullptr, false);
      std::string why;
      if (!frame.is_discarded() && !gpubox::kernel::well_formed_frame(frame, &why) && why.empty()) std::abort();
    }
  } while (fill == gpubox::kernel::FrameReader::Fill::more);
  ::close(fds[0]);
  return 0;
}
