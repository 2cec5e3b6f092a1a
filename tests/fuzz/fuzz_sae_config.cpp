// hooks/sae_config.h's reader of SAELens' cfg.json, fed whole files. A config
// it accepts must have widths in range, a k within d_sae for TopK (0
// otherwise), and a known architecture and normalisation; anything else is
// an invalid_request, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hooks/sae_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (64 << 10)) return 0;  // a cfg.json is a few hundred bytes
  std::string_view text(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  auto config = gpubox::hooks::parse_sae_config(text, "cfg.json");
  if (!config) {
    if (config.status().code() != gpubox::ErrorCode::invalid_request) __builtin_trap();
    return 0;
  }
  if (config->d_in < 1 || config->d_sae < 1 || config->d_in > (1 << 24) || config->d_sae > (1 << 24)) __builtin_trap();
  bool topk = config->architecture == gpubox::hooks::SaeArchitecture::topk;
  if (topk && (config->k < 1 || config->k > config->d_sae)) __builtin_trap();
  if (!topk && (config->k != 0 || config->rescale_acts_by_decoder_norm)) __builtin_trap();
  if (std::string_view(gpubox::hooks::sae_architecture_name(config->architecture)).empty()) __builtin_trap();
  if (std::string_view(gpubox::hooks::sae_normalization_name(config->normalization)).empty()) __builtin_trap();
  return 0;
}
