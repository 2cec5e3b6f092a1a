// CpuLinear against a double-precision product of the same inputs: each
// instruction set this CPU has, both weight layouts, float32 and bfloat16,
// every row count it takes, widths around the 8- and 16-lane, block and task
// edges, with and without bias, on one thread and on several; and the residual
// it adds after the product's rounding.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model/modeld/decoder/cpu_linear.h"

namespace gpubox::modeld {
namespace {

struct Shape {
  std::int64_t in, out;
};

struct Case {
  std::int64_t rows;
  Shape shape;
  WeightLayout layout;
  bool bfloat16, with_bias;
  CpuLinearIsa isa;
};

// W[o][k] of the problem's weight in either layout.
float weight_at(const std::vector<float>& w, const Case& c, std::int64_t o, std::int64_t k) {
  auto index = c.layout == WeightLayout::out_in ? o * c.shape.in + k : k * c.shape.out + o;
  return w[static_cast<std::size_t>(index)];
}

// Inputs of one problem in float32 (bfloat16's values exactly, for bfloat16).
struct Inputs {
  std::vector<float> x, w, bias;
};

Inputs random_inputs(std::int64_t rows, Shape shape, bool bfloat16, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto fill = [&](std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& value : v) value = bfloat16 ? static_cast<float>(c10::BFloat16(uniform(random))) : uniform(random);
    return v;
  };
  return {fill(rows * shape.in), fill(shape.out * shape.in), fill(shape.out)};
}

// y from the kernel, as float32.
std::vector<float> run_kernel(const Inputs& in, const Case& c) {
  std::vector<float> y(static_cast<std::size_t>(c.rows * c.shape.out));
  if (!c.bfloat16) {
    cpu_linear({LinearElement::float32, in.x.data(), c.layout, in.w.data(), c.with_bias ? in.bias.data() : nullptr,
                y.data(), c.rows, c.shape.in, c.shape.out},
               c.isa);
    return y;
  }
  auto narrow = [](const std::vector<float>& v) { return std::vector<c10::BFloat16>(v.begin(), v.end()); };
  std::vector<c10::BFloat16> x = narrow(in.x), w = narrow(in.w), bias = narrow(in.bias), out(y.size());
  cpu_linear({LinearElement::bfloat16, x.data(), c.layout, w.data(), c.with_bias ? bias.data() : nullptr, out.data(),
              c.rows, c.shape.in, c.shape.out},
             c.isa);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(out[i]);
  return y;
}

// Every output against the product in double. Tolerance: float32 sums of
// `in` products in L lanes (16; AVX2: 8) then across the lanes err by at most
// about (in / L + L) float32 roundings of the sum of the products' magnitudes;
// bfloat16 adds the output's own rounding, half a unit in its 8th bit. (The
// [in, out] layout sums 4 products at a time into partial sums of 256 rows,
// then those: fewer roundings still.)
void expect_close(const Inputs& in, const std::vector<float>& y, const Case& c) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double lanes = c.isa == CpuLinearIsa::avx512 ? 16 : 8;
  for (std::int64_t m = 0; m < c.rows; ++m) {
    for (std::int64_t o = 0; o < c.shape.out; ++o) {
      double exact = c.with_bias ? static_cast<double>(in.bias[static_cast<std::size_t>(o)]) : 0.0;
      double magnitude = std::fabs(exact);
      for (std::int64_t k = 0; k < c.shape.in; ++k) {
        double term = static_cast<double>(in.x[static_cast<std::size_t>(m * c.shape.in + k)]) *
                      static_cast<double>(weight_at(in.w, c, o, k));
        exact += term;
        magnitude += std::fabs(term);
      }
      double tolerance = (static_cast<double>(c.shape.in) / lanes + lanes + 1) * eps * magnitude;
      if (c.bfloat16) tolerance += std::ldexp(std::fabs(exact), -8);
      double got = y[static_cast<std::size_t>(m * c.shape.out + o)];
      ASSERT_NEAR(got, exact, tolerance) << (c.layout == WeightLayout::out_in ? "[out, in]" : "[in, out]")
                                         << (c.bfloat16 ? " bfloat16" : " float32") << ", rows " << c.rows
                                         << ", in " << c.shape.in << ", out " << c.shape.out << ", row " << m
                                         << ", output " << o;
    }
  }
}

using Param = std::tuple<WeightLayout, CpuLinearIsa>;

class CpuLinearTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (isa() > cpu_linear_isa()) GTEST_SKIP() << "this CPU lacks " << to_string(isa());
  }
  static WeightLayout layout() { return std::get<0>(GetParam()); }
  static CpuLinearIsa isa() { return std::get<1>(GetParam()); }
  void check_every_shape(bool bfloat16) {
    const std::vector<Shape> shapes = {{1, 1},   {15, 7},   {16, 4},    {17, 13},  {33, 48},
                                       {64, 49}, {100, 97}, {1024, 200}, {517, 31}};
    for (std::int64_t rows = 1; rows <= kCpuLinearMaxRows; ++rows) {
      for (Shape shape : shapes) {
        for (bool with_bias : {false, true}) {
          Case c{rows, shape, layout(), bfloat16, with_bias, isa()};
          Inputs in = random_inputs(rows, shape, bfloat16, static_cast<unsigned>(rows * 131 + shape.in));
          expect_close(in, run_kernel(in, c), c);
        }
      }
    }
  }
};

TEST_P(CpuLinearTest, Float32MatchesTheProductInDouble) { check_every_shape(false); }

TEST_P(CpuLinearTest, Bfloat16MatchesTheProductInDouble) { check_every_shape(true); }

// A product large enough to be split across threads: right, and the same
// bits as on one thread (each output is one thread's, or its partial sums
// are added in one order, whatever the split).
TEST_P(CpuLinearTest, SplitAcrossThreadsGivesTheSameBits) {
  for (std::int64_t rows : {1, 8}) {
    Case c{rows, {1000, 3001}, layout(), false, true, isa()};
    Inputs in = random_inputs(rows, c.shape, false, 7);
    int threads = at::get_num_threads();
    at::set_num_threads(1);
    std::vector<float> alone = run_kernel(in, c);
    at::set_num_threads(std::max(threads, 2));
    std::vector<float> split = run_kernel(in, c);
    at::set_num_threads(threads);
    EXPECT_EQ(alone, split) << "rows " << rows;
    expect_close(in, split, c);
  }
}

// A residual goes in after the product's own rounding: y is bit for bit the
// product without it, plus the residual, rounded to the element type (what
// adding two tensors of that type gives), in float32 and bfloat16.
TEST_P(CpuLinearTest, AResidualIsAddedAfterTheProductsRounding) {
  for (bool bfloat16 : {false, true}) {
    for (std::int64_t rows : {1, 3}) {
      Shape shape{100, 97};
      Inputs in = random_inputs(rows, shape, bfloat16, 11);
      Inputs other = random_inputs(rows, {shape.out, 1}, bfloat16, 12);  // x of [rows, out]: the residual
      const std::vector<float>& residual = other.x;
      Case c{rows, shape, layout(), bfloat16, true, isa()};
      std::vector<float> plain = run_kernel(in, c);
      std::vector<float> fused(plain.size());
      if (!bfloat16) {
        cpu_linear({LinearElement::float32, in.x.data(), c.layout, in.w.data(), in.bias.data(), fused.data(), rows,
                    shape.in, shape.out, residual.data()},
                   c.isa);
      } else {
        auto narrow = [](const std::vector<float>& v) { return std::vector<c10::BFloat16>(v.begin(), v.end()); };
        std::vector<c10::BFloat16> x = narrow(in.x), w = narrow(in.w), bias = narrow(in.bias), add = narrow(residual);
        std::vector<c10::BFloat16> out(fused.size());
        cpu_linear({LinearElement::bfloat16, x.data(), c.layout, w.data(), bias.data(), out.data(), rows, shape.in,
                    shape.out, add.data()},
                   c.isa);
        for (std::size_t i = 0; i < out.size(); ++i) fused[i] = static_cast<float>(out[i]);
      }
      for (std::size_t i = 0; i < plain.size(); ++i) {
        float want = plain[i] + residual[i];
        if (bfloat16) want = static_cast<float>(c10::BFloat16(want));
        ASSERT_EQ(fused[i], want) << (bfloat16 ? "bfloat16" : "float32") << ", rows " << rows << ", output " << i;
      }
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& param_info) {
  return std::string(std::get<0>(param_info.param) == WeightLayout::out_in ? "OutIn" : "InOut") + "_" +
         to_string(std::get<1>(param_info.param));
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndIsas, CpuLinearTest,
                         ::testing::Combine(::testing::Values(WeightLayout::out_in, WeightLayout::in_out),
                                            ::testing::Values(CpuLinearIsa::avx2, CpuLinearIsa::avx512)),
                         param_name);

}  // namespace
}  // namespace gpubox::modeld
