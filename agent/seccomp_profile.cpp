#include "agent/seccomp_profile.h"

#include <sched.h>

#include <algorithm>
#include <iterator>

namespace gpubox {
namespace {

// Allowed whatever the arguments: default.json's first rule, in its order.
constexpr const char* kAllowed[] = {
    "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "cachestat", "capget", "capset", "chdir",
    "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64", "clock_getres", "clock_getres_time64",
    "clock_gettime", "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64", "close", "close_range",
    "connect", "copy_file_range", "creat", "dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_ctl_old", "epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2",
    "execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
    "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
    "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr",
    "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64", "futex",
    "futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "futimesat", "getcpu", "getcwd",
    "getdents", "getdents64", "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups",
    "getgroups32", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority",
    "getrandom", "getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list",
    "getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday", "getuid",
    "getuid32", "getxattr", "getxattrat", "inotify_add_watch", "inotify_init", "inotify_init1",
    "inotify_rm_watch", "io_cancel", "ioctl", "io_destroy", "io_getevents", "io_pgetevents",
    "io_pgetevents_time64", "ioprio_get", "ioprio_set", "io_setup", "io_submit", "ipc", "kill",
    "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32", "lgetxattr",
    "link", "linkat", "listen", "listmount", "listxattr", "listxattrat", "llistxattr", "_llseek", "lremovexattr",
    "lseek", "lsetxattr", "lstat", "lstat64", "madvise", "map_shadow_stack", "membarrier", "memfd_create",
    "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap",
    "mmap2", "mprotect", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
    "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "mremap", "mseal", "msgctl", "msgget", "msgrcv", "msgsnd",
    "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat", "_newselect",
    "open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc",
    "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl", "pread64", "preadv", "preadv2",
    "prlimit64", "process_mrelease", "pselect6", "pselect6_time64", "pwrite64", "pwritev", "pwritev2", "read",
    "readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg",
    "remap_file_pages", "removexattr", "removexattrat", "rename", "renameat", "renameat2", "restart_syscall",
    "riscv_hwprobe", "rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
    "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_get_priority_max", "sched_get_priority_min",
    "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity",
    "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl",
    "semget", "semop", "semtimedop", "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg",
    "sendto", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
    "setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32", "setresgid", "setresgid32",
    "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit", "set_robust_list", "setsid", "setsockopt",
    "set_thread_area", "set_tid_address", "setuid", "setuid32", "setxattr", "setxattrat", "shmat", "shmctl",
    "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn",
    "socketcall", "socketpair", "splice", "stat", "stat64", "statfs", "statfs64", "statmount", "statx", "symlink",
    "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create",
    "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64",
    "timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
    "tkill", "truncate", "truncate64", "ugetrlimit", "umask", "uname", "unlink", "unlinkat", "uretprobe", "utime",
    "utimensat", "utimensat_time64", "utimes", "vfork", "vmsplice", "wait4", "waitid", "waitpid", "write",
    "writev"};

// default.json's rules with conditions that hold for a local sandbox here:
// kernel 4.8 or later (the local backend needs 5.12, for mount_setattr),
// the capability CAP_SYS_CHROOT,
// and the x86-64 ones (the table is built for one architecture).
constexpr const char* kAllowedConditionally[] = {
    "process_vm_readv", "process_vm_writev", "ptrace",  // minKernel 4.8
    "chroot",                                           // caps CAP_SYS_CHROOT
#if defined(__x86_64__)
    "arch_prctl", "modify_ldt",  // arches amd64, x32 (and x86 for modify_ldt)
#elif defined(__aarch64__)
    "arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls",  // arm, arm64
#endif
};

// socket(2): the address families Docker's profile allows besides those
// below 3 (AF_UNSPEC, AF_UNIX, AF_INET), one rule "a0 == family" each. Left
// out: 3-6, 11, 12, 19, 20, 23, 25, 34, 37, AF_ALG (38), AF_VSOCK (40), 46 on.
constexpr uint64_t kSocketFamilies[] = {7,  8,  9,  10, 13, 14, 15, 16, 17, 18, 21, 22, 24, 26, 27,
                                        28, 29, 30, 31, 32, 33, 35, 36, 39, 41, 42, 43, 44, 45};

// personality(2): PER_LINUX, PER_LINUX32, UNAME26, both, and the query.
constexpr uint64_t kPersonalities[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

// clone(2) without any CLONE_NEW* flag (Docker's mask 0x7e020000):
// CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
// CLONE_NEWPID, CLONE_NEWNET.
constexpr uint64_t kNamespaceFlags =
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
static_assert(kNamespaceFlags == 0x7e020000);

constexpr const char* kNamespaceCalls[] = {"clone", "clone3", "setns", "unshare"};

SeccompRule allow(std::string name, std::vector<scmp_arg_cmp> args = {}) {
  return {std::move(name), SCMP_ACT_ALLOW, std::move(args)};
}

}  // namespace

bool is_namespace_call(const std::string& name) {
  return std::find(std::begin(kNamespaceCalls), std::end(kNamespaceCalls), name) != std::end(kNamespaceCalls);
}

std::vector<SeccompRule> seccomp_profile_rules(bool allow_namespaces) {
  std::vector<SeccompRule> rules;
  for (const char* name : kAllowed) rules.push_back(allow(name));
  for (const char* name : kAllowedConditionally) rules.push_back(allow(name));
  rules.push_back(allow("socket", {SCMP_A0_64(SCMP_CMP_LT, 3)}));
  for (uint64_t family : kSocketFamilies) rules.push_back(allow("socket", {SCMP_A0_64(SCMP_CMP_EQ, family)}));
  for (uint64_t persona : kPersonalities) rules.push_back(allow("personality", {SCMP_A0_64(SCMP_CMP_EQ, persona)}));
  if (allow_namespaces) {
    // Docker's rule for CAP_SYS_ADMIN, its namespace calls only.
    for (const char* name : kNamespaceCalls) rules.push_back(allow(name));
  } else {
    // Docker's rules for a container without CAP_SYS_ADMIN. clone3 passes
    // its flags in memory, out of a filter's sight: ENOSYS sends libc back
    // to clone, whose flags the filter sees.
    rules.push_back(allow("clone", {SCMP_A0_64(SCMP_CMP_MASKED_EQ, kNamespaceFlags, 0)}));
    rules.push_back({"clone3", SCMP_ACT_ERRNO(ENOSYS), {}});
  }
  return rules;
}

}  // namespace gpubox
