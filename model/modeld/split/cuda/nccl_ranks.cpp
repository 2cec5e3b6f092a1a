// libgpubox_nccl_ranks.so: the GPU side of RankGroup (model/modeld/split/rank_group.h),
// c10d's ProcessGroupNCCL, compiled against the torch wheel's headers, the
// nvidia-* wheels' CUDA and NCCL headers, linked to libtorch_cuda;
// gpubox-modeld loads it with dlopen only for a model split across GPUs
// (split/nccl_ranks.h is the boundary).
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>

#include "model/modeld/split/nccl_ranks.h"

namespace {

// One GPU rank's end: a c10d::ProcessGroupNCCL whose communicator NCCL creates
// on the first collective (every rank's thread calls it at once). A collective
// is queued on NCCL's stream; wait() makes the caller's current stream wait
// for it, not the host, and c10d's watchdog acts on a collective that misses
// the timeout.
class NcclRank final : public gpubox::modeld::RankCollectives {
 public:
  NcclRank(c10::Device device, c10::intrusive_ptr<c10d::ProcessGroupNCCL> group)
      : device_(device), group_(std::move(group)) {}

  ~NcclRank() override {
    try {
      c10::cuda::CUDAGuard on_device(device_);
      group_->shutdown();  // c10d warns about, and aborts, a group destroyed without it
    } catch (const std::exception&) {  // nothing to do about it in a destructor
    }
  }

  // give_up is not asked: the host does not wait for NCCL (the stream does; c10d's watchdog ends a collective that hangs).
  void all_reduce_sum(at::Tensor& t, const std::function<bool()>&) override {
    TORCH_CHECK(t.device() == device_ && t.is_contiguous(), "all_reduce_sum over NCCL needs a contiguous tensor on ",
                device_.str(), ", not one on ", t.device().str(), t.is_contiguous() ? "" : " (not contiguous)");
    c10::cuda::CUDAGuard on_device(device_);
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    group_->allreduce(tensors, options)->wait();
  }

 private:
  c10::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) gpubox::modeld::RankCollectives* gpubox_connect_nccl_rank(
    const c10::intrusive_ptr<c10d::Store>* store, int rank, int size, int device_index, std::int64_t timeout_ms,
    std::string* error) {
  try {
    c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
    c10::cuda::CUDAGuard on_device(device);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = std::chrono::milliseconds(timeout_ms);
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(*store, rank, size, options);
    return std::make_unique<NcclRank>(device, std::move(group)).release();
  } catch (const c10::Error& e) {
    *error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    *error = e.what();
  }
  return nullptr;
}

static_assert(std::is_same_v<decltype(&gpubox_connect_nccl_rank), gpubox::modeld::ConnectNcclRankFunction>,
              "gpubox_connect_nccl_rank must match split/nccl_ranks.h");
