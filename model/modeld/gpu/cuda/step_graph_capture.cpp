// libgpubox_step_graph.so: the CUDA side of StepGraph (model/modeld/gpu/step_graph.h),
// compiled against the torch wheel's headers and the nvidia-* wheels' CUDA
// headers, linked to libtorch_cuda; gpubox-modeld loads it with dlopen only
// when a model on a GPU asks for graphs.
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "model/modeld/gpu/step_graph.h"

namespace {

constexpr int kWarmups = 2;

// waiter's later work waits for what done has queued so far.
void wait_for(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& done) {
  at::cuda::CUDAEvent event;
  event.record(done);
  event.block(waiter);
}  // eager runs before the capture (lazy initialisation inside kernels, cuBLAS handles)

// CUDAGraph that can give up a capture cleanly: a step that throws inside
// the capture leaves the stream capturing and the graph's memory pool
// claimed, which CUDAGraph's own reset() does not undo.
class AbortableGraph final : public at::cuda::CUDAGraph {
 public:
  void abort_capture() noexcept {
    if (capture_ended_ || capture_dev_ == UNDEFINED_DEVICE) return;
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(capture_stream_.stream(), &partial);  // invalidated captures end too
    if (partial) cudaGraphDestroy(partial);
    (void)cudaGetLastError();  // the capture's error is reported by the exception, not left for the next call
    c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
    c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_);
    capture_dev_ = UNDEFINED_DEVICE;
  }
};

// A captured step and the output tensor its replays write.
class CudaStepGraph final : public gpubox::modeld::StepGraph {
 public:
  explicit CudaStepGraph(c10::Device device) : device_(device) {}

  void capture(const std::function<at::Tensor()>& step) {
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device_.index());
    wait_for(side, c10::cuda::getCurrentCUDAStream(device_.index()));
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      for (int i = 0; i < kWarmups; ++i) step();
      // Thread-local: another thread's CUDA work (another model's step) does not break this capture.
      graph_.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        output_ = step();
        graph_.capture_end();
      } catch (...) {
        graph_.abort_capture();
        wait_for(c10::cuda::getCurrentCUDAStream(device_.index()), side);
        throw;
      }
    }
    wait_for(c10::cuda::getCurrentCUDAStream(device_.index()), side);
  }

  const at::Tensor& replay() override {
    c10::cuda::CUDAGuard device_guard(device_);
    graph_.replay();
    return output_;
  }

 private:
  c10::Device device_;
  AbortableGraph graph_;
  at::Tensor output_;
};

}  // namespace

extern "C" gpubox::modeld::StepGraph* gpubox_capture_step_graph(int device_index, const std::function<at::Tensor()>* step,
                                                                 std::string* error) {
  try {
    auto graph = std::make_unique<CudaStepGraph>(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index)));
    graph->capture(*step);
    return graph.release();
  } catch (const c10::Error& e) {
    *error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    *error = e.what();
  }
  return nullptr;
}
