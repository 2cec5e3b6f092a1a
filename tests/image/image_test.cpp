// The sandbox image, for real: image/Dockerfile built by podman (AGENT_FROM=
// context, the static agent of this build) on the local bases of
// scripts/setup_images.sh — bookworm with Python (the stand-in for the CUDA +
// PyTorch base), bookworm minbase without Python, and a busybox-only root —
// then each image run with its config in GPUBOX_CONFIG and its port published
// on 127.0.0.1, and driven over CURVE by the C++ client exactly as a remote
// client would: the agent is PID 1 and reaps, exec, files and jobs work, and
// the kernel runs a cell where Python exists and says it is unavailable,
// failing nothing else, where it does not. Skips (saying why) only when
// podman cannot run here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "host/program_run.h"
#include "base/base64.h"
#include "rpc/client.h"
#include "rpc/keys.h"
#include "tests/image/test_image.h"
#include "tests/prerequisite.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using host::run_program;

using ImageCase = TestImage;
const ImageCase kCases[] = {kTestImagePython, kTestImageMinbase, kTestImageBusybox};

std::string tag_of(const ImageCase& image) { return test_image_tag(image); }

std::string text_of(const nlohmann::json& value) {
  if (value.is_binary()) return std::string(value.get_binary().begin(), value.get_binary().end());
  return value.is_string() ? value.get<std::string>() : "";
}

// How a container gets its config: the two ways image/README.md documents.
enum class ConfigVia { env, file };

// One running container of an image, with fresh CURVE keys and its port
// published on 127.0.0.1; removed at the end.
class Container {
 public:
  Container(const ImageCase& image, ConfigVia via, const nlohmann::json& config_extra = nlohmann::json::object())
      : name_(std::string("gpubox-imagetest-") + image.name + "-" + std::to_string(::getpid())) {
    server_ = rpc::generate_keypair().value();
    client_ = rpc::generate_keypair().value();
    nlohmann::json config = {{"rpc", {{"endpoints", {"tcp://0.0.0.0:7000"}}, {"secret_key", server_.secret_key},
                                      {"authorized_keys", {client_.public_key}}}},
                             {"shutdown", {{"grace_seconds", 2}}}};
    config.merge_patch(config_extra);
    (void)run_program("podman", {"rm", "--force", "--time", "0", name_});
    std::vector<std::string> args = {"run", "--detach", "--name", name_, "--publish", "127.0.0.1::7000"};
    std::vector<std::string> agent_args;
    if (via == ConfigVia::env) {
      args.insert(args.end(), {"--env", "GPUBOX_CONFIG=" + base64_encode(config.dump())});
    } else {
      config_dir_ = "/tmp/gpubox-image-config-" + std::to_string(::getpid());
      fs::create_directories(config_dir_);
      std::ofstream(config_dir_ + "/config.json") << config.dump();
      args.insert(args.end(), {"--volume", config_dir_ + ":/etc/gpubox:ro"});
      agent_args = {"--config", "/etc/gpubox/config.json"};
    }
    args.push_back(tag_of(image));
    args.insert(args.end(), agent_args.begin(), agent_args.end());
    auto ran = run_program("podman", args);
    if (!ran || ran->status != 0) {
      error_ = "podman run: " + (ran ? ran->err : ran.status().message());
      return;
    }
    auto port = run_program("podman", {"port", name_, "7000/tcp"});
    std::string address = port ? port->out.substr(0, port->out.find('\n')) : "";
    rpc::ClientOptions options;
    options.endpoint = "tcp://" + address;
    options.server_public_key = server_.public_key;
    options.client_keys = client_;
    options.connect_timeout = std::chrono::seconds(20);
    auto connected = rpc::Client::connect(options);
    if (!connected) {
      auto logs = run_program("podman", {"logs", name_});
      error_ = "cannot reach " + options.endpoint + ": " + connected.status().to_string() + "\n" +
               (logs ? logs->out + logs->err : "");
      return;
    }
    client = std::move(*connected);
  }
  ~Container() {
    client.reset();
    (void)run_program("podman", {"rm", "--force", "--time", "0", name_});
    std::error_code ignored;
    if (!config_dir_.empty()) fs::remove_all(config_dir_, ignored);
  }
  Container(const Container&) = delete;
  Container& operator=(const Container&) = delete;

  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  std::unique_ptr<rpc::Client> client;

  // proc.exec of a shell command; its stdout (the test fails on a non-zero exit).
  std::string shell(const std::string& command) {
    auto result = client->call("proc.exec", {{"shell", command}, {"timeout_s", 20}});
    EXPECT_TRUE(result) << command << ": " << result.status().to_string();
    if (!result) return "";
    EXPECT_EQ((*result)["exit_code"], 0) << command << ": " << text_of((*result)["stderr"]);
    return text_of((*result)["stdout"]);
  }

