#include "agent/seccomp_filter.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "base/fd.h"

namespace gpubox {
namespace {

// Denied to every process the agent starts: what Docker's default profile
// leaves out for a container without added capabilities (its "significant
// syscalls blocked" list), less ptrace (Docker allows it on kernels from 4.8)
// and the NUMA memory-policy calls (libnuma and CUDA use them; they move no
// privilege). Names unknown to an architecture are skipped there.
constexpr const char* kDenied[] = {
    // kernel modules and kexec
    "init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms", "query_module",
    "kexec_load", "kexec_file_load",
    // the kernel's keyring, BPF, perf, userfaultfd
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd",
    // mounts, old and new API, and file handles
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "open_by_handle_at", "name_to_handle_at",
    // other processes' memory and descriptors
    "process_vm_readv", "process_vm_writev", "kcmp",
    // the machine: clocks, swap, accounting, reboot, quotas, the kernel log, I/O ports
    "clock_settime", "clock_adjtime", "settimeofday", "stime", "swapon", "swapoff", "acct", "reboot", "quotactl",
    "quotactl_fd", "syslog", "ioperm", "iopl",
    // obsolete calls with a history of holes
    "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl", "lookup_dcookie", "vm86", "vm86old"};

// Namespace calls, denied unless the sandbox has its own user namespace.
constexpr const char* kNamespaceCalls[] = {"unshare", "setns"};
constexpr unsigned long kNamespaceFlags =
    CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;

// personality(2): Docker's profile allows exactly 0 (PER_LINUX), 8
// (PER_LINUX32), 0x20000 (UNAME26), 0x20008 and 0xffffffff (the query).
// The bits that may be set are those two; every rule below needs one other
// bit set, so the five values pass. A rule "bit b set and bit next(b) clear",
// for each other bit b (next: the following such bit, cyclically), catches
// any value with such a bit set unless all 30 are set; then bit 3 or bit 17
// clear (anything but the query) is caught by the last two rules.
constexpr unsigned kPer32 = PER_LINUX32, kUname26 = UNAME26;
constexpr unsigned kPersonalityAllowedBits = kPer32 | kUname26;

using Context = std::unique_ptr<void, decltype(&seccomp_release)>;

Status failed(int rc, const std::string& what) {
  return Status(ErrorCode::internal, "seccomp filter: " + what + ": " + std::strerror(-rc));
}

Status deny(scmp_filter_ctx ctx, const char* name, uint32_t action) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return Status::ok();  // not a call this architecture has
  int rc = seccomp_rule_add(ctx, action, nr, 0);
  return rc == 0 ? Status::ok() : failed(rc, std::string("denying ") + name);
}

Status deny_personalities(scmp_filter_ctx ctx) {
  std::vector<unsigned> denied_bits;
  for (unsigned bit = 0; bit < 32; ++bit) {
    if (!(kPersonalityAllowedBits & (1u << bit))) denied_bits.push_back(bit);
  }
  auto rule = [&](uint64_t set, uint64_t clear) {
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                            SCMP_A0_64(SCMP_CMP_MASKED_EQ, set | clear, set));
  };
  for (size_t i = 0; i < denied_bits.size(); ++i) {
    unsigned next = denied_bits[(i + 1) % denied_bits.size()];
    if (int rc = rule(1ull << denied_bits[i], 1ull << next); rc != 0) return failed(rc, "denying personalities");
  }
  for (unsigned allowed : {kPer32, kUname26}) {
    if (int rc = rule(1ull << 31, allowed); rc != 0) return failed(rc, "denying personalities");
  }
  return Status::ok();
}

