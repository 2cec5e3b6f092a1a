// RankHooks: one rank's view, in a split model's pass, of one request's
// Hooks. Each hook point's whole value reaches the request's hooks once, on
// rank 0: a value split over the ranks (a head's q, k, v, z, result, scores
// and pattern; an MLP unit's activations) is gathered there in rank order,
// one that is whole on every rank (the residual stream) is rank 0's. What the
// hooks put in its place goes back to every rank, each taking its own heads
// or units, so an edit acts where the data lives and a capture sees exactly
// what one device would.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "model/modeld/decoder/decoder.h"
#include "model/modeld/split/rank_exchange.h"

namespace gpubox::modeld {

// The axis a hook point's value is split along over the ranks, for a value of
// dims dimensions; -1 where every rank holds it whole.
int split_axis(HookPoint point, int dims);

class RankHooks final : public Hooks {
 public:
  RankHooks(Hooks* request, int rank, RankExchange& exchange, c10::Device device)
      : request_(request), rank_(rank), exchange_(exchange), device_(device) {}
  bool wants(HookPoint point, int layer) const override { return request_->wants(point, layer); }
  // Every rank calls it at the same points in the same order. The logits
  // (gathered before) reach it on rank 0 alone, which applies the request's hooks directly.
  void apply(HookPoint point, int layer, at::Tensor& value) override;

 private:
  Hooks* request_;
  int rank_;
  RankExchange& exchange_;
  c10::Device device_;
};

}  // namespace gpubox::modeld
