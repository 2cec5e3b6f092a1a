// Fuzzes rpc::ParamReader over decoded bodies. The first two input bytes
// choose which getters run and which are required; the rest is the body.
// Every getter must fail cleanly or return a value of the promised shape.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rpc/params.h"
#include "rpc/protocol.h"

using namespace gpubox;

namespace {

void check(bool holds) {
  if (!holds) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 || size > 64 * 1024) return -1;
  unsigned select = data[0] | (static_cast<unsigned>(data[1]) << 8);
  std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);  // NOLINT: bytes as chars
  auto body = rpc::decode_body(bytes, 64 * 1024);
  if (!body) return 0;
  auto bit = [&](int n) { return ((select >> n) & 1) != 0; };

  rpc::ParamReader params(*body);
  // The names proc.exec, proc.signal and fs.* read, with their bounds.
  if (bit(0)) {
    if (auto argv = params.string_list("argv", bit(8))) {
      for (const auto& arg : *argv) check(arg.find('\0') == std::string::npos);
    }
  }
  if (bit(1)) (void)params.string("shell", bit(9));
  if (bit(2)) (void)params.string_map("env");
  if (bit(3)) {
    if (auto path = params.path("cwd", bit(10))) check(!path->empty() && (*path)[0] == '/' && path->find('\0') == std::string::npos);
  }
  if (bit(4)) {
    if (auto timeout = params.number("timeout_s", 0, 30 * 24 * 3600)) check(*timeout >= 0 && *timeout <= 30 * 24 * 3600);
  }
  if (bit(5)) {
    if (auto max = params.integer("max_output_bytes", 0, std::int64_t{1} << 32, bit(11))) check(*max >= 0 && *max <= (std::int64_t{1} << 32));
  }
  if (bit(6)) (void)params.bytes("stdin", bit(12));
  if (bit(7)) {
    if (auto pid = params.integer("pid", 2, 4'194'304, bit(13))) check(*pid >= 2 && *pid <= 4'194'304);
    if (auto sig = params.integer("signal", -64, 64)) check(*sig >= -64 && *sig <= 64);
    if (auto big = params.integer("offset", INT64_MIN, INT64_MAX)) (void)big;
  }
  if (bit(14)) (void)params.boolean("group");
  if (bit(15)) (void)params.raw("details");
  Status before = params.status();
  Status finished = params.finish();
  check(finished.is_ok() || finished.code() == ErrorCode::invalid_request);
  check(before.is_ok() || finished.message() == before.message());
  if (finished.is_ok()) {
    // Every field was asked for by some getter.
    for (const auto& [key, value] : body->items()) {
      check(key == "argv" || key == "shell" || key == "env" || key == "cwd" || key == "timeout_s" ||
            key == "max_output_bytes" || key == "stdin" || key == "pid" || key == "signal" || key == "offset" ||
            key == "group" || key == "details");
    }
  }
  return 0;
}
