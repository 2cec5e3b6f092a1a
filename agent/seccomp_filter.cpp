#include "agent/seccomp_filter.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "agent/seccomp_profile.h"
#include "base/fd.h"

namespace gpubox {
namespace {

constexpr uint32_t kX32Bit = 0x40000000;  // the kernel's __X32_SYSCALL_BIT

// One system call ABI the filter covers: libseccomp's name for it, the
// architecture the kernel reports for its calls, and, on x86-64, whether its
// call numbers carry the x32 bit (x32 programs report x86-64).
struct Abi {
  uint32_t scmp_arch;
  uint32_t audit_arch;
  enum { kAny, kWithoutX32Bit, kWithX32Bit } x32_bit;
};

#if defined(__x86_64__)
constexpr Abi kAbis[] = {{SCMP_ARCH_X86_64, AUDIT_ARCH_X86_64, Abi::kWithoutX32Bit},
                         {SCMP_ARCH_X86, AUDIT_ARCH_I386, Abi::kAny},
                         {SCMP_ARCH_X32, AUDIT_ARCH_X86_64, Abi::kWithX32Bit}};
#elif defined(__aarch64__)
constexpr Abi kAbis[] = {{SCMP_ARCH_AARCH64, AUDIT_ARCH_AARCH64, Abi::kAny}, {SCMP_ARCH_ARM, AUDIT_ARCH_ARM, Abi::kAny}};
#else
#error "gpubox's seccomp filter knows x86-64 and arm64"
#endif

// Calls the table allows that Debian 12's libseccomp (2.5.4) cannot name
// yet, by number: x86-64's (x32's the same plus the x32 bit, where x32 has
// the call) and i386's, -1 for none. The filter allows them ahead of
// libseccomp's program (enosys_stub below).
struct NewerCall {
  const char* name;
  int x86_64;
  int i386;
  bool x32;
};
#if defined(__x86_64__)
constexpr NewerCall kNewerCalls[] = {
    {"uretprobe", 335, -1, false},       {"statmount", 457, 457, true},         {"listmount", 458, 458, true},
    {"lsm_get_self_attr", 459, 459, true}, {"lsm_set_self_attr", 460, 460, true}, {"lsm_list_modules", 461, 461, true},
    {"mseal", 462, 462, true},           {"setxattrat", 463, 463, true},        {"getxattrat", 464, 464, true},
    {"listxattrat", 465, 465, true},     {"removexattrat", 466, 466, true}};
#else
constexpr NewerCall kNewerCalls[] = {{"", -1, -1, false}};
#endif

const NewerCall* newer_call(const std::string& name) {
  for (const NewerCall& call : kNewerCalls) {
    if (name == call.name) return &call;
  }
  return nullptr;
}

// The number of name in abi, from libseccomp or kNewerCalls; nullopt where abi has no such call.
std::optional<uint32_t> call_number(const Abi& abi, const std::string& name) {
  int nr = seccomp_syscall_resolve_name_arch(abi.scmp_arch, name.c_str());
  if (nr >= 0) return static_cast<uint32_t>(nr);
  if (nr != __NR_SCMP_ERROR) return std::nullopt;  // a pseudo-number: not a call of this ABI
  const NewerCall* call = newer_call(name);
  if (!call) return std::nullopt;
  if (abi.scmp_arch == SCMP_ARCH_X86) return call->i386 >= 0 ? std::optional<uint32_t>(call->i386) : std::nullopt;
  if (abi.x32_bit == Abi::kWithX32Bit) return call->x32 ? std::optional<uint32_t>(kX32Bit | call->x86_64) : std::nullopt;
  return call->x86_64 >= 0 ? std::optional<uint32_t>(call->x86_64) : std::nullopt;
}

// What the stub needs of one ABI: the newest call the table names (ENOSYS
// past it, as Docker's runtime does, so that libc falls back from calls
// newer than the profile) and the numbers of kNewerCalls it allows.
struct AbiLimits {
  Abi abi;
  uint32_t last = 0;
  std::vector<uint32_t> allowed_by_number;
};

AbiLimits limits_of(const Abi& abi, const std::vector<SeccompRule>& rules) {
  AbiLimits limits{abi, 0, {}};
  std::set<uint32_t> allowed;
  for (const SeccompRule& rule : rules) {
    std::optional<uint32_t> nr = call_number(abi, rule.name);
    if (!nr) continue;
    limits.last = std::max(limits.last, *nr);
    if (newer_call(rule.name)) allowed.insert(*nr);
  }
  limits.allowed_by_number.assign(allowed.begin(), allowed.end());
  return limits;
}

// The instructions put before libseccomp's program. For each ABI: a call
// numbered past its last gets ENOSYS, one of allowed_by_number is allowed,
// any other goes on to libseccomp's program. It reads only the architecture
// and the call number, so the kernel still caches its answers per call.
Result<std::vector<sock_filter>> enosys_stub(const std::vector<AbiLimits>& abis) {
  auto block_size = [](const AbiLimits& limits) {
    return 3 + (limits.abi.x32_bit == Abi::kAny ? 0 : 1) + limits.allowed_by_number.size() + 2;
  };
  size_t tail = 0;
  for (const AbiLimits& limits : abis) tail += block_size(limits);
  const size_t allow_at = tail + 1, enosys_at = tail + 2, program_at = tail + 3;
  std::vector<sock_filter> stub;
  bool too_far = false;
  auto to = [&](size_t target) {  // a conditional jump's offset from the next instruction
    size_t offset = target - (stub.size() + 1);
    too_far |= offset > 255;
    return static_cast<uint8_t>(offset);
  };
  for (const AbiLimits& limits : abis) {
    const size_t next = stub.size() + block_size(limits);
    stub.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
    stub.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, limits.abi.audit_arch, 0, to(next)));
    stub.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
    if (limits.abi.x32_bit == Abi::kWithoutX32Bit) stub.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kX32Bit, to(next), 0));
    if (limits.abi.x32_bit == Abi::kWithX32Bit) stub.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kX32Bit, 0, to(next)));
    for (uint32_t nr : limits.allowed_by_number) stub.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, to(allow_at), 0));
    stub.push_back(BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, limits.last, to(enosys_at), 0));
    stub.push_back(BPF_STMT(BPF_JMP | BPF_JA, static_cast<uint32_t>(program_at - (stub.size() + 1))));
  }
  stub.push_back(BPF_STMT(BPF_JMP | BPF_JA, static_cast<uint32_t>(program_at - (stub.size() + 1))));
  stub.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  stub.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  if (too_far || stub.size() != program_at) return Status(ErrorCode::internal, "seccomp filter: the ENOSYS stub does not fit BPF's jumps");
  return stub;
}

