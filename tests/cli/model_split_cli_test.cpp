// `gpubox model ID load`'s split flags (--tensor-parallel N, --allow-cpu-split)
// reach model.load's params, a bad N is refused naming the flag, and model ls /
// info show a split model's devices. The real CLI against an in-process model
// host on an ipc socket that records what model.load was sent.
#include <gmock/gmock.h>

#include <vector>

#include "base/thread_annotations.h"
#include "rpc/server.h"
#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A model host with one model split across two GPUs and one on a single device.
class RecordingModelHost {
 public:
  explicit RecordingModelHost(const std::string& path) {
    methods_.add("sys.info", [](rpc::CallContext&) -> Result<nlohmann::json> { return nlohmann::json::object(); });
    methods_.add("model.load", [this](rpc::CallContext& call) -> Result<nlohmann::json> {
      MutexLock lock(mutex_);
      loads_.push_back(call.params());
      return nlohmann::json{{"name", call.params().value("name", "")}, {"state", "loading"}};
    });
    methods_.add("model.list", [](rpc::CallContext&) -> Result<nlohmann::json> {
      return nlohmann::json{{"models",
                             {{{"name", "split"}, {"state", "ready"}, {"device", "cuda:0"}, {"devices", {"cuda:0", "cuda:1"}},
                               {"tensor_parallel", 2}},
                              {{"name", "single"}, {"state", "ready"}, {"device", "cuda:3"}, {"devices", {"cuda:3"}}},
                              {{"name", "older"}, {"state", "ready"}, {"device", "cpu"}}}}};
    });
    methods_.add("model.info", [](rpc::CallContext&) -> Result<nlohmann::json> {
      return nlohmann::json{{"architecture", "llama"}, {"device", "cuda:0"}, {"devices", {"cuda:0", "cuda:1"}}, {"tensor_parallel", 2}};
    });
    rpc::ServerOptions options;
    options.endpoints = {"ipc://" + path};
    auto started = rpc::Server::start(std::move(options), methods_);
    EXPECT_TRUE(started) << started.status().to_string();
    if (started) server_ = std::move(*started);
  }

  std::vector<nlohmann::json> loads() {
    MutexLock lock(mutex_);
    return loads_;
  }

 private:
  Mutex mutex_;
  std::vector<nlohmann::json> loads_ GUARDED_BY(mutex_);
  rpc::MethodRegistry methods_;  // the server reads it while it runs
  std::unique_ptr<rpc::Server> server_;
};

TEST_F(CliTest, ModelLoadSendsTheSplitFlagsAndRefusesABadRankCount) {
  std::string socket = scratch() + "/modeld.sock";
  RecordingModelHost host(socket);
  std::string endpoint = "ipc://" + socket;

  CliRun listed = run({"model", endpoint, "load", "a", "/m/a", "--device", "cuda:0,1"});
  EXPECT_EQ(listed.status, 0) << listed.err;
  CliRun counted = run({"model", endpoint, "load", "b", "/m/b", "--device", "cpu", "--tensor-parallel", "2", "--allow-cpu-split"});
  EXPECT_EQ(counted.status, 0) << counted.err;
  CliRun plain = run({"model", endpoint, "load", "c", "/m/c"});
  EXPECT_EQ(plain.status, 0) << plain.err;
  auto loads = host.loads();
  ASSERT_EQ(loads.size(), 3u);
  EXPECT_EQ(loads[0]["device"], "cuda:0,1");
  EXPECT_FALSE(loads[0].contains("tensor_parallel"));
  EXPECT_EQ(loads[1]["tensor_parallel"], 2);
  EXPECT_EQ(loads[1]["allow_cpu_split"], true);
  EXPECT_FALSE(loads[2].contains("tensor_parallel"));
  EXPECT_FALSE(loads[2].contains("allow_cpu_split"));

  for (const char* bad : {"0", "65", "1.5", "two", "-2"}) {
    CliRun refused = run({"model", endpoint, "load", "d", "/m/d", "--tensor-parallel", bad});
    EXPECT_EQ(refused.status, 2) << bad << ": " << refused.err;  // a usage error
    EXPECT_THAT(refused.err, HasSubstr(std::string("--tensor-parallel '") + bad + "': expected an integer from 1 to 64")) << bad;
  }
  EXPECT_EQ(host.loads().size(), 3u) << "a refused flag sends nothing";
}

TEST_F(CliTest, ModelLsAndInfoShowASplitModelsDevices) {
  std::string socket = scratch() + "/modeld.sock";
  RecordingModelHost host(socket);
  std::string endpoint = "ipc://" + socket;

  CliRun listed = run({"model", endpoint, "ls"});
  ASSERT_EQ(listed.status, 0) << listed.err;
  std::vector<std::string> lines;
  for (std::size_t start = 0, end; (end = listed.out.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(listed.out.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 4u) << listed.out;
  EXPECT_THAT(lines[1], HasSubstr(" cuda:0,cuda:1 "));  // every rank's device
  EXPECT_THAT(lines[2], HasSubstr(" cuda:3 "));         // one device: as before
  EXPECT_THAT(lines[2], Not(HasSubstr(",")));
  EXPECT_THAT(lines[3], HasSubstr(" cpu "));            // no "devices" (an older modeld): "device"

  CliRun info = run({"model", endpoint, "info", "split"});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("devices:"));
  EXPECT_THAT(info.out, HasSubstr("cuda:0,cuda:1"));
  EXPECT_THAT(info.out, Not(HasSubstr("[\"cuda:0\"")));
  EXPECT_THAT(info.out, HasSubstr("tensor_parallel:"));
}

}  // namespace
}  // namespace gpubox::testing
