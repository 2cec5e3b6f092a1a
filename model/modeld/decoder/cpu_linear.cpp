#include "model/modeld/decoder/cpu_linear.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <cstdlib>

namespace gpubox::modeld {

const char* to_string(CpuLinearIsa isa) {
  switch (isa) {
    case CpuLinearIsa::avx512: return "avx512";
    case CpuLinearIsa::avx2: return "avx2";
    case CpuLinearIsa::none: break;
  }
  return "none";
}

}  // namespace gpubox::modeld

#if defined(__x86_64__)

#include <ATen/Parallel.h>
#include <algorithm>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <vector>

namespace gpubox::modeld {
namespace {

// Weight rows [out, in] per task handed to a thread: a multiple of every block height.
constexpr std::int64_t kTaskRows = 48;
// Weight rows [in, out] per task (a multiple of 4).
constexpr std::int64_t kTaskDepth = 256;
// Fewer multiply-adds than this per thread cost more to hand out than they take.
constexpr std::int64_t kMinThreadWork = 1 << 16;

template <LinearElement E>
using Element = std::conditional_t<E == LinearElement::float32, float, c10::BFloat16>;

namespace avx512 {

#define GPUBOX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define GPUBOX_VEC GPUBOX_TARGET __attribute__((always_inline)) static inline

// 16 float32 lanes; a tail is a mask. 32 registers: R x M sums of 4 x 2 or 3 x 8.
struct Vec {
  using V = __m512;
  static constexpr int lanes = 16;
  template <int M>
  static constexpr int block_rows = M <= 2 ? 4 : 3;

  GPUBOX_VEC __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  GPUBOX_VEC V zero() { return _mm512_setzero_ps(); }
  GPUBOX_VEC V broadcast(float f) { return _mm512_set1_ps(f); }
  GPUBOX_VEC V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  GPUBOX_VEC V load(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  GPUBOX_VEC void store(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  // A bfloat16 is the high half of the float32 it stands for. (The zero-masking
  // forms: GCC 12 warns of the plain forms' undefined temporaries.)
  GPUBOX_VEC V load_bf16(const std::uint16_t* p, int n) {
    __m512i widened = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(mask(n), p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, widened, 16));
  }
};

#include "model/modeld/decoder/cpu_linear_kernels.inc"

#undef GPUBOX_VEC
#undef GPUBOX_TARGET

}  // namespace avx512

namespace avx2 {

#define GPUBOX_TARGET __attribute__((target("avx2,fma")))
#define GPUBOX_VEC GPUBOX_TARGET __attribute__((always_inline)) static inline

// 8 float32 lanes; a tail goes through masked moves (float32) or a zeroed
// copy (bfloat16). 16 registers: R x M sums of at most 4 x 2, 3 x 3, 2 x 6, 1 x 8.
struct Vec {
  using V = __m256;
  static constexpr int lanes = 8;
  template <int M>
  static constexpr int block_rows = M <= 2 ? 4 : M == 3 ? 3 : M <= 6 ? 2 : 1;

  GPUBOX_VEC __m256i mask(int n) {  // lanes below n
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  GPUBOX_VEC V zero() { return _mm256_setzero_ps(); }
  GPUBOX_VEC V broadcast(float f) { return _mm256_set1_ps(f); }
  GPUBOX_VEC V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  GPUBOX_VEC V load(const float* p, int n) { return n == lanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(n)); }
  GPUBOX_VEC void store(float* p, V v, int n) {
    if (n == lanes) return _mm256_storeu_ps(p, v);
    _mm256_maskstore_ps(p, mask(n), v);
  }
  GPUBOX_VEC V load_bf16(const std::uint16_t* p, int n) {
    alignas(16) std::uint16_t tail[lanes] = {};
    if (n != lanes) {
      std::copy(p, p + n, tail);
      p = tail;
    }
    __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));  // NOLINT
    return _mm256_castsi256_ps(_mm256_slli_epi32(widened, 16));
  }
};

#include "model/modeld/decoder/cpu_linear_kernels.inc"

#undef GPUBOX_VEC
#undef GPUBOX_TARGET

}  // namespace avx2

CpuLinearIsa detect_isa() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return CpuLinearIsa::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuLinearIsa::avx2;
  return CpuLinearIsa::none;
}

template <LinearElement E>
void product(const LinearProblem& p, const float* x, CpuLinearIsa isa) {
  if (isa == CpuLinearIsa::avx512) return avx512::product<E>(p, x);
  if (isa == CpuLinearIsa::avx2) return avx2::product<E>(p, x);
  std::abort();
}

}  // namespace

CpuLinearIsa cpu_linear_isa() {
  static const CpuLinearIsa isa = detect_isa();
  return isa;
}

bool cpu_linear_worth_it(LinearElement element, std::int64_t rows) {
  if (rows < 1 || rows > kCpuLinearMaxRows) return false;
  if (element == LinearElement::float32) return true;
  static const bool avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  if (avx512_bf16) return rows <= 4;
  return cpu_linear_isa() == CpuLinearIsa::avx512 || rows >= 2;
}

void cpu_linear(const LinearProblem& problem, CpuLinearIsa isa) {
  if (problem.element == LinearElement::float32) {
    return product<LinearElement::float32>(problem, static_cast<const float*>(problem.x), isa);
  }
  // x is read once per weight row: widened to float32 once, up front.
  const auto* x = static_cast<const c10::BFloat16*>(problem.x);
  std::vector<float> widened(x, x + problem.rows * problem.in);
  product<LinearElement::bfloat16>(problem, widened.data(), isa);
}

}  // namespace gpubox::modeld

#else  // not x86-64: LibTorch does every product

namespace gpubox::modeld {

CpuLinearIsa cpu_linear_isa() { return CpuLinearIsa::none; }
bool cpu_linear_worth_it(LinearElement, std::int64_t) { return false; }
void cpu_linear(const LinearProblem&, CpuLinearIsa) { std::abort(); }

}  // namespace gpubox::modeld

#endif

namespace gpubox::modeld {

void set_cpu_threads_of_this_thread(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

}  // namespace gpubox::modeld