using Context = std::unique_ptr<void, decltype(&seccomp_release)>;

Status failed(int rc, const std::string& what) {
  return Status(ErrorCode::internal, "seccomp filter: " + what + ": " + std::strerror(-rc));
}

// The rules libseccomp can name, into ctx; the others are left to the stub,
// which allows them whatever the arguments, so a rule of theirs must be that.
Status add_rules(scmp_filter_ctx ctx, const std::vector<SeccompRule>& rules) {
  for (const SeccompRule& rule : rules) {
    int nr = seccomp_syscall_resolve_name(rule.name.c_str());
    if (nr == __NR_SCMP_ERROR) {
      if (!newer_call(rule.name)) continue;  // a call only other architectures have (Docker skips these too)
      if (rule.action == SCMP_ACT_ALLOW && rule.args.empty()) continue;  // the stub allows it
      return Status(ErrorCode::internal, "seccomp filter: " + rule.name + " has conditions libseccomp cannot express");
    }
    int rc = seccomp_rule_add_array(ctx, rule.action, nr, static_cast<unsigned>(rule.args.size()), rule.args.data());
    if (rc != 0) return failed(rc, "adding the rule for " + rule.name);
  }
  return Status::ok();
}

Result<std::vector<sock_filter>> export_program(scmp_filter_ctx ctx) {
  // libseccomp 2.5 writes the compiled program to a file descriptor.
  Fd memory(::memfd_create("gpubox-seccomp", MFD_CLOEXEC));
  if (!memory.valid()) return Status::from_errno(errno, "seccomp filter: memfd_create");
  if (int rc = seccomp_export_bpf(ctx, memory.get()); rc != 0) return failed(rc, "exporting the program");
  off_t bytes = ::lseek(memory.get(), 0, SEEK_END);
  if (bytes <= 0 || bytes % sizeof(sock_filter) != 0) {
    return Status(ErrorCode::internal, "seccomp filter: libseccomp exported " + std::to_string(bytes) + " bytes");
  }
  std::vector<sock_filter> instructions(static_cast<size_t>(bytes) / sizeof(sock_filter));
  if (::pread(memory.get(), instructions.data(), static_cast<size_t>(bytes), 0) != bytes) {
    return Status::from_errno(errno, "seccomp filter: reading the exported program");
  }
  return instructions;
}

}  // namespace

