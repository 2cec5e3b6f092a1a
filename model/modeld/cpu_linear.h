// CpuLinear: y = x W^T + b (a Linear's weight, [out, in]) or y = x W + b
// (GPT-2's Conv1D, [in, out]) for a few rows of x (a decode step, a short
// prompt) on an x86-64 CPU with AVX-512, reading the weights once for all rows
// of x, split across LibTorch's intra-op threads. Where it applies, LibTorch's
// own linear (MKL) reads the weights at half the memory bandwidth or less: its
// matrix-vector product runs on one thread, and its products of 2 to 8 rows
// take twice as long as one. Products, bias and sums in float32, each output
// rounded once (to bfloat16 for bfloat16); the result does not depend on the
// number of threads.
// No ATen types: the decoder decides where it applies (decoder.cpp).
#pragma once

#include <cstdint>

namespace gpubox::modeld {

enum class LinearElement { float32, bfloat16 };
enum class WeightLayout { out_in, in_out };  // a Linear's [out, in]; a Conv1D's [in, out]

struct LinearProblem {
  LinearElement element = LinearElement::float32;  // of x, w, bias and y alike
  const void* x = nullptr;     // [rows, in], rows contiguous
  WeightLayout layout = WeightLayout::out_in;
  const void* w = nullptr;     // [out, in] or [in, out] by layout, rows contiguous
  const void* bias = nullptr;  // [out], or null
  void* y = nullptr;           // [rows, out]
  std::int64_t rows = 0, in = 0, out = 0;
};

inline constexpr std::int64_t kCpuLinearMaxRows = 8;

// The most rows at which the kernel beats LibTorch's own product on the dev
// VM (tests/bench/cpu_linear_bench.cpp): beyond 4 rows of bfloat16, oneDNN's
// AVX512-BF16 products overtake it.
inline std::int64_t cpu_linear_rows_worth_it(LinearElement element) {
  return element == LinearElement::float32 ? kCpuLinearMaxRows : 4;
}

// Whether this CPU runs the kernel (AVX-512 F, BW and VL), decided once.
bool cpu_linear_available();

// REQUIRES: cpu_linear_available(); 1 <= rows <= kCpuLinearMaxRows; in, out >= 1.
void cpu_linear(const LinearProblem& problem);

}  // namespace gpubox::modeld
