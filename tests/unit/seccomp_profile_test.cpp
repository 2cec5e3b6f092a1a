// agent/seccomp_profile.h against Docker's own default.json (the Go module
// github.com/moby/profiles/seccomp, fetched by scripts/setup.sh): the file's
// rules, filtered as Docker's runtime filters them (setupSeccomp in the
// module's seccomp_linux.go: arches, capabilities, minimum kernel), equal
// gpubox's table, call by call with actions, errnos and argument filters,
// for a local sandbox's capabilities; and under --userns, the same plus
// exactly the namespace calls of the CAP_SYS_ADMIN rules.
#include "agent/seccomp_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "host/backends/local/capabilities.h"
#include "tests/prerequisite.h"

namespace gpubox {
namespace {

using nlohmann::json;

// One rule of one call, comparable: name, action, errno, and its argument
// conditions as (index, op, value, value two), sorted.
using Condition = std::tuple<unsigned, int, uint64_t, uint64_t>;
using Normal = std::tuple<std::string, std::string, int, std::vector<Condition>>;

int op_of(const std::string& name) {
  static const std::map<std::string, int> ops = {
      {"SCMP_CMP_NE", SCMP_CMP_NE}, {"SCMP_CMP_LT", SCMP_CMP_LT}, {"SCMP_CMP_LE", SCMP_CMP_LE},
      {"SCMP_CMP_EQ", SCMP_CMP_EQ}, {"SCMP_CMP_GE", SCMP_CMP_GE}, {"SCMP_CMP_GT", SCMP_CMP_GT},
      {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ}};
  auto found = ops.find(name);
  EXPECT_NE(found, ops.end()) << name;
  return found == ops.end() ? -1 : found->second;
}

std::set<Normal> ours(bool allow_namespaces) {
  std::set<Normal> rules;
  for (const SeccompRule& rule : seccomp_profile_rules(allow_namespaces)) {
    std::vector<Condition> args;
    for (const scmp_arg_cmp& arg : rule.args) args.emplace_back(arg.arg, arg.op, arg.datum_a, arg.datum_b);
    std::sort(args.begin(), args.end());
    bool allow = rule.action == SCMP_ACT_ALLOW;
    EXPECT_TRUE(allow || (rule.action & 0xffff0000u) == SCMP_ACT_ERRNO(0)) << rule.name;
    rules.emplace(rule.name, allow ? "SCMP_ACT_ALLOW" : "SCMP_ACT_ERRNO", allow ? 0 : static_cast<int>(rule.action & 0xffff),
                  args);
  }
  return rules;
}

bool kernel_at_least(const std::string& version) {
  utsname names{};
  ::uname(&names);
  int major = 0, minor = 0, need_major = 0, need_minor = 0;
  std::sscanf(names.release, "%d.%d", &major, &minor);
  std::sscanf(version.c_str(), "%d.%d", &need_major, &need_minor);
  return std::tie(major, minor) >= std::tie(need_major, need_minor);
}

bool contains(const json& list, const std::string& value) {
  return list.is_array() && std::find(list.begin(), list.end(), value) != list.end();
}

// default.json's rules as Docker's runtime keeps them for a container with
// these capabilities on this machine, one entry per call name.
std::set<Normal> docker(const json& profile, const std::vector<std::string>& caps) {
#if defined(__x86_64__)
  const std::string arch = "amd64";
#elif defined(__aarch64__)
  const std::string arch = "arm64";
#endif
  auto has_cap = [&](const json& cap) { return std::find(caps.begin(), caps.end(), cap.get<std::string>()) != caps.end(); };
  std::set<Normal> rules;
  for (const json& rule : profile.at("syscalls")) {
    const json excludes = rule.value("excludes", json::object()), includes = rule.value("includes", json::object());
    if (contains(excludes.value("arches", json()), arch)) continue;
    const json excluded_caps = excludes.value("caps", json::array());
    if (std::any_of(excluded_caps.begin(), excluded_caps.end(), has_cap)) continue;
    if (excludes.contains("minKernel") && kernel_at_least(excludes["minKernel"])) continue;
    if (includes.contains("arches") && !contains(includes["arches"], arch)) continue;
    const json included_caps = includes.value("caps", json::array());
    if (!std::all_of(included_caps.begin(), included_caps.end(), has_cap)) continue;
    if (includes.contains("minKernel") && !kernel_at_least(includes["minKernel"])) continue;
    std::vector<Condition> args;
    for (const json& arg : rule.value("args", json::array())) {
      args.emplace_back(arg.at("index").get<unsigned>(), op_of(arg.at("op")), arg.at("value").get<uint64_t>(),
                        arg.value("valueTwo", uint64_t{0}));
    }
    std::sort(args.begin(), args.end());
    std::string action = rule.at("action");
    int errno_ret = action == "SCMP_ACT_ERRNO" ? rule.value("errnoRet", profile.value("defaultErrnoRet", 1)) : 0;
    for (const json& name : rule.at("names")) rules.emplace(name.get<std::string>(), action, errno_ret, args);
  }
  return rules;
}

json docker_profile() {
  std::ifstream in(GPUBOX_DOCKER_SECCOMP_PROFILE);
  if (!in) return json();
  return json::parse(in);
}

std::vector<std::string> sandbox_caps() { return host::capability_names(host::sandbox_capabilities()); }

TEST(SeccompProfile, EqualsDockersDefaultForASandboxsCapabilities) {
  json profile = docker_profile();
  if (profile.is_null()) GPUBOX_MISSING("Docker's default.json (scripts/setup.sh fetches it): " GPUBOX_DOCKER_SECCOMP_PROFILE);
  if (profile.is_null()) return;
  // Docker's default action, gpubox's too: EPERM for what no rule allows.
  EXPECT_EQ(profile["defaultAction"], "SCMP_ACT_ERRNO");
  EXPECT_EQ(profile["defaultErrnoRet"], 1);
  std::set<Normal> expected = docker(profile, sandbox_caps());
  std::set<Normal> actual = ours(false);
  EXPECT_GT(expected.size(), 350u);
  std::vector<Normal> missing, extra;
  std::set_difference(expected.begin(), expected.end(), actual.begin(), actual.end(), std::back_inserter(missing));
  std::set_difference(actual.begin(), actual.end(), expected.begin(), expected.end(), std::back_inserter(extra));
  for (const Normal& rule : missing) ADD_FAILURE() << "Docker has, gpubox lacks: " << std::get<0>(rule) << " " << std::get<1>(rule);
  for (const Normal& rule : extra) ADD_FAILURE() << "gpubox has, Docker lacks: " << std::get<0>(rule) << " " << std::get<1>(rule);
  // The capability rule that applies (Docker's default set has CAP_SYS_CHROOT too), and some that do not.
  EXPECT_TRUE(actual.count({"chroot", "SCMP_ACT_ALLOW", 0, {}}));
  EXPECT_FALSE(actual.count({"io_uring_setup", "SCMP_ACT_ALLOW", 0, {}}));
  EXPECT_FALSE(actual.count({"pidfd_getfd", "SCMP_ACT_ALLOW", 0, {}}));
  EXPECT_TRUE(actual.count({"clone3", "SCMP_ACT_ERRNO", 38, {}}));
}

TEST(SeccompProfile, UsernsAddsTheNamespaceCallsOfDockersSysAdminRulesOnly) {
  json profile = docker_profile();
  if (profile.is_null()) GPUBOX_MISSING("Docker's default.json (scripts/setup.sh fetches it): " GPUBOX_DOCKER_SECCOMP_PROFILE);
  if (profile.is_null()) return;
  std::vector<std::string> caps = sandbox_caps();
  std::set<Normal> without = docker(profile, caps);
  caps.push_back("CAP_SYS_ADMIN");
  std::set<Normal> with_sys_admin = docker(profile, caps);
  std::set<Normal> expected;
  for (const Normal& rule : without) {
    if (!is_namespace_call(std::get<0>(rule))) expected.insert(rule);
  }
  std::set<std::string> taken;
  for (const Normal& rule : with_sys_admin) {
    if (is_namespace_call(std::get<0>(rule))) expected.insert(rule), taken.insert(std::get<0>(rule));
  }
  EXPECT_EQ(taken, (std::set<std::string>{"clone", "clone3", "setns", "unshare"}));
  EXPECT_EQ(ours(true), expected);
  // What CAP_SYS_ADMIN would add besides, and --userns does not.
  for (const std::string name : {"mount", "bpf", "perf_event_open", "open_tree", "syslog"}) {
    EXPECT_TRUE(with_sys_admin.count({name, "SCMP_ACT_ALLOW", 0, {}})) << name;
    EXPECT_FALSE(ours(true).count({name, "SCMP_ACT_ALLOW", 0, {}})) << name;
  }
}

}  // namespace
}  // namespace gpubox
