// CpuLinear beside LibTorch's own linear on the same weights, from one run:
// every linear of one decode step (one token per row) of the model bench's
// 1 GB Llama ([out, in] weights, at::linear) and of GPT-2 small ([in, out]
// Conv1D weights, at::addmm), float32 and bfloat16, 1 to 8 rows, at
// LibTorch's default thread count. Median of --rounds passes over all the
// layers, each product written into a fresh output as the decoder does.
//
// usage: build/bin/gpubox_bench_cpu_linear [--rounds 9]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "model/modeld/decoder/cpu_linear.h"

namespace {

using gpubox::modeld::LinearElement;
using gpubox::modeld::WeightLayout;

struct Layer {
  at::Tensor w, bias;  // bias undefined for Llama
};

struct Model {
  const char* name;
  WeightLayout layout;
  std::vector<Layer> layers;
};

// The weights of one decode step; each [out, in] or [in, out] by layout.
Model make_model(bool gpt2, at::ScalarType dtype) {
  auto options = at::TensorOptions().dtype(dtype);
  Model model{gpt2 ? "GPT-2 small" : "Llama 1 GB", gpt2 ? WeightLayout::in_out : WeightLayout::out_in, {}};
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;  // {in, out}
  if (gpt2) {
    for (int i = 0; i < 12; ++i) shapes.insert(shapes.end(), {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}});
  } else {
    for (int i = 0; i < 16; ++i) {
      shapes.insert(shapes.end(), {{1024, 1024}, {1024, 512}, {1024, 512}, {1024, 1024}, {1024, 2816},
                                   {1024, 2816}, {2816, 1024}});
    }
    shapes.push_back({1024, 32000});
  }
  for (auto [in, out] : shapes) {
    Layer layer;
    layer.w = gpt2 ? at::randn({in, out}, options) : at::randn({out, in}, options);
    if (gpt2) layer.bias = at::randn({out}, options);
    model.layers.push_back(layer);
  }
  return model;
}

double median_ms(int rounds, const std::function<void()>& pass) {
  std::vector<double> times;
  pass();  // warm
  for (int i = 0; i < rounds; ++i) {
    auto start = std::chrono::steady_clock::now();
    pass();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void bench(const Model& model, at::ScalarType dtype, std::int64_t rows, int rounds) {
  bool out_in = model.layout == WeightLayout::out_in;
  auto element = dtype == at::kFloat ? LinearElement::float32 : LinearElement::bfloat16;
  std::vector<at::Tensor> inputs;  // one per input width
  auto input = [&](std::int64_t in) {
    for (auto& x : inputs) {
      if (x.size(1) == in) return x;
    }
    inputs.push_back(at::randn({rows, in}, at::TensorOptions().dtype(dtype)));
    return inputs.back();
  };
  double ours = median_ms(rounds, [&] {
    for (const Layer& layer : model.layers) {
      std::int64_t in = layer.w.size(out_in ? 1 : 0), out = layer.w.size(out_in ? 0 : 1);
      at::Tensor x = input(in), y = at::empty({rows, out}, x.options());
      gpubox::modeld::cpu_linear({element, x.data_ptr(), model.layout, layer.w.data_ptr(),
                                  layer.bias.defined() ? layer.bias.data_ptr() : nullptr, y.data_ptr(), rows, in, out});
    }
  });
  double libtorch = median_ms(rounds, [&] {
    for (const Layer& layer : model.layers) {
      at::Tensor x = input(layer.w.size(out_in ? 1 : 0));
      if (out_in) {
        at::linear(x, layer.w);
      } else {
        at::addmm(layer.bias, x, layer.w);
      }
    }
  });
  double bytes = 0;
  for (const Layer& layer : model.layers) bytes += static_cast<double>(layer.w.nbytes());
  std::printf("| %s | %s | %lld | %.1f ms (%.1f GB/s) | %.1f ms (%.1f GB/s) | %.2fx |\n", model.name,
              dtype == at::kFloat ? "float32" : "bfloat16", static_cast<long long>(rows), ours, bytes / ours / 1e6,
              libtorch, bytes / libtorch / 1e6, libtorch / ours);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  if (!gpubox::modeld::cpu_linear_available()) {
    std::fprintf(stderr, "this CPU has neither AVX-512 (F, BW, VL) nor AVX2 with FMA: CpuLinear does not run here\n");
    return 1;
  }
  at::InferenceMode inference;
  std::printf("CpuLinear (%s) vs LibTorch's linear, %d threads, median of %d passes over one decode step's linears\n",
              to_string(gpubox::modeld::cpu_linear_isa()), at::get_num_threads(), rounds);
  std::printf("| model | dtype | rows | CpuLinear | LibTorch | LibTorch / CpuLinear |\n|---|---|---|---|---|---|\n");
  for (bool gpt2 : {false, true}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      Model model = make_model(gpt2, dtype);
      for (std::int64_t rows : {1, 2, 4, 8}) bench(model, dtype, rows, rounds);
    }
  }
  return 0;
}
