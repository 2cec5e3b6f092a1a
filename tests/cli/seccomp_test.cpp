// The seccomp filter of local sandboxes (agent/seccomp_filter.h), from the
// outside: tests/cli/seccomp_probe.py inside a sandbox finds each call
// refused as Docker's profile refuses it (EPERM, or ENOSYS) and the others
// let through; --seccomp unconfined turns the filter off, and info says so;
// --userns lets namespace calls through; and what people run in a sandbox
// still works under it.
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;

std::string probe_source() {
  std::ifstream in(GPUBOX_SECCOMP_PROBE);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class SeccompCliTest : public CliTest {
 protected:
  // The probe's verdicts by attempt, run with Debian's python3 inside the
  // sandbox; expected_ gets what gpubox's default filter should answer.
  std::map<std::string, std::string> probe(const std::string& id) {
    CliRun ran = run({"exec", id, "--", "/usr/bin/python3", "-c", probe_source()});
    EXPECT_EQ(ran.status, 0) << ran.err;
    std::map<std::string, std::string> verdicts;
    std::istringstream lines(ran.out);
    for (std::string name, verdict, expected; lines >> name >> verdict >> expected;) {
      verdicts[name] = verdict;
      expected_[name] = expected;
    }
    return verdicts;
  }
  static bool refused(const std::string& verdict) { return verdict == "EPERM" || verdict == "ENOSYS"; }
  std::map<std::string, std::string> expected_;
};

TEST_F(SeccompCliTest, DeniesEachCallInsideAndUnconfinedTurnsItOff) {
  std::string id = create();
  auto filtered = probe(id);
  ASSERT_GT(filtered.size(), 60u);
  EXPECT_EQ(filtered["seccomp-mode"], "2");
  filtered.erase("seccomp-mode");
  for (const auto& [name, verdict] : filtered) {
    if (expected_[name] == "passes") {
      EXPECT_FALSE(refused(verdict)) << name << ": " << verdict;
    } else {
      EXPECT_EQ(verdict, expected_[name]) << name;
    }
  }
  for (const std::string name : {"io_uring_setup", "socket-vsock", "pidfd_getfd", "x32-io_uring_setup"}) EXPECT_EQ(filtered[name], "EPERM") << name;
  EXPECT_EQ(filtered["open_tree_attr"], "ENOSYS");
  auto info = nlohmann::json::parse(run({"info", id, "--json"}).out);
  EXPECT_EQ(info["spec"]["seccomp"], "default");
  EXPECT_EQ(info["agent"]["seccomp"]["profile"], "default");
  EXPECT_THAT(run({"info", id}).out, HasSubstr("seccomp:     default (gpubox's filter"));

  // Unconfined: what needs no capability goes through again.
  std::string open = create({"--seccomp", "unconfined"});
  auto unfiltered = probe(open);
  EXPECT_EQ(unfiltered["seccomp-mode"], "0");
  for (const std::string name : {"unshare", "clone-user-namespace", "keyctl", "bpf", "userfaultfd",
                                 "personality-addr-no-randomize", "io_uring_setup", "setns", "clone3"}) {
    EXPECT_NE(unfiltered[name], "EPERM") << name;
  }
  EXPECT_THAT(run({"info", open}).out, HasSubstr("seccomp:     unconfined -- WARNING: no syscall filter"));
  EXPECT_EQ(nlohmann::json::parse(run({"info", open, "--json"}).out)["agent"]["seccomp"]["profile"], "unconfined");

  // Under --userns, namespace calls pass (root inside is unprivileged outside); the rest stays denied.
  auto nested = probe(create({"--userns"}));
  EXPECT_EQ(nested["seccomp-mode"], "2");
  for (const std::string name : {"unshare", "clone-user-namespace"}) EXPECT_EQ(nested[name], "allowed") << name;
  for (const std::string name : {"bpf", "keyctl", "mount", "personality-addr-no-randomize", "io_uring_setup"}) {
    EXPECT_EQ(nested[name], "EPERM") << name;
  }

  CliRun bad = run({"create", "--seccomp", "off"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--seccomp: expected default or unconfined, got 'off'"));
}

TEST_F(SeccompCliTest, UnderTheFilterPythonPipTorchGccGitTheKernelAndJobsWork) {
  std::string id = create();
  std::string script = R"(set -e
cd /tmp
/usr/bin/python3 -c 'import sys; print("python", sys.version_info[0])'
/usr/bin/python3 -m venv v
/usr/bin/python3 - <<'PY'
import zipfile
with zipfile.ZipFile('gpubox_probe_pkg-1.0-py3-none-any.whl', 'w') as wheel:
    wheel.writestr('gpubox_probe_pkg.py', 'VALUE = 21\n')
    info = 'gpubox_probe_pkg-1.0.dist-info/'
    wheel.writestr(info + 'METADATA', 'Metadata-Version: 2.1\nName: gpubox-probe-pkg\nVersion: 1.0\n')
    wheel.writestr(info + 'WHEEL', 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n')
    wheel.writestr(info + 'RECORD', '')
PY
v/bin/pip install --no-index -q gpubox_probe_pkg-1.0-py3-none-any.whl
v/bin/python -c 'import gpubox_probe_pkg as p; print("pip", p.VALUE * 2)'
/usr/bin/python3 -c 'import torch; print("torch", int(torch.arange(4.0).sum()))'
printf '#include <stdio.h>\nint main(void) { puts("gcc works"); return 0; }\n' > t.c
gcc t.c -o t
./t
git init -q repo
git -C repo -c user.email=t@example.com -c user.name=t commit -q --allow-empty -m first
echo git $(git -C repo rev-list --count HEAD)
)";
  CliRun ran = run({"exec", id, "--", "bash", "-c", script});
  EXPECT_EQ(ran.status, 0) << ran.err;
  EXPECT_EQ(ran.out, "python 3\npip 42\ntorch 6\ngcc works\ngit 1\n") << ran.err;

  CliRun cell = run({"run-code", id, "import subprocess; print(subprocess.run(['echo', 'kernel'], capture_output=True, text=True).stdout.strip(), 6 * 7)"});
  EXPECT_EQ(cell.status, 0) << cell.err;
  EXPECT_EQ(cell.out, "kernel 42\n");

  CliRun submitted = run({"submit", id, "--", "grep Seccomp: /proc/self/status > out/mode.txt"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  CliRun waited = run({"wait", id, job});
  EXPECT_EQ(waited.status, 0) << waited.out << waited.err;
  ASSERT_EQ(run({"result", id, job, "--out", scratch() + "/job"}).status, 0);
  EXPECT_EQ(read_text(scratch() + "/job/out/mode.txt"), "Seccomp:\t2\n");
}

}  // namespace
}  // namespace gpubox::testing
