#include "tests/cli/test_cluster_process.h"

#include <sys/wait.h>

#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "host/program_run.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/venv_child.h"

#if !defined(GPUBOX_VENV_PYTHON) || !defined(GPUBOX_KUBERNETES_TESTS_DIR)
#error "GPUBOX_VENV_PYTHON and GPUBOX_KUBERNETES_TESTS_DIR must be defined"
#endif

namespace gpubox::testing {
namespace {

namespace fs = std::filesystem;

const std::string kRunCluster = std::string(GPUBOX_KUBERNETES_TESTS_DIR) + "/run_cluster.py";

std::string without_newline(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

const std::string& kubernetes_cluster_problem() {
  // cluster.py's own answer: the kube-apiserver binary, the venv's kubernetes package, podman, root.
  static const std::string problem = [] {
    auto ran = host::run_program(GPUBOX_VENV_PYTHON, {"-B", kRunCluster, "--problem"}, std::chrono::seconds(60));
    if (!ran) return "cannot run " + std::string(GPUBOX_VENV_PYTHON) + ": " + ran.status().to_string();
    if (ran->status != 0) return kRunCluster + " --problem failed: " + ran->err;
    return without_newline(ran->out);
  }();
  return problem;
}

TestClusterProcess::TestClusterProcess(std::string* problem) {
  char pattern[] = "/tmp/gpubox-cli-k8s-XXXXXX";
  if (!::mkdtemp(pattern)) {
    *problem = "mkdtemp failed";
    return;
  }
  work_ = pattern;
  std::string log = work_ + "/run_cluster.log", ready = work_ + "/cluster.json";
  pid_ = start_venv_python(GPUBOX_KUBERNETES_TESTS_DIR, log, {kRunCluster, "--work", work_});
  // The API server, the CRDs and the controller each have 60 s (cluster.py).
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(200);
  while (!fs::exists(ready)) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_ || std::chrono::steady_clock::now() > give_up) {
      *problem = "the Kubernetes test cluster did not start (" + log + "): " + read_text(log);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto state = nlohmann::json::parse(read_text(ready));
  kubeconfig_ = state["kubeconfig"];
  namespace_ = state["namespace"];
  run_id_ = state["run_id"];
}

TestClusterProcess::~TestClusterProcess() { stop(); }

void TestClusterProcess::stop() {
  if (pid_ > 0) {
    end_child(pid_, std::chrono::seconds(120));  // the controller removes each pod's container
    pid_ = -1;
  }
  if (!work_.empty()) {
    std::error_code ignored;
    fs::remove_all(work_, ignored);
    work_.clear();
  }
}

std::string TestClusterProcess::log_tail() const {
  std::istringstream all(read_text(work_ + "/cluster/controller.log") + read_text(work_ + "/run_cluster.log"));
  std::deque<std::string> last;
  for (std::string line; std::getline(all, line);) {
    last.push_back(line);
    if (last.size() > 40) last.pop_front();
  }
  std::string tail;
  for (const auto& line : last) tail += line + "\n";
  return tail;
}

std::map<std::string, std::string> TestClusterProcess::user_environment() const {
  auto env = venv_python_environment();
  env["KUBECONFIG"] = kubeconfig_;
  return env;
}

std::string TestClusterProcess::container_of(const std::string& pod) const {
  return "gpubox-k8s-test-" + run_id_ + "-" + namespace_ + "-" + pod;  // fake_node.py's FakeNode.start
}

std::vector<std::string> TestClusterProcess::left() const {
  auto ran = host::run_program(GPUBOX_VENV_PYTHON, {"-B", kRunCluster, "--left", work_}, std::chrono::seconds(60));
  if (!ran || ran->status != 0) return {"(" + kRunCluster + " --left failed: " + (ran ? ran->err : ran.status().to_string()) + ")"};
  std::vector<std::string> found;
  std::istringstream lines(ran->out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) found.push_back(line);
  }
  return found;
}

}  // namespace gpubox::testing