std::vector<std::string> seccomp_denied_calls(const SeccompSettings& settings) {
  std::vector<std::string> names;
  if (!settings.enabled) return names;
  std::vector<SeccompRule> rules = seccomp_profile_rules(settings.allow_namespaces);
  std::set<std::string> named;
  for (const SeccompRule& rule : rules) {
    if (rule.action == SCMP_ACT_ALLOW && rule.args.empty()) named.insert(rule.name);
  }
  const AbiLimits native = limits_of(kAbis[0], rules);
  for (uint32_t nr = 0; nr <= native.last; ++nr) {
    std::unique_ptr<char, decltype(&std::free)> name(seccomp_syscall_resolve_num_arch(kAbis[0].scmp_arch, static_cast<int>(nr)),
                                                    std::free);
    if (name && !named.count(name.get())) names.push_back(name.get());
  }
  std::set<std::string> conditional;
  for (const SeccompRule& rule : rules) {
    if (!named.count(rule.name) && rule.action == SCMP_ACT_ALLOW) conditional.insert(rule.name);
  }
  for (std::string& name : names) {
    if (conditional.count(name)) name += " (but with the arguments Docker's profile allows)";
    if (name == "clone3" && !settings.allow_namespaces) name += " (ENOSYS)";
  }
  names.push_back("every call numbered past " + std::to_string(native.last) + " (ENOSYS)");
  return names;
}

Result<SeccompProgram> build_seccomp_program(const SeccompSettings& settings) {
  // Docker's default action: EPERM for what no rule allows.
  Context ctx(seccomp_init(SCMP_ACT_ERRNO(EPERM)), seccomp_release);
  if (!ctx) return Status(ErrorCode::internal, "seccomp filter: libseccomp cannot start a filter");
  // A program of an architecture the filter does not know is refused everything.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM)); rc != 0) {
    return failed(rc, "setting the action for other architectures");
  }
  // A binary tree of syscall numbers, not a list: fewer instructions run per
  // call, and the kernel, which runs the filter for every syscall number when
  // it is attached, to cache the constant answers, attaches it faster.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc != 0) return failed(rc, "asking for a binary tree");
  for (const Abi& abi : kAbis) {
    int rc = seccomp_arch_add(ctx.get(), abi.scmp_arch);
    if (rc != 0 && rc != -EEXIST) return failed(rc, "adding an architecture");
  }
  std::vector<SeccompRule> rules = seccomp_profile_rules(settings.allow_namespaces);
  if (Status status = add_rules(ctx.get(), rules); !status) return status;
  auto program = export_program(ctx.get());
  if (!program) return program.status();

  std::vector<AbiLimits> limits;
  for (const Abi& abi : kAbis) limits.push_back(limits_of(abi, rules));
  auto stub = enosys_stub(limits);
  if (!stub) return stub.status();
  SeccompProgram result;
  result.instructions = std::move(*stub);
  result.instructions.insert(result.instructions.end(), program->begin(), program->end());
  if (result.instructions.size() > BPF_MAXINSNS) {
    return Status(ErrorCode::internal, "seccomp filter: " + std::to_string(result.instructions.size()) + " instructions, more than BPF allows");
  }
  return result;
}

namespace {
int load_filter(const sock_fprog* program) {
  // SPEC_ALLOW: no speculative-store-bypass mitigation forced on filtered
  // processes (Docker's choice too); kernels before 4.17 do not know the flag.
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, program) == 0) return 0;
  if (errno != EINVAL) return errno;
  return ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, program) == 0 ? 0 : errno;
}
}  // namespace

int install_seccomp_program(const sock_fprog* program) {
  int err = load_filter(program);
  if (err == EACCES) {  // neither CAP_SYS_ADMIN nor no_new_privs
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    err = load_filter(program);
  }
  return err;
}

}  // namespace gpubox