  // kernel.execute: the text printed and the final status (an error Status as is).
  Result<std::pair<std::string, nlohmann::json>> execute(const std::string& code) {
    auto stream = client->stream("kernel.execute", {{"code", code}, {"timeout_s", 60}});
    if (!stream) return stream.status();
    std::string printed;
    while (true) {
      auto item = (*stream)->next();
      if (!item) return item.status();
      if (!*item) break;
      const auto& body = (*item)->body;
      if (body.contains("text")) printed += text_of(body["text"]);
    }
    if (!(*stream)->result()) return (*stream)->result().status();
    return std::make_pair(printed, (*stream)->result().value());
  }

 private:
  std::string name_;
  std::string error_;
  std::string config_dir_;
  rpc::KeyPair server_, client_;
};

class ImageTest : public ::testing::TestWithParam<ImageCase> {
 protected:
  void SetUp() override {
    if (!podman_problem().empty()) GPUBOX_MISSING(podman_problem());
    std::string built = build_test_image(GetParam());
    ASSERT_EQ(built, "") << "building image/Dockerfile on " << GetParam().base;
  }
};

TEST_P(ImageTest, TheAgentIsPid1ReapsAndServesExecFilesAndJobsOverCurve) {
  Container box(GetParam(), ConfigVia::env);
  ASSERT_EQ(box.error(), "");
  auto info = box.client->call("sys.info");
  ASSERT_TRUE(info) << info.status().to_string();
  EXPECT_EQ((*info)["pid"], 1) << "the agent is the container's PID 1";
  EXPECT_EQ(box.shell("cat /proc/1/comm; pwd"), "gpubox-agent\n/workspace\n");
  auto top = run_program("podman", {"inspect", "--format", "{{json .Config.Entrypoint}}", box.name()});
  ASSERT_TRUE(top);
  EXPECT_THAT(top->out, HasSubstr("/usr/local/bin/gpubox-agent"));

  // Orphans are reparented to PID 1, which must reap them: none stays a zombie.
  box.shell("for i in 1 2 3 4 5 6 7 8; do (sleep 0.1 &) ; done; true");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto listed = box.client->call("proc.list");
  ASSERT_TRUE(listed) << listed.status().to_string();
  for (const auto& process : (*listed)["processes"]) EXPECT_NE(process["state"], "Z") << process.dump();

  auto wrote = box.client->call("fs.write", {{"path", "/workspace/hello.txt"}, {"data", "hello from the host\n"}});
  ASSERT_TRUE(wrote) << wrote.status().to_string();
  EXPECT_EQ(box.shell("cat /workspace/hello.txt"), "hello from the host\n");
  auto read = box.client->call("fs.read", {{"path", "/etc/hostname"}});
  ASSERT_TRUE(read) << read.status().to_string();

  auto job = box.client->call("job.submit", {{"command", "echo staged > out/result.txt; echo done"}});
  ASSERT_TRUE(job) << job.status().to_string();
  auto waited = box.client->call("job.wait", {{"job_id", (*job)["job_id"]}, {"timeout_s", 30}});
  ASSERT_TRUE(waited) << waited.status().to_string();
  EXPECT_EQ((*waited)["result"]["status"], "succeeded") << waited->dump();
  EXPECT_THAT((*waited)["result"]["output_files"].dump(), HasSubstr("result.txt"));
  EXPECT_EQ(text_of((*waited)["result"]["stdout_tail"]), "done\n");
}

TEST_P(ImageTest, TheKernelRunsACellWherePythonExistsAndIsUnavailableElsewhere) {
  Container box(GetParam(), ConfigVia::env);
  ASSERT_EQ(box.error(), "");
  auto ran = box.execute("import sys; print(6 * 7, sys.version_info[0])");
  if (GetParam().has_python) {
    ASSERT_TRUE(ran) << ran.status().to_string();
    EXPECT_EQ(ran->first, "42 3\n");
    EXPECT_EQ(ran->second["status"], "ok") << ran->second.dump();
    auto kernel = box.client->call("kernel.info");
    ASSERT_TRUE(kernel) << kernel.status().to_string();
    EXPECT_EQ(kernel->value("executor", nlohmann::json::object()).value("implementation", ""), "ipython") << kernel->dump();
  } else {
    ASSERT_FALSE(ran) << "a cell ran without Python";
    // The agent says what is missing: not_found, naming the program.
    EXPECT_EQ(ran.status().code(), ErrorCode::not_found) << ran.status().to_string();
    EXPECT_THAT(ran.status().message(), HasSubstr("cannot run 'python3'"));
  }
  // Whatever the kernel said, the rest of the agent is untouched.
  EXPECT_EQ(box.shell("echo still here"), "still here\n");
  auto info = box.client->call("sys.info");
  ASSERT_TRUE(info) << info.status().to_string();
  EXPECT_EQ((*info)["components"]["kernel"]["state"], "ready") << info->dump();
}

TEST_P(ImageTest, AConfigFileMountedReadOnlyAndNamedAfterTheEntrypoint) {
  Container box(GetParam(), ConfigVia::file, {{"env", {{"FROM_FILE", "yes"}}}});
  ASSERT_EQ(box.error(), "");
  EXPECT_EQ(box.shell("echo $FROM_FILE"), "yes\n");
}

INSTANTIATE_TEST_SUITE_P(Bases, ImageTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ImageCase>& one) { return std::string(one.param.name); });

}  // namespace
}  // namespace gpubox::testing
