// RankExchange: what the ranks of a split model (threads of this process, one
// per device) hand each other through memory during a pass: tensors to gather
// at a hook point or at the logits, a hook's verdict, the sums of a pass that
// records gradients. A barrier paces them; a rank that fails breaks it, and
// every rank waiting there, or arriving later, throws RankFailure naming it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <condition_variable>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/thread_annotations.h"

namespace gpubox::modeld {

// A split model's pass that cannot finish because one of its ranks failed
// (the message names the rank and why). The model is unusable after it.
class RankFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown on the other ranks when rank 0's hooks refused a pass (a caller's op
// threw): every rank leaves the pass at the same point; the model stays usable.
class PassAbandoned : public std::runtime_error {
 public:
  PassAbandoned() : std::runtime_error("the pass was abandoned on rank 0") {}
};

class RankExchange {
 public:
  explicit RankExchange(int ranks);
  int ranks() const { return static_cast<int>(slots_.size()); }

  // Waits until every rank has arrived (then all go on); throws RankFailure once the exchange is broken.
  void arrive_and_wait();
  // Breaks the exchange for good: why (naming the rank) is every later RankFailure's message. The first reason stays.
  void fail(const std::string& why);
  // Why the exchange is broken; "" while it is not.
  std::string failure() const;

  // Marks the pass abandoned (rank 0, before the broadcast that ends its hook
  // point); the others throw PassAbandoned from that broadcast.
  void abandon_pass() { abandoned_ = true; }
  bool pass_abandoned() const { return abandoned_; }
  void begin_pass() { abandoned_ = false; }  // before the ranks start a pass

  // Every rank's value, each moved to device, in rank order (each rank calls
  // it with its own; all get the list). Autograd sees through it.
  std::vector<at::Tensor> all_gather(int rank, const at::Tensor& value, c10::Device device);
  // As all_gather, but only rank 0 gets the list (on its device); the others get none.
  std::vector<at::Tensor> gather(int rank, const at::Tensor& value, c10::Device device);
  // Every rank's value summed in rank order on device (the same sum on every
  // rank); differentiable, unlike a c10d all-reduce (passes that record gradients).
  at::Tensor all_reduce_sum(int rank, const at::Tensor& value, c10::Device device);
  // Rank 0's value (on device) on every rank; defined only where rank 0's is.
  at::Tensor broadcast(int rank, const at::Tensor& value, c10::Device device);

 private:
  mutable Mutex mutex_;
  std::condition_variable_any arrived_;
  std::int64_t generation_ GUARDED_BY(mutex_) = 0;
  int waiting_ GUARDED_BY(mutex_) = 0;
  std::string failure_ GUARDED_BY(mutex_);
  std::vector<at::Tensor> slots_;
  bool abandoned_ = false;  // written by rank 0 before a barrier, read by the others after it  // slot r: rank r's value, written and read between barriers
};

}  // namespace gpubox::modeld
