// Nearest-rank percentile of benchmark samples, shared by the bench programs.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace gpubox::bench {

// REQUIRES: samples is not empty; 0 < p <= 1.
inline double percentile(std::vector<double> samples, double p) {
  std::sort(samples.begin(), samples.end());
  std::size_t rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(samples.size())));
  return samples[std::clamp<std::size_t>(rank, 1, samples.size()) - 1];
}

}  // namespace gpubox::bench
