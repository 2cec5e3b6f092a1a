#include "tests/cli/fake_modal_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "host/program_run.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/venv_child.h"
#include "tests/image/test_image.h"

#if !defined(GPUBOX_VENV_PYTHON) || !defined(GPUBOX_MODAL_TESTS_DIR)
#error "GPUBOX_VENV_PYTHON and GPUBOX_MODAL_TESTS_DIR must be defined"
#endif

namespace gpubox::testing {

namespace fs = std::filesystem;

const std::string& fake_modal_problem() {
  static const std::string problem = [] {
    if (!podman_problem().empty()) return podman_problem();
    auto ran = host::run_program(GPUBOX_VENV_PYTHON, {"-c", "import modal, grpclib"}, std::chrono::seconds(60));
    if (!ran || ran->status != 0) {
      return std::string(GPUBOX_VENV_PYTHON) + " has no Modal SDK (scripts/setup_python.sh installs it)";
    }
    return std::string();
  }();
  return problem;
}

FakeModalProcess::FakeModalProcess(std::string* problem) {
  char pattern[] = "/tmp/gpubox-cli-modal-XXXXXX";
  if (!::mkdtemp(pattern)) {
    *problem = "mkdtemp failed";
    return;
  }
  work_ = pattern;
  fs::create_directories(work_ + "/volumes");
  std::string url_file = work_ + "/url", calls = work_ + "/calls", log = work_ + "/fake.log";
  pid_ = start_venv_python(GPUBOX_MODAL_TESTS_DIR, log,
                           {"-m", "fake_modal", "--url-file", url_file, "--calls", calls, "--volumes-dir", work_ + "/volumes"},
                           {{"FAKE_MODAL_SECRETS", "{}"}});
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(url_file)) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_ || std::chrono::steady_clock::now() > give_up) {
      *problem = "the fake Modal control plane did not start: " + read_text(log);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  url_ = read_text(url_file);
  while (!url_.empty() && url_.back() == '\n') url_.pop_back();
}

FakeModalProcess::~FakeModalProcess() { stop(); }

void FakeModalProcess::stop() {
  if (pid_ > 0) {
    end_child(pid_, std::chrono::seconds(90));
    pid_ = -1;
  }
  if (!work_.empty()) {
    std::error_code ignored;
    fs::remove_all(work_, ignored);
    work_.clear();
  }
}

std::map<std::string, std::string> FakeModalProcess::user_environment() const {
  auto env = venv_python_environment();
  env.insert({{"MODAL_SERVER_URL", url_},
              {"MODAL_TOKEN_ID", "ak-gpubox-cli-test"},
              {"MODAL_TOKEN_SECRET", "as-gpubox-cli-test"},
              {"MODAL_CONFIG_PATH", work_ + "/no-modal.toml"}});  // no user profile of this machine
  return env;
}

std::vector<std::string> FakeModalProcess::containers() const {
  // The fake logs each `podman create --name fake-modal-sb-...` it runs.
  std::vector<std::string> names;
  std::istringstream calls(read_text(work_ + "/calls"));
  const std::string marker = "podman create --name ";
  for (std::string line; std::getline(calls, line);) {
    if (line.rfind(marker, 0) != 0) continue;
    std::string rest = line.substr(marker.size());
    names.push_back(rest.substr(0, rest.find(' ')));
  }
  return names;
}

std::vector<std::string> FakeModalProcess::running(const std::vector<std::string>& names) const {
  std::vector<std::string> found;
  for (const auto& name : names) {
    auto state = host::run_program("podman", {"inspect", "--format", "{{.State.Running}}", name});
    if (state && state->status == 0 && state->out.rfind("true", 0) == 0) found.push_back(name);
  }
  return found;
}

}  // namespace gpubox::testing
