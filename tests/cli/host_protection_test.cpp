// What a local sandbox cannot do to its host: change the host's files (its
// root is a copy-on-write overlay), reach the store or another sandbox, use
// the capabilities of host root, or (with --userns) be root outside at all;
// and what it keeps: installs into its own root, its cgroup limits, local
// GPUs where the host has them.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// What the host's trees hold: for every entry its type, mode, owner, size,
// mtime and ctime (a write, chmod or chown anywhere changes the ctime, even
// when the mtime is set back), and for regular files of /etc up to 64 KiB
// their content. Paths that other processes of the host change on their own
// (container storage, the test docker engine's included, logs, caches, other
// users of /var/tmp) are left out; what the hostile script puts in /var/tmp is
// checked by name.
using Snapshot = std::map<std::string, std::string>;

bool volatile_path(const std::string& path) {
  for (const char* prefix : {"/var/lib/containers", "/var/lib/gpubox-test-docker", "/var/log", "/var/cache", "/var/tmp",
                             "/var/lib/apt", "/var/lib/dpkg", "/var/lib/systemd", "/var/spool"}) {
    if (path.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

Snapshot snapshot_host() {
  Snapshot snapshot;
  std::error_code error;
  for (const char* root : {"/usr", "/etc", "/var"}) {
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      std::string path = it->path().string();
      if (volatile_path(path)) {
        if (it->is_directory(error)) it.disable_recursion_pending();
        continue;
      }
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) continue;
      std::ostringstream entry;
      entry << std::oct << st.st_mode << std::dec << ' ' << st.st_uid << ':' << st.st_gid << ' ' << st.st_size << ' '
            << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec << ' ' << st.st_ctim.tv_sec << '.' << st.st_ctim.tv_nsec;
      if (S_ISREG(st.st_mode) && st.st_size <= (64 << 10) && path.rfind("/etc/", 0) == 0) {
        entry << ' ' << std::hash<std::string>{}(read_text(path));
      }
      snapshot[path] = entry.str();
    }
    error.clear();
  }
  return snapshot;
}

// The entries that differ, one a line ("+" new, "-" gone, "~" changed).
std::string differences(const Snapshot& before, const Snapshot& after) {
  std::string out;
  for (const auto& [path, entry] : before) {
    auto found = after.find(path);
    if (found == after.end()) out += "- " + path + "\n";
    else if (found->second != entry) out += "~ " + path + ": " + entry + " -> " + found->second + "\n";
  }
  for (const auto& [path, entry] : after) {
    if (!before.count(path)) out += "+ " + path + "\n";
  }
  return out;
}

TEST_F(CliTest, AHostileScriptLeavesTheHostsFilesUnchanged) {
  std::string id = create();
  std::string probe = "gpubox-probe-" + id;
  auto started = std::chrono::steady_clock::now();
  Snapshot before = snapshot_host();
  auto walked = std::chrono::steady_clock::now() - started;

  // Everything a root shell could try on the file system: new files, changed
  // files, deletions, modes, owners, times, links, device nodes.
  std::string script =
      "echo owned > /usr/bin/" + probe + "; echo owned >> /etc/hostname; echo owned > /var/tmp/" + probe +
      "; rm -f /etc/issue; rm -rf /usr/share/doc/bash; chmod 777 /etc/shadow; chown 1234:1234 /etc/passwd"
      "; touch -d 2001-01-01 /usr/bin/ls; mkdir -p /usr/lib/" + probe + "; ln -s / /usr/local/" + probe +
      "; mv /etc/hosts /etc/hosts.moved; truncate -s 0 /usr/bin/env"
      "; mknod /workspace/disk b 254 0 2>/dev/null && echo mknod-worked; echo done";
  CliRun hostile = run({"exec", id, "--", "bash", "-c", script});
  EXPECT_EQ(hostile.out, "done\n") << hostile.err;
  write_text(scratch() + "/a.txt", "put at the root\n");
  CliRun put = run({"put", id, scratch() + "/a.txt", "/"});
  EXPECT_EQ(put.status, 0) << put.err;

  // Inside, every change took effect.
  CliRun inside = run({"exec", id, "--", "bash", "-c",
                       "cat /usr/bin/" + probe + " /var/tmp/" + probe + " /a.txt; tail -n1 /etc/hostname; "
                       "stat -c %a /etc/shadow; test -e /etc/issue || echo issue-gone; test -e /usr/share/doc/bash || "
                       "echo doc-gone; stat -c %s /usr/bin/env"});
  EXPECT_EQ(inside.out, "owned\nowned\nput at the root\nowned\n777\nissue-gone\ndoc-gone\n0\n") << inside.err;

  // On the host, nothing.
  Snapshot after = snapshot_host();
  EXPECT_EQ(differences(before, after), "");
  EXPECT_FALSE(fs::exists("/var/tmp/" + probe));
  EXPECT_FALSE(fs::exists("/a.txt"));
  EXPECT_GT(before.size(), 1000u) << "the walk saw too little to prove anything";
  EXPECT_LT(std::chrono::duration_cast<std::chrono::seconds>(walked).count(), 60) << "the host walk is too slow for CI";
}

TEST_F(CliTest, PipStyleInstallIsVisibleInsideOnly) {
  std::string id = create();
  const std::string package = "/usr/lib/python3/dist-packages/gpubox_probe_" + id;
  ASSERT_EQ(run({"exec", id, "--", "bash", "-c",
                 "mkdir -p " + package + " && echo 'VALUE = 42' > " + package + "/__init__.py"})
                .status,
            0);
  CliRun imported = run({"exec", id, "--", "python3", "-c", "import gpubox_probe_" + id + " as p; print(p.VALUE)"});
  EXPECT_EQ(imported.out, "42\n") << imported.err;
  // The kernel's Python, a child of the agent, sees it as well.
  CliRun cell = run({"run-code", id, "import gpubox_probe_" + id + " as p; print(p.VALUE * 2)"});
  EXPECT_THAT(cell.out, HasSubstr("84")) << cell.err;
  EXPECT_FALSE(fs::exists(package));
  // The files live in the sandbox's upper layer, which terminate removes.
  std::string upper = store_dir() + "/" + id + "/root/upper";
  EXPECT_TRUE(fs::exists(upper + package + "/__init__.py"));
  ASSERT_EQ(run({"terminate", id}).status, 0);
  EXPECT_FALSE(fs::exists(upper));
  EXPECT_TRUE(store_entries().empty());
}

// What `ls -A DIR` shows inside a local sandbox of a hidden DIR (/root, /home):
// nothing, or, for a checkout under it whose gpubox-modeld sits beside the
// agent, its first directory: the way to the library trees of modeld's
// RUNPATH that the sandbox brings along (host/backends/local/runtime_binds.h).
std::string listed_under(const std::string& dir) {
  fs::path agent_path = fs::weakly_canonical(GPUBOX_AGENT_PATH);
  std::string agent = agent_path.string();
  if (agent.rfind(dir + "/", 0) != 0 || !fs::exists(agent_path.parent_path() / "gpubox-modeld")) return "";
  std::string rest = agent.substr(dir.size() + 1);
  return rest.substr(0, rest.find('/')) + "\n";
}

TEST_F(CliTest, NeitherTheStoreNorAnotherSandboxIsReachable) {
  std::string first = create({"--name", "first"});
  ASSERT_EQ(run({"exec", first, "--", "sh", "-c", "echo mine > /workspace/secret; echo mine > /usr/local/secret"}).status, 0);
  std::string second = create({"--name", "second"});
  std::string first_dir = store_dir() + "/" + first;
  CliRun looked = run({"exec", second, "--", "sh", "-c",
                       "cat /usr/local/secret " + first_dir + "/work/secret " + first_dir + "/root/upper/usr/local/secret"
                       " 2>/dev/null; ls -A " + store_dir() + " /root /home 2>/dev/null; echo end"});
  EXPECT_EQ(looked.out, "/home:\n" + listed_under("/home") + "\n/root:\n" + listed_under("/root") + "end\n") << looked.err;
  // A sandbox's own files are where it left them.
  EXPECT_EQ(run({"exec", first, "--", "cat", "/usr/local/secret"}).out, "mine\n");
  // --mount still puts a host directory under a hidden one.
  fs::create_directories(scratch() + "/project");
  write_text(scratch() + "/project/notes.txt", "notes\n");
  std::string mounted = create({"--mount", scratch() + "/project:/root/project:ro"});
  EXPECT_EQ(run({"exec", mounted, "--", "cat", "/root/project/notes.txt"}).out, "notes\n");
}

// The fixture's store lies under /tmp, which every sandbox has of its own;
// a store elsewhere on the host's root file system is hidden all the same.
TEST_F(CliTest, TheStoreIsHiddenWhereverItLies) {
  char pattern[] = "/gpubox-cli-store-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  std::string home = pattern;
  std::map<std::string, std::string> env = {{"XDG_STATE_HOME", home}};
  CliRun created = run({"create"}, env);
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = created.out.substr(0, 12);
  std::string record = home + "/gpubox/sandboxes/" + id + "/sandbox.json";
  EXPECT_TRUE(fs::exists(record));
  CliRun looked = run({"exec", id, "--", "sh", "-c", "ls -A " + home + "/gpubox; cat " + record + " || echo hidden"}, env);
  EXPECT_EQ(looked.out, "hidden\n") << looked.err;
  EXPECT_EQ(run({"terminate", "--all"}, env).status, 0);
  std::error_code ignored;
  fs::remove_all(home, ignored);
}

TEST_F(CliTest, PrivilegedOperationsFailInside) {
  std::string id = create();
  // Each line: what was tried, and whether the kernel let it happen.
  std::string probe = R"(
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    result = call()
    print(name, 'allowed' if result == 0 else errno.errorcode.get(ctypes.get_errno(), '?'))
attempt('mount', lambda: libc.mount(b'none', b'/mnt', b'tmpfs', 0, None))
attempt('init_module', lambda: libc.init_module(b'\0' * 64, 64, b''))
attempt('reboot', lambda: libc.reboot(0x4321fedc))
now = (ctypes.c_long * 2)(0, 0)
attempt('clock_settime', lambda: libc.clock_settime(0, ctypes.byref(now)))
attempt('mknod', lambda: libc.mknod(b'/tmp/disk', 0o60600, os.makedev(254, 0)))
attempt('swapoff', lambda: libc.swapoff(b'/nothing'))
attempt('unshare-mount', lambda: libc.unshare(0x00020000))
status = dict(line.split(':\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\t' in line)
print('NoNewPrivs', status['NoNewPrivs'].strip(), 'CapEff', status['CapEff'].strip(), 'CapBnd', status['CapBnd'].strip())
for path in ['/proc/sys/kernel/core_pattern', '/sys/kernel/mm/transparent_hugepage/enabled', '/proc/sysrq-trigger']:
    try:
        open(path, 'w').write('x')
        print(path, 'allowed')
    except OSError as e:
        print(path, errno.errorcode[e.errno])
try:
    open('/proc/1/environ').read()
    print('agent environ allowed')
except OSError as e:
    print('agent environ', errno.errorcode[e.errno])
)";
  CliRun tried = run({"exec", id, "--", "python3", "-c", probe});
  EXPECT_EQ(tried.status, 0) << tried.err;
  EXPECT_THAT(tried.out, HasSubstr("mount EPERM\n"));
  // A kernel built without module support answers ENOSYS to anyone; the
  // capability masks below show CAP_SYS_MODULE gone all the same.
  EXPECT_THAT(tried.out, ::testing::AnyOf(HasSubstr("init_module EPERM\n"), HasSubstr("init_module ENOSYS\n")));
  EXPECT_THAT(tried.out, HasSubstr("reboot EPERM\n"));
  EXPECT_THAT(tried.out, HasSubstr("clock_settime EPERM\n"));
  EXPECT_THAT(tried.out, HasSubstr("mknod EPERM\n"));
  EXPECT_THAT(tried.out, HasSubstr("swapoff EPERM\n"));
  EXPECT_THAT(tried.out, HasSubstr("unshare-mount EPERM\n"));
  // Docker's default set less CAP_MKNOD and CAP_NET_RAW, in effect and as the bound.
  EXPECT_THAT(tried.out, HasSubstr("NoNewPrivs 1 CapEff 00000000a00405fb CapBnd 00000000a00405fb\n"));
  EXPECT_THAT(tried.out, HasSubstr("/proc/sys/kernel/core_pattern EROFS\n"));
  EXPECT_THAT(tried.out, HasSubstr("/sys/kernel/mm/transparent_hugepage/enabled EROFS\n"));
  // (Absent where the kernel has no magic SysRq key.)
  EXPECT_THAT(tried.out, ::testing::AnyOf(HasSubstr("/proc/sysrq-trigger EROFS\n"), HasSubstr("/proc/sysrq-trigger ENOENT\n")));
  EXPECT_THAT(tried.out, HasSubstr("agent environ EACCES\n"));
  // The mount tool says so too.
  CliRun mounted = run({"exec", id, "--", "mount", "-t", "tmpfs", "none", "/mnt"});
  EXPECT_NE(mounted.status, 0);
  EXPECT_THAT(mounted.err, HasSubstr("ermission denied"));
}

TEST_F(CliTest, InfoSaysWhichProtectionsAreOn) {
  std::string id = create();
  auto info = nlohmann::json::parse(run({"info", id, "--json"}).out);
  const auto& isolation = info["isolation"];
  EXPECT_EQ(isolation["root"], "overlay");
  EXPECT_EQ(isolation["no_new_privs"], true);
  EXPECT_TRUE(isolation["user_namespace"].is_null());
  EXPECT_EQ(isolation["network"], "none");
  EXPECT_THAT(isolation["capabilities"].dump(), HasSubstr("CAP_CHOWN"));
  EXPECT_THAT(isolation["capabilities"].dump(), ::testing::Not(HasSubstr("CAP_SYS_ADMIN")));
  CliRun text = run({"info", id});
  EXPECT_THAT(text.out, HasSubstr("root:        overlay"));
  EXPECT_THAT(text.out, HasSubstr("no_new_privs"));
  EXPECT_THAT(text.out, HasSubstr("userns:      none"));
}

TEST_F(CliTest, UsernsRootIsAnUnprivilegedUidOnTheHost) {
#ifdef GPUBOX_SANITIZE
  const int limit_mib = 512;  // room for an AddressSanitizer agent
#else
  const int limit_mib = 128;
#endif
  std::string id = create({"--userns", "--memory", std::to_string(limit_mib)});
  CliRun inside = run({"exec", id, "--", "sh", "-c", "id -u; cat /proc/self/uid_map; echo x > /workspace/made; "
                                                     "echo y > /usr/local/made; stat -c %u /usr/bin/ls"});
  EXPECT_EQ(inside.status, 0) << inside.err;
  EXPECT_THAT(inside.out, ::testing::MatchesRegex("0\n +0 +[0-9]+ +[0-9]+\n0\n")) << inside.out;
  auto info = nlohmann::json::parse(run({"info", id, "--json"}).out);
  std::string uid_map = info["isolation"]["user_namespace"]["uid_map"].get<std::string>();
  unsigned host_uid = static_cast<unsigned>(std::stoul(uid_map.substr(2, uid_map.find(' ', 2) - 2)));
  ASSERT_GT(host_uid, 0u);
  // The host sees the agent (and every process below it) as that uid.
  pid_t agent = record(id)["agent_pid"].get<pid_t>();
  EXPECT_THAT(read_text("/proc/" + std::to_string(agent) + "/status"),
              HasSubstr("Uid:\t" + std::to_string(host_uid) + "\t" + std::to_string(host_uid)));
  // The work dir is idmapped: its files stay the host's root's; the upper
  // layer's belong to the unprivileged range.
  struct stat st {};
  ASSERT_EQ(::stat((store_dir() + "/" + id + "/work/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  ASSERT_EQ(::stat((store_dir() + "/" + id + "/root/upper/usr/local/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, host_uid);
  // The limits still hold, and jobs still get their cgroups.
  CliRun big = run({"exec", id, "--", "python3", "-c",
                    "b = b'x' * (" + std::to_string(2 * limit_mib) + " << 20); print('allocated')"});
  EXPECT_EQ(big.status, 128 + SIGKILL) << big.out << big.err;
  CliRun submitted = run({"submit", id, "--", "echo from-a-job > out/a.txt"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  CliRun waited = run({"wait", id, submitted.out.substr(0, submitted.out.find('\n'))});
  EXPECT_EQ(waited.status, 0) << waited.out << waited.err;
  EXPECT_THAT(run({"info", id}).out, HasSubstr("userns:      uid map 0 " + std::to_string(host_uid)));
}

TEST_F(CliTest, GpuIsRefusedWhereTheHostHasNone) {
  CliRun malformed = run({"create", "--gpu", "first"});
  EXPECT_EQ(malformed.status, 2);
  EXPECT_THAT(malformed.err, HasSubstr("--gpu: expected all or GPU numbers such as 0,1, got 'first'"));
  if (fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "this host has NVIDIA devices (tests/device checks them)";
  for (const char* request : {"all", "0", "0,1"}) {
    CliRun refused = run({"create", "--gpu", request});
    EXPECT_EQ(refused.status, 2) << request;
    EXPECT_THAT(refused.err, HasSubstr("--gpu: this host has no NVIDIA GPU"));
    // Its one line and a pointer to the usage, not the usage itself.
    EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 2) << refused.err;
    EXPECT_THAT(refused.err, HasSubstr("\nSee 'gpubox create --help'.\n"));
  }
  EXPECT_TRUE(store_entries().empty());
}

}  // namespace
}  // namespace gpubox::testing
