#include "model/modeld/split/rank_group.h"

#include <fmt/format.h>

#include <set>
#include <string>
#include <system_error>
#include <thread>

#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "model/modeld/gpu/beside_executable.h"
#include "model/modeld/gpu/cuda_runtime.h"
#include "model/modeld/split/nccl_ranks.h"
#endif

namespace gpubox::modeld {
namespace {

// Ok when the devices are all cpu, or all cuda with distinct explicit indices.
Status check_rank_devices(const std::vector<c10::Device>& devices) {
  if (devices.empty()) return Status::invalid_request("a split model needs at least one device, not none");
  std::size_t cuda = 0;
  std::set<c10::DeviceIndex> indices;
  for (const c10::Device& device : devices) {
    if (device.is_cpu()) continue;
    if (!device.is_cuda()) {
      return Status::invalid_request(fmt::format("a split model's ranks run on cpu or cuda devices, not {}", device.str()));
    }
    ++cuda;
    if (!device.has_index()) {
      return Status::invalid_request("a split model's cuda devices need an index (cuda:0, cuda:1, ...), not \"cuda\"");
    }
    if (!indices.insert(device.index()).second) {
      return Status::invalid_request(fmt::format("{} is named twice: each rank needs a GPU of its own", device.str()));
    }
  }
  if (cuda != 0 && cuda != devices.size()) {
    std::string names;
    for (const c10::Device& device : devices) names += (names.empty() ? "" : ", ") + device.str();
    return Status::invalid_request(
        fmt::format("a split model's ranks are all on cpu or all on cuda, not a mix ({})", names));
  }
  return Status::ok();
}

#ifdef USE_C10D_GLOO

// One CPU rank's end: a c10d::ProcessGroupGloo over 127.0.0.1.
class GlooRank final : public RankCollectives {
 public:
  explicit GlooRank(c10::intrusive_ptr<c10d::ProcessGroupGloo> group) : group_(std::move(group)) {}

  void all_reduce_sum(at::Tensor& t, const std::function<bool()>& give_up) override {
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(),
                "all_reduce_sum over Gloo needs a contiguous cpu tensor, not one on ", t.device().str(),
                t.is_contiguous() ? "" : " (not contiguous)");
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    try {
      auto work = group_->allreduce(tensors, options);
      // In slices, asking give_up between them: a rank that failed elsewhere never reaches this
      // all-reduce, and the others should not wait out the group's timeout for it.
      while (!wait_a_while(*work)) {
        TORCH_CHECK(!give_up || !give_up(), "Gloo all-reduce abandoned: another rank failed");
      }
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {  // gloo's own (gloo::IoException: a timeout, a peer gone), as the contract's
      TORCH_CHECK(false, "Gloo all-reduce failed: ", e.what());
    }
  }

 private:
  // Waits for work up to a slice of time: true once it completed (its error thrown), false while it runs.
  static constexpr int kYields = 2000;
  static bool wait_a_while(c10d::Work& work) {
    constexpr std::chrono::milliseconds kSlice{20};
    // A while yielding first: the peers are usually a moment away, and a thread put to sleep wakes
    // only when the scheduler next gets to it (on a busy CPU, halving a split's cost per layer).
    for (int spin = 0; spin < kYields && !work.isCompleted(); ++spin) std::this_thread::yield();
    try {
      return work.wait(kSlice);
    } catch (const c10::Error&) {
      if (work.isCompleted()) throw;  // its own failure (Gloo's timeout, a peer gone)
      return false;                   // the slice ended first
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

std::unique_ptr<RankCollectives> connect_gloo_rank(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;  // each rank calls one collective at a time
  return std::make_unique<GlooRank>(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options));
}

// libgpubox_nccl_ranks.so's entry point into ENTRY, after libtorch_cuda (and with it libnccl.so.2); an error
// says why not.
Status load_nccl_entry_point(const std::vector<c10::Device>& devices, ConnectNcclRankFunction& entry) {
  if (Status s = enable_cuda(); !s) return Status(s.code(), "NCCL ranks need CUDA: " + s.message());
  int count = cuda_device_count();
  for (const c10::Device& device : devices) {
    if (device.index() >= count) {
      return Status::invalid_request(fmt::format("{} does not exist: this machine has {} GPU{}", device.str(), count,
                                                 count == 1 ? "" : "s"));
    }
  }
  std::string error;
  void* loaded = load_beside_executable(kNcclRanksLibrary, kConnectNcclRankSymbol, error);
  if (!loaded) return Status(ErrorCode::unavailable, "NCCL ranks are unavailable: " + error);
  entry = reinterpret_cast<ConnectNcclRankFunction>(loaded);
  return Status::ok();
}

#endif

}  // namespace

Result<std::vector<std::unique_ptr<RankCollectives>>> connect_ranks(const std::vector<c10::Device>& devices,
                                                                  std::chrono::milliseconds timeout) {
  if (Status s = check_rank_devices(devices); !s) return s;
  if (timeout.count() <= 0) {
    return Status::invalid_request(fmt::format("a split model's timeout must be positive, not {} ms", timeout.count()));
  }
#ifndef USE_C10D_GLOO
  return Status(ErrorCode::unavailable,
                "split models are unavailable: gpubox-modeld was built without Gloo's headers (libgloo-dev; "
                "scripts/setup.sh installs it)");
#else
  const bool on_cuda = devices.front().is_cuda();
  const char* backend = on_cuda ? "NCCL" : "Gloo";
  ConnectNcclRankFunction connect_nccl = nullptr;
  if (on_cuda) {
    if (Status s = load_nccl_entry_point(devices, connect_nccl); !s) return s;
  }

  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(timeout);  // a rank that fails to construct leaves the others waiting this long, not forever
  c10::intrusive_ptr<c10d::Store> shared = store;
  const int size = static_cast<int>(devices.size());
  std::vector<std::unique_ptr<RankCollectives>> ranks(devices.size());
  std::vector<std::string> errors(devices.size());
  auto connect = [&](int rank) {
    try {
      if (!connect_nccl) {
        ranks[rank] = connect_gloo_rank(shared, rank, size, timeout);
        return;
      }
      std::string error;
      RankCollectives* made = connect_nccl(&shared, rank, size, devices[rank].index(), timeout.count(), &error);
      if (made) {
        ranks[rank].reset(made);
      } else {
        errors[rank] = error.empty() ? "unknown error" : error;
      }
    } catch (const c10::Error& e) {
      errors[rank] = e.what_without_backtrace();
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  // The constructors rendezvous: every rank's must run at once.
  std::vector<std::thread> threads;
  threads.reserve(devices.size());
  for (int rank = 0; rank < size; ++rank) {
    try {
      threads.emplace_back(connect, rank);
    } catch (const std::system_error& e) {  // the ranks started time out waiting for the rest
      for (int rest = rank; rest < size; ++rest) errors[rest] = fmt::format("no thread to connect it: {}", e.what());
      break;
    }
  }
  for (std::thread& thread : threads) thread.join();

  std::string failures;
  for (int rank = 0; rank < size; ++rank) {
    if (!errors[rank].empty()) failures += fmt::format("{}rank {} ({}): {}", failures.empty() ? "" : "; ", rank,
                                                       devices[rank].str(), errors[rank]);
  }
  if (!failures.empty()) {
    return Status(ErrorCode::unavailable, fmt::format("connecting {} {} ranks failed: {}", size, backend, failures));
  }
  return ranks;
#endif
}

}  // namespace gpubox::modeld
