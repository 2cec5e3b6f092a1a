#include "model/modeld/cpu_linear.h"

#include <cstdlib>

#if defined(__x86_64__)

#include <ATen/Parallel.h>
#include <algorithm>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <vector>

namespace gpubox::modeld {
namespace {

#define GPUBOX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define GPUBOX_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline

// Weight rows [out, in] per task handed to a thread: a multiple of every block height below.
constexpr std::int64_t kTaskRows = 48;
// Weight rows [in, out] per task (a multiple of 4).
constexpr std::int64_t kTaskDepth = 256;
// Fewer multiply-adds than this per thread cost more to hand out than they take.
constexpr std::int64_t kMinThreadWork = 1 << 16;

template <LinearElement E>
using Element = std::conditional_t<E == LinearElement::float32, float, c10::BFloat16>;

// 16 elements of a row from k on as float32; lanes outside mask are 0.
template <LinearElement E>
GPUBOX_AVX512_INLINE __m512 load16(const Element<E>* row, std::int64_t k, __mmask16 mask) {
  if constexpr (E == LinearElement::float32) {
    return _mm512_maskz_loadu_ps(mask, row + k);
  } else {  // a bfloat16 is the high half of the float32 it stands for
    __m256i half = _mm256_maskz_loadu_epi16(mask, row + k);
    // (the zero-masking forms: GCC 12 warns of the plain forms' undefined temporaries)
    __m512i widened = _mm512_maskz_cvtepu16_epi32(0xffff, half);
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, widened, 16));
  }
}

// The sum of v's 16 lanes (GCC 12's _mm512_reduce_add_ps warns of its own undefined temporaries).
GPUBOX_AVX512_INLINE float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

// ---- Weights [out, in]: each output is one dot product of a weight row.

// y[m][o + r] for the R weight rows from o on and the M rows of x (float32).
template <LinearElement E, int M, int R>
GPUBOX_AVX512 void dot_block(const LinearProblem& p, const float* x, std::int64_t o) {
  const auto* weight = static_cast<const Element<E>*>(p.w);
  const Element<E>* w[R];
  __m512 acc[R][M];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    w[r] = weight + (o + r) * p.in;
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  }
  const auto tail = static_cast<__mmask16>((1u << (p.in % 16)) - 1);
  for (std::int64_t k = 0; k < p.in; k += 16) {
    __mmask16 mask = k + 16 <= p.in ? static_cast<__mmask16>(0xffff) : tail;
    __m512 weights[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) weights[r] = load16<E>(w[r], k, mask);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      __m512 xs = _mm512_maskz_loadu_ps(mask, x + m * p.in + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(weights[r], xs, acc[r][m]);
    }
  }
  const auto* bias = static_cast<const Element<E>*>(p.bias);
  auto* y = static_cast<Element<E>*>(p.y);
  // Unrolled too: an accumulator indexed at run time anywhere would keep them all in memory.
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float b = bias ? static_cast<float>(bias[o + r]) : 0.0f;
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) y[m * p.out + o + r] = Element<E>(lane_sum(acc[r][m]) + b);
  }
}

// Threads split the weight rows, each output being one thread's: in blocks of
// R rows (R x M sums fit the 32 vector registers beside the loads), the rest
// one at a time.
template <LinearElement E, int M>
void out_in_product(const LinearProblem& p, const float* x) {
  constexpr int R = M <= 2 ? 4 : 3;
  std::int64_t tasks = (p.out + kTaskRows - 1) / kTaskRows;
  std::int64_t grain = std::max<std::int64_t>(1, kMinThreadWork / (kTaskRows * p.in * M));
  at::parallel_for(0, tasks, grain, [&](std::int64_t first, std::int64_t last) {
    std::int64_t o = first * kTaskRows, end = std::min(p.out, last * kTaskRows);
    for (; o + R <= end; o += R) dot_block<E, M, R>(p, x, o);
    for (; o < end; ++o) dot_block<E, M, 1>(p, x, o);
  });
}

// ---- Weights [in, out]: each output sums a column, so the weight is read
// row by row, D rows at a time, into partial sums of all outputs.

