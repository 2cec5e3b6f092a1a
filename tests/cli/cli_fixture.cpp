#include "tests/cli/cli_fixture.h"

#include "host/program_run.h"
#include "tests/cli/fake_modal_process.h"
#include "tests/cli/test_cluster_process.h"
#include "tests/image/test_image.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include "tests/prerequisite.h"

extern char** environ;

#ifndef GPUBOX_CLI_PATH
#error "GPUBOX_CLI_PATH must name the gpubox binary"
#endif
#ifndef GPUBOX_AGENT_PATH
#error "GPUBOX_AGENT_PATH must name the gpubox-agent binary"
#endif

namespace gpubox::testing {
namespace {

namespace fs = std::filesystem;

std::string make_temp(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

// Reaps every exited child that is not one of ours in flight: the agents the
// CLI detached, reparented to this subreaper once the CLI exited.
void reap_orphans() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// The fake Modal control plane the modal instances of a test process share (started by the first).
std::unique_ptr<FakeModalProcess>& shared_fake_modal() {
  static std::unique_ptr<FakeModalProcess> fake;
  return fake;
}

// The Kubernetes test cluster the kubernetes instances of a test process share (started by the first).
std::unique_ptr<TestClusterProcess>& shared_test_cluster() {
  static std::unique_ptr<TestClusterProcess> cluster;
  return cluster;
}

// Starts the process that `shared` holds unless it runs; "" or what went wrong.
template <typename Process>
std::string start_shared(std::unique_ptr<Process>& shared) {
  if (shared) return "";
  std::string problem;
  shared = std::make_unique<Process>(&problem);
  if (!problem.empty()) shared.reset();
  return problem;
}

}  // namespace

std::string cli_path() { return GPUBOX_CLI_PATH; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text, int mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
}

std::vector<std::string> cgroups_of(const std::string& id) {
  std::vector<std::string> found;
  std::error_code error;
  for (const char* controller : {"memory", "cpu", "pids", "unified"}) {
    std::string root = std::string("/sys/fs/cgroup/") + controller;
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
         !error && it != fs::end(it); it.increment(error)) {
      if (it->is_directory(error) && it->path().filename() == "gpubox-" + id) found.push_back(it->path().string());
      // cgroup trees are shallow here; do not walk into every sandbox's files.
      if (it.depth() > 4) it.disable_recursion_pending();
    }
  }
  return found;
}

void CliTest::SetUpTestSuite() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

void CliTest::SetUp() {
  state_home_ = make_temp("gpubox-cli-state");
  scratch_ = make_temp("gpubox-cli-scratch");
}

void CliTest::TearDown() {
  CliRun cleanup = run({"terminate", "--all"});
  EXPECT_EQ(cleanup.status, 0) << cleanup.err;
  reap_orphans();
  EXPECT_TRUE(store_entries().empty()) << "sandboxes left in the store";
  std::error_code ignored;
  fs::remove_all(state_home_, ignored);
  fs::remove_all(scratch_, ignored);
}

std::vector<std::string> CliTest::cli_environment(const std::map<std::string, std::string>& env) const {
  std::map<std::string, std::string> merged;
  for (char** var = environ; *var; ++var) {
    std::string text = *var;
    auto eq = text.find('=');
    if (eq != std::string::npos) merged[text.substr(0, eq)] = text.substr(eq + 1);
  }
  merged["XDG_STATE_HOME"] = state_home_;
  merged["GPUBOX_AGENT"] = GPUBOX_AGENT_PATH;
  for (const auto& [name, value] : backend_environment()) merged[name] = value;
  for (const auto& [name, value] : env) merged[name] = value;
  std::vector<std::string> strings;
  for (const auto& [name, value] : merged) strings.push_back(name + "=" + value);
  return strings;
}

CliRun CliTest::run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                    const std::function<void(pid_t)>& during, const std::string* input) const {
  std::vector<std::string> env_strings = cli_environment(env), argv_strings = {cli_path()};
  std::string stdin_path = "/dev/null";
  if (input) {
    stdin_path = scratch_ + "/.stdin";
    write_text(stdin_path, *input);
  }
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  // `gpubox [--json] create …`: the test's backend comes first (a snapshot brings its own).
  bool from_snapshot = std::find(args.begin(), args.end(), "--from-snapshot") != args.end();
  // A bound against hangs. A create on a container backend waits for a container (a pod) and its
  // agent, which a machine busy with the suite's other tests can make slow: it gets longer.
  auto limit = std::chrono::seconds(60);
  for (size_t at = 1; !from_snapshot && at < argv_strings.size() && at <= 2; ++at) {
    if (argv_strings[at] == "create") {
      std::vector<std::string> backend = backend_args();
      argv_strings.insert(argv_strings.begin() + static_cast<long>(at) + 1, backend.begin(), backend.end());
      if (!backend.empty()) limit = std::chrono::seconds(120);
      break;
    }
    if (argv_strings[at] != "--json") break;
  }
  std::vector<char*> argv, envp;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open(stdin_path.c_str(), O_RDONLY);
    ::dup2(null_fd, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  std::thread side;
  if (during) side = std::thread([&during, pid] { during(pid); });
  CliRun result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  auto deadline = std::chrono::steady_clock::now() + limit;
  int open = 2;
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buffer[65536];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  if (open > 0) {
    ::kill(pid, SIGKILL);
    ADD_FAILURE() << "gpubox " << (args.empty() ? "" : args[0]) << " still ran after " << limit.count()
                  << " s; its stderr so far: " << result.err << backend_log();
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  if (side.joinable()) side.join();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string CliTest::create(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"create"};
  full.insert(full.end(), args.begin(), args.end());
  CliRun created = run(full);
  EXPECT_EQ(created.status, 0) << created.err;
  std::string id = created.out;
  while (!id.empty() && id.back() == '\n') id.pop_back();
  EXPECT_EQ(id.size(), 12u) << "create printed '" << created.out << "'";
  return id;
}

void BackendCliTest::SetUp() {
  CliTest::SetUp();
  if (!container()) return;
  std::string problem = modal() ? fake_modal_problem() : kubernetes() ? kubernetes_cluster_problem() : podman_problem();
  if (problem.empty() && docker()) problem = docker_problem();
  if (!problem.empty()) GPUBOX_MISSING(problem);
  std::string built = docker() ? load_test_image_into_docker(kTestImagePython) : build_test_image(kTestImagePython);
  ASSERT_EQ(built, "") << "building the sandbox image for the " << backend() << " backend";
  if (modal()) ASSERT_EQ(start_shared(shared_fake_modal()), "") << "starting the fake Modal control plane";
  if (kubernetes()) ASSERT_EQ(start_shared(shared_test_cluster()), "") << "starting the Kubernetes test cluster";
  if (control_plane()) control_plane_before_ = control_plane_left();
}

void BackendCliTest::TearDownTestSuite() {
  shared_fake_modal().reset();
  shared_test_cluster().reset();
}

std::string BackendCliTest::backend_log() const {
  if (kubernetes() && shared_test_cluster()) return "\nthe test cluster's controller logged:\n" + shared_test_cluster()->log_tail();
  return "";
}

std::map<std::string, std::string> BackendCliTest::backend_environment() const {
  if (modal() && shared_fake_modal()) return shared_fake_modal()->user_environment();
  if (kubernetes() && shared_test_cluster()) return shared_test_cluster()->user_environment();
  return {};
}

pid_t BackendCliTest::agent_pid(const std::string& id) const {
  if (!control_plane()) return record(id)["agent_pid"].get<pid_t>();
  // A control plane's agent is no process of this host; the container that stands in for its machine is.
  std::string container = modal() ? FakeModalProcess::container_of(record(id)["spec"].value("modal_id", ""))
                                  : shared_test_cluster()->container_of(record(id)["spec"].value("kubernetes_id", ""));
  auto pid = host::run_program("podman", {"inspect", "--format", "{{.State.Pid}}", container});
  return pid && pid->status == 0 ? static_cast<pid_t>(std::stol(pid->out)) : -1;
}

nlohmann::json BackendCliTest::listing_after_agent_died() const {
  auto listed = nlohmann::json::parse(run({"ls", "--json"}).out, nullptr, false);
  for (int i = 0; kubernetes() && i < 300 && !(listed.size() == 1 && listed[0]["state"] == "dead"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    listed = nlohmann::json::parse(run({"ls", "--json"}).out, nullptr, false);
  }
  return listed;
}

std::vector<std::string> BackendCliTest::control_plane_left() const {
  if (modal() && shared_fake_modal()) return shared_fake_modal()->running(shared_fake_modal()->containers());
  if (kubernetes() && shared_test_cluster()) return shared_test_cluster()->left();
  return {};
}

void BackendCliTest::TearDown() {
  CliTest::TearDown();
  if (control_plane()) {
    std::vector<std::string> left;
    for (const auto& thing : control_plane_left()) {
      if (std::find(control_plane_before_.begin(), control_plane_before_.end(), thing) == control_plane_before_.end()) {
        left.push_back(thing);
      }
    }
    EXPECT_TRUE(left.empty()) << "sandboxes of this test are still on " << backend() << " after terminate --all: "
                              << left.size() << (left.empty() ? "" : " (" + left[0] + ", ...)");
    return;
  }
  if (!container() || !podman_problem().empty() || (docker() && !docker_problem().empty())) return;
  // Snapshot images a failed test left (committed images keep the container's labels).
  const std::string engine = backend();
  std::string label = "label=gpubox.store=" + state_home() + "/gpubox";
  std::string images = host::run_program(engine, {"images", "--quiet", "--filter", label})->out;
  for (size_t at = 0, end; at < images.size(); at = end + 1) {
    end = images.find('\n', at);
    if (end == std::string::npos) end = images.size();
    if (end > at) (void)host::run_program(engine, {"rmi", "--force", images.substr(at, end - at)});
  }
  EXPECT_EQ(host::run_program(engine, {"ps", "--all", "--quiet", "--filter", label})->out, "")
      << "containers of this test left after terminate --all";
}

std::string PodmanCliTest::podman(const std::vector<std::string>& args) const {
  auto ran = host::run_program("podman", args);
  EXPECT_TRUE(ran) << ran.status().to_string();
  return ran ? ran->out : "";
}

std::vector<std::string> BackendCliTest::backend_args() const {
  if (!container()) return {};
  std::vector<std::string> args = {"--backend", backend(), "--image", test_image_tag(kTestImagePython)};
  if (kubernetes() && shared_test_cluster()) {
    args.insert(args.end(), {"--namespace", shared_test_cluster()->namespace_name()});
  }
  return args;
}

nlohmann::json CliTest::record(const std::string& id) const {
  return nlohmann::json::parse(read_text(store_dir() + "/" + id + "/sandbox.json"), nullptr, false);
}

void CliTest::expect_dead_sandbox_cleaned_up(const std::string& id) {
  CliRun exec = run({"exec", id, "--", "true"});
  EXPECT_EQ(exec.status, 3);
  EXPECT_NE(exec.err.find("dead"), std::string::npos) << exec.err;
  CliRun terminated = run({"terminate", id});
  EXPECT_EQ(terminated.status, 0) << terminated.err;
  EXPECT_NE(terminated.out.find("was dead"), std::string::npos) << terminated.out;
}

std::vector<std::string> CliTest::store_entries() const {
  std::vector<std::string> entries;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(store_dir(), error)) entries.push_back(entry.path().filename());
  return entries;
}

}  // namespace gpubox::testing