Status deny_namespaces(scmp_filter_ctx ctx) {
  for (const char* name : kNamespaceCalls) {
    if (Status status = deny(ctx, name, SCMP_ACT_ERRNO(EPERM)); !status) return status;
  }
  // clone3 passes its flags in memory, out of the filter's sight: ENOSYS
  // sends libc back to clone, whose flags it sees.
  if (Status status = deny(ctx, "clone3", SCMP_ACT_ERRNO(ENOSYS)); !status) return status;
  for (unsigned long flag = 1; flag != 0; flag <<= 1) {
    if (!(kNamespaceFlags & flag)) continue;
    // x86-64 and arm64 both take clone's flags first.
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0_64(SCMP_CMP_MASKED_EQ, flag, flag));
    if (rc != 0) return failed(rc, "denying clone of namespaces");
  }
  return Status::ok();
}

// The other ABIs the native one can run (32-bit x86 and x32 programs on x86-64).
Status add_secondary_architectures(scmp_filter_ctx ctx) {
#if defined(__x86_64__)
  for (uint32_t arch : {SCMP_ARCH_X86, SCMP_ARCH_X32}) {
#elif defined(__aarch64__)
  for (uint32_t arch : {SCMP_ARCH_ARM}) {
#else
  for (uint32_t arch : std::initializer_list<uint32_t>{}) {
#endif
    int rc = seccomp_arch_add(ctx, arch);
    if (rc != 0 && rc != -EEXIST) return failed(rc, "adding an architecture");
  }
  return Status::ok();
}

}  // namespace

std::vector<std::string> seccomp_denied_calls(const SeccompSettings& settings) {
  std::vector<std::string> names;
  if (!settings.enabled) return names;
  names.assign(std::begin(kDenied), std::end(kDenied));
  names.push_back("personality (but 0, 8, 0x20000, 0x20008, 0xffffffff)");
  if (!settings.allow_namespaces) {
    names.insert(names.end(), std::begin(kNamespaceCalls), std::end(kNamespaceCalls));
    names.push_back("clone (of new namespaces)");
    names.push_back("clone3 (ENOSYS)");
  }
  return names;
}

Result<SeccompProgram> build_seccomp_program(const SeccompSettings& settings) {
  Context ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  if (!ctx) return Status(ErrorCode::internal, "seccomp filter: libseccomp cannot start a filter");
  // A program of an architecture the filter does not know is refused everything.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM)); rc != 0) {
    return failed(rc, "setting the action for other architectures");
  }
  // A binary tree of syscall numbers, not a list: fewer instructions run per
  // call, and the kernel, which runs the filter for every syscall number when
  // it is attached, to cache the constant answers, attaches it faster.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc != 0) return failed(rc, "asking for a binary tree");
  if (Status status = add_secondary_architectures(ctx.get()); !status) return status;
  for (const char* name : kDenied) {
    if (Status status = deny(ctx.get(), name, SCMP_ACT_ERRNO(EPERM)); !status) return status;
  }
  if (Status status = deny_personalities(ctx.get()); !status) return status;
  if (!settings.allow_namespaces) {
    if (Status status = deny_namespaces(ctx.get()); !status) return status;
  }

  // libseccomp 2.5 writes the compiled program to a file descriptor.
  Fd memory(::memfd_create("gpubox-seccomp", MFD_CLOEXEC));
  if (!memory.valid()) return Status::from_errno(errno, "seccomp filter: memfd_create");
  if (int rc = seccomp_export_bpf(ctx.get(), memory.get()); rc != 0) return failed(rc, "exporting the program");
  off_t bytes = ::lseek(memory.get(), 0, SEEK_END);
  if (bytes <= 0 || bytes % sizeof(sock_filter) != 0 || bytes / sizeof(sock_filter) > BPF_MAXINSNS) {
    return Status(ErrorCode::internal, "seccomp filter: libseccomp exported " + std::to_string(bytes) + " bytes");
  }
  SeccompProgram program;
  program.instructions.resize(static_cast<size_t>(bytes) / sizeof(sock_filter));
  if (::pread(memory.get(), program.instructions.data(), static_cast<size_t>(bytes), 0) != bytes) {
    return Status::from_errno(errno, "seccomp filter: reading the exported program");
  }
  return program;
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