// part[m][:] += x[m][k + d] * W[k + d][:] for d < D.
template <LinearElement E, int M, int D>
GPUBOX_AVX512 void axpy_rows(const LinearProblem& p, const float* x, float* part, std::int64_t k) {
  const auto* weight = static_cast<const Element<E>*>(p.w) + k * p.out;
  for (std::int64_t c = 0; c < p.out; c += 16) {
    auto mask = static_cast<__mmask16>(p.out - c >= 16 ? 0xffff : (1u << (p.out - c)) - 1);
    __m512 w[D];
#pragma GCC unroll 4
    for (int d = 0; d < D; ++d) w[d] = load16<E>(weight + d * p.out, c, mask);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      __m512 sum = _mm512_maskz_loadu_ps(mask, part + m * p.out + c);
#pragma GCC unroll 4
      for (int d = 0; d < D; ++d) sum = _mm512_fmadd_ps(_mm512_set1_ps(x[m * p.in + k + d]), w[d], sum);
      _mm512_mask_storeu_ps(part + m * p.out + c, mask, sum);
    }
  }
}

// Tasks of kTaskDepth weight rows, each into partial sums of its own, added
// up in task order afterwards: the result does not depend on the thread count.
template <LinearElement E, int M>
void in_out_product(const LinearProblem& p, const float* x) {
  std::int64_t tasks = (p.in + kTaskDepth - 1) / kTaskDepth, size = M * p.out;
  std::vector<float> partials(static_cast<std::size_t>(tasks * size), 0.0f);
  std::int64_t grain = std::max<std::int64_t>(1, kMinThreadWork / (kTaskDepth * p.out * M));
  at::parallel_for(0, tasks, grain, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t task = first; task < last; ++task) {
      float* part = partials.data() + task * size;
      std::int64_t k = task * kTaskDepth, end = std::min(p.in, k + kTaskDepth);
      for (; k + 4 <= end; k += 4) axpy_rows<E, M, 4>(p, x, part, k);
      for (; k < end; ++k) axpy_rows<E, M, 1>(p, x, part, k);
    }
  });
  const auto* bias = static_cast<const Element<E>*>(p.bias);
  auto* y = static_cast<Element<E>*>(p.y);
  for (std::int64_t i = 0; i < size; ++i) {
    float sum = partials[static_cast<std::size_t>(i)];
    for (std::int64_t task = 1; task < tasks; ++task) sum += partials[static_cast<std::size_t>(task * size + i)];
    y[i] = Element<E>(bias ? sum + static_cast<float>(bias[i % p.out]) : sum);
  }
}

template <LinearElement E, int M>
void run(const LinearProblem& p, const float* x) {
  if (p.layout == WeightLayout::out_in) return out_in_product<E, M>(p, x);
  in_out_product<E, M>(p, x);
}

template <LinearElement E>
void dispatch(const LinearProblem& p, const float* x) {
  switch (p.rows) {
    case 1: return run<E, 1>(p, x);
    case 2: return run<E, 2>(p, x);
    case 3: return run<E, 3>(p, x);
    case 4: return run<E, 4>(p, x);
    case 5: return run<E, 5>(p, x);
    case 6: return run<E, 6>(p, x);
    case 7: return run<E, 7>(p, x);
    default: return run<E, 8>(p, x);
  }
}

}  // namespace

bool cpu_linear_available() {
  static const bool available =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return available;
}

void cpu_linear(const LinearProblem& problem) {
  if (problem.element == LinearElement::float32) {
    return dispatch<LinearElement::float32>(problem, static_cast<const float*>(problem.x));
  }
  // x is read once per weight row: widened to float32 once, up front.
  const auto* x = static_cast<const c10::BFloat16*>(problem.x);
  std::vector<float> widened(x, x + problem.rows * problem.in);
  dispatch<LinearElement::bfloat16>(problem, widened.data());
}

}  // namespace gpubox::modeld

#else  // not x86-64: LibTorch does every product

namespace gpubox::modeld {

bool cpu_linear_available() { return false; }
void cpu_linear(const LinearProblem&) { std::abort(); }

}  // namespace gpubox::modeld

#endif
