// CpuLinear: y = x W^T + b [+ residual] (a Linear's weight, [out, in]) or y = x W + b
// (GPT-2's Conv1D, [in, out]) for a few rows of x (a decode step, a short
// prompt) on an x86-64 CPU with AVX-512 or AVX2 and FMA, reading the weights
// once for all rows of x, split across LibTorch's intra-op threads. Where it
// applies, LibTorch's own linear (MKL) reads the weights at half the memory
// bandwidth or less: its matrix-vector product runs on one thread, and its
// products of 2 to 8 rows take twice as long as one. Products, bias and sums
// in float32, each output rounded once (to bfloat16 for bfloat16); the result
// does not depend on the number of threads.
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
  // [rows, out], or null: added to the product (a residual stream), after the
  // product was rounded to the element type, so that y is bit for bit the
  // unfused product plus the residual.
  const void* residual = nullptr;
};

inline constexpr std::int64_t kCpuLinearMaxRows = 8;

// Whether the kernel takes a product of this many rows: those where it beat
// LibTorch's own product (tests/bench/cpu_linear_bench.cpp). Always in
// float32. In bfloat16: up to 4 rows on a CPU with AVX512-BF16 (oneDNN's
// products overtake it beyond); from 2 rows on a CPU with AVX2 only (LibTorch's
// one-row product is as fast or faster); every row on AVX-512 without BF16 (not measured).
bool cpu_linear_worth_it(LinearElement element, std::int64_t rows);

// The instruction sets the kernel is built for, in order: a CPU with one has the ones before.
enum class CpuLinearIsa { none, avx2, avx512 };  // avx2: with FMA; avx512: F, BW, VL

// The best of them this CPU has, decided once; none: the kernel does not run here.
CpuLinearIsa cpu_linear_isa();
inline bool cpu_linear_available() { return cpu_linear_isa() != CpuLinearIsa::none; }
const char* to_string(CpuLinearIsa isa);

// Sets how many CPU threads the calling thread's parallel LibTorch ops and
// products use (OpenMP's count, which is the thread's own: a split model's
// ranks take their shares of the CPU this way). No effect in a build without OpenMP.
// REQUIRES: LibTorch's threads are set up on this thread (at::get_num_threads() was called).
void set_cpu_threads_of_this_thread(int threads);

// REQUIRES: 1 <= rows <= kCpuLinearMaxRows; in, out >= 1; this CPU has isa (not none).
void cpu_linear(const LinearProblem& problem, CpuLinearIsa isa = cpu_linear_isa());

}  // namespace gpubox::modeld
