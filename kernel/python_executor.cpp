// Over 600 lines: the supervised executor process and its channel (spawn, frames, interrupt, restart), whose request and interrupt paths share two locks; the Python side is the package kernel/executor/.
#include "kernel/python_executor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace gpubox::kernel {
namespace {

// SIGINT to the executor's main thread (its tid is its pid), where Python runs
// signal handlers. A process-wide SIGINT that another thread takes wakes no
// blocked read of the main thread, so its handler would run only once the next
// request arrived, and interrupt that request.
void interrupt_main_thread(pid_t pid) { ::syscall(SYS_tgkill, pid, pid, SIGINT); }

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Reads the executor's program (executor_program()) from fd 3 as the first
// frame and runs it; the source itself never appears in argv or on disk.
constexpr char kBootstrap[] =
    "import os,struct\n"
    "def _r(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(3,n-len(b))\n"
    "  if not c: os._exit(0)\n"
    "  b+=c\n"
    " return b\n"
    "_s=_r(struct.unpack('>I',_r(4))[0]).decode()\n"
    "exec(compile(_s,'<gpubox-executor>','exec'),{'__name__':'gpubox_executor'})\n";

constexpr size_t kStreamChunk = 1u << 20;  // the most output one stream message carries
// After this much output the agent hands freed buffers back to the system: the
// idle agent should not keep the high-water mark of a past burst resident.
constexpr size_t kTrimAfterBytes = 4u << 20;

class DirectLauncher : public ExecutorLauncher {
 public:
  Result<pid_t> spawn(const ExecutorProcessSpec& spec) override {
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t actions;
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, spec.stdout_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, spec.stderr_fd, 2);
    posix_spawn_file_actions_adddup2(&actions, spec.channel_fd, 3);
    std::vector<char*> argv, envp;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = -1;
    int err = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (err != 0) return Status::from_errno(err, "kernel: cannot start the Python executor '" + spec.argv[0] + "'");
    return pid;
  }
  int wait(pid_t pid) override {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }
};

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
    if (sig == SIGKILL) name += " (out of memory, or killed)";
    return "killed by " + name;
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

// The length of s without an incomplete UTF-8 sequence at its end.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

std::unique_ptr<ExecutorLauncher> make_direct_launcher() { return std::make_unique<DirectLauncher>(); }

std::string executor_program() {
  static const std::string program =
      embedded_package_program("gpubox_executor", "<gpubox-executor>", executor_package_sources());
  return program;
}

struct PythonExecutor::Process {
  pid_t pid = -1;
  Fd channel;
  Fd out;
  Fd err;
  FrameReader reader;
  std::string pending[2];  // undelivered stdout / stderr bytes (an incomplete UTF-8 tail)
  int out_fd(int i) const { return i == 0 ? out.get() : err.get(); }  // 0: stdout, 1: stderr
  bool ready = false;
  std::string startup_output;
};

PythonExecutor::PythonExecutor(ExecutorOptions options, std::unique_ptr<ExecutorLauncher> launcher)
    : options_(std::move(options)),
      launcher_(std::move(launcher)),
      process_fds_(::epoll_create1(EPOLL_CLOEXEC)),
      watch_set_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (watch_set_.valid() && wake_.valid()) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = wake_.get();
    ::epoll_ctl(watch_set_.get(), EPOLL_CTL_ADD, wake_.get(), &event);
  }
}

PythonExecutor::~PythonExecutor() {
  stop();
  watcher_stop_ = true;
  if (wake_.valid()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
  }
  if (watcher_.joinable()) watcher_.join();
}

void PythonExecutor::set_idle_sink(std::shared_ptr<ExecutorSink> sink) {
  MutexLock lock(mutex_);
  idle_sink_ = std::move(sink);
  if (idle_sink_ && !watcher_.joinable() && process_fds_.valid() && watch_set_.valid() && wake_.valid()) {
    watcher_ = std::thread([this] { watch_loop(); });
  }
  set_watching_locked(idle_sink_ != nullptr);  // without a sink nothing may be left unread in the watch set
}

void PythonExecutor::set_watching_locked(bool on) {
  if (on && (!process_ || !process_->ready || !idle_sink_ || !watcher_.joinable())) on = false;
  if (on == watching_) return;
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = process_fds_.get();
  ::epoll_ctl(watch_set_.get(), on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, process_fds_.get(), &event);
  watching_ = on;
}

// Waits for output while no request runs; a running request keeps mutex_ and
// has taken the process's fds out of the watch set, so this thread sleeps then.
void PythonExecutor::watch_loop() {
  while (!watcher_stop_) {
    epoll_event events[2];
    int n = ::epoll_wait(watch_set_.get(), events, 2, -1);
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "gpubox kernel: output watcher stopped: epoll_wait: %s\n", std::strerror(errno));
      return;
    }
    if (watcher_stop_) return;
    MutexLock lock(mutex_);
    if (watching_) pump_idle_locked();
  }
}

// Publishes what the executor wrote while no request ran: pipes first, then
// channel frames (display() from a thread), each after the output before it.
void PythonExecutor::pump_idle_locked() {
  if (!process_ || !idle_sink_) return;
  Process& p = *process_;
  ExecutorSink& sink = *idle_sink_;
  auto drain = [&]() REQUIRES(mutex_) {
    for (int i = 0; i < 2; ++i) {
      // At EOF (user code closed its fd) the pipe leaves the watch set: no busy loop on it.
      if (read_pipe_locked(p, i, &sink)) ::epoll_ctl(process_fds_.get(), EPOLL_CTL_DEL, p.out_fd(i), nullptr);
    }
  };
  drain();
  auto fill = p.reader.fill(p.channel.get());
  std::string payload;
  while (p.reader.next(payload)) {
    drain();
    json frame = json::parse(payload, nullptr, false);
    std::string why = "not JSON";
    if (frame.is_discarded() || !well_formed_frame(frame, &why)) {
      ::kill(p.pid, SIGKILL);  // the next request finds it dead, says why it died, and restarts it
      set_watching_locked(false);
      return;
    }
    std::string type = frame.value("type", "");
    if (type == "display" || type == "clear_output" || type == "comm") {  // e.g. a widget a thread updates
      sink.message(frame);
      if (frame.value("ack", true) && !write_frame(p.channel.get(), "{}")) break;
    } else if (type == "input_request") {
      json reply = {{"error", "input() is not available between cells (no request is running to answer it)"}};
      if (!write_frame(p.channel.get(), reply.dump())) break;
    }
    // Anything else belongs to no request: dropped.
  }
  if (fill != FrameReader::Fill::more || p.reader.oversized()) {
    // The channel closed (the executor died between requests) or broke: the
    // next request reaps and restarts it; until then there is nothing to watch.
    if (p.reader.oversized()) ::kill(p.pid, SIGKILL);
    drain();
    set_watching_locked(false);
  }
}

bool PythonExecutor::read_pipe_locked(Process& p, int i, ExecutorSink* sink) {
  static constexpr const char* kNames[2] = {"stdout", "stderr"};
  std::string& pending = p.pending[i];
  auto pass_on = [&](size_t cut) REQUIRES(mutex_) {
    if (cut == 0) return;
    std::string text = pending.substr(0, cut);
    pending.erase(0, cut);
    if (sink) {
      streamed_bytes_ += cut;
      sink->stream(kNames[i], std::move(text));
    } else if (p.startup_output.size() < 65536) {
      p.startup_output += text;
    }
  };
  // Only what the pipe holds now: a writer faster than the sink would otherwise
  // keep this loop going, and the channel (the cell's "started", its frames)
  // unread. At least one read: an empty pipe and EOF both hold 0 bytes.
  int queued = 0;
  if (::ioctl(p.out_fd(i), FIONREAD, &queued) != 0 || queued < 1) queued = 1;
  size_t left = static_cast<size_t>(queued);
  char buffer[65536];
  bool eof = false;
  while (left > 0) {
    ssize_t n = ::read(p.out_fd(i), buffer, std::min(sizeof buffer, left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof = n == 0;
      break;
    }
    pending.append(buffer, static_cast<size_t>(n));
    left -= std::min(left, static_cast<size_t>(n));
    if (pending.size() >= kStreamChunk) pass_on(complete_utf8_prefix(pending));
  }
  pass_on(eof ? pending.size() : complete_utf8_prefix(pending));  // at EOF the incomplete tail goes too
  return eof;
}

void PythonExecutor::trim_memory_locked() {
  if (streamed_bytes_ < kTrimAfterBytes) return;
  streamed_bytes_ = 0;
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

Status PythonExecutor::start() {
  MutexLock lock(mutex_);
  if (process_) return Status::ok();
  return spawn_locked();
}

Status PythonExecutor::spawn_locked() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return Status::from_errno(errno, "kernel: socketpair");
  Fd mine(sv[0]), theirs(sv[1]);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::from_errno(errno, "kernel: pipe");
  Fd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::from_errno(errno, "kernel: pipe");
  Fd err_r(err[0]), err_w(err[1]);
  // Bigger pipes: fewer wake-ups for bulk output (best effort).
  ::fcntl(out_r.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(err_r.get(), F_SETPIPE_SZ, 1 << 20);

  ExecutorProcessSpec spec;
  spec.argv = {options_.python, "-c", kBootstrap};
  spec.env = options_.env;
  if (!options_.mode.empty()) spec.env.push_back("GPUBOX_KERNEL_MODE=" + options_.mode);
  spec.channel_fd = theirs.get();
  spec.stdout_fd = out_w.get();
  spec.stderr_fd = err_w.get();
  auto pid = launcher_->spawn(spec);
  if (!pid) return pid.status();

  auto process = std::make_unique<Process>();
  process->pid = *pid;
  process->channel = std::move(mine);
  process->out = std::move(out_r);
  process->err = std::move(err_r);
  Status sent = write_frame(process->channel.get(), executor_program());
  set_nonblocking(process->channel.get());
  set_nonblocking(process->out.get());
  set_nonblocking(process->err.get());
  process_ = std::move(process);
  live_pid_ = process_->pid;
  if (process_fds_.valid()) {
    for (int fd : {process_->out.get(), process_->err.get(), process_->channel.get()}) {
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.fd = fd;
      ::epoll_ctl(process_fds_.get(), EPOLL_CTL_ADD, fd, &event);
    }
  }
  if (!sent) {
    kill_locked();
    return sent;
  }
  return Status::ok();
}

void PythonExecutor::kill_locked() {
  if (!process_) return;
  ::kill(process_->pid, SIGKILL);
  launcher_->wait(process_->pid);
  process_.reset();
  live_pid_ = 0;
  MutexLock lock(info_mutex_);
  info_ = json::object();
}

void PythonExecutor::stop() {
  shut_down_ = true;
  interrupt();
  // A running cell holds mutex_: end it by killing its process first.
  if (pid_t pid = live_pid_.load(); pid > 0) ::kill(pid, SIGKILL);
  MutexLock lock(mutex_);
  set_watching_locked(false);
  kill_locked();
}

void PythonExecutor::add_setup_code(std::string code) {
  MutexLock lock(mutex_);
  options_.setup_code.push_back(std::move(code));
}

json PythonExecutor::info() const {
  MutexLock lock(info_mutex_);
  return info_;
}

void PythonExecutor::interrupt() {
  // Under interrupt_mutex_: the SIGINT goes out before the running request can
  // end, never after, so it cannot reach a request that starts later.
  MutexLock lock(interrupt_mutex_);
  pid_t pid = running_pid_.load();
  if (pid > 0 && request_started_) {
    interrupt_requested_ = true;
    interrupt_main_thread(pid);
  } else if (pid > 0 || cell_expected_) {
    interrupt_next_ = true;  // the cell was sent but its code has not started: it gets the SIGINT when it does
  }
  // Otherwise between requests: dropped.
}

void PythonExecutor::expect_cell(bool expected) {
  MutexLock lock(interrupt_mutex_);
  cell_expected_ = expected;
  if (!expected) interrupt_next_ = false;
}

Status PythonExecutor::restart() {
  MutexLock lock(mutex_);
  set_watching_locked(false);
  Status restarted = restart_locked();
  set_watching_locked(true);
  return restarted;
}

void PythonExecutor::shut_down() {
  shut_down_ = true;
  interrupt();
}

Status PythonExecutor::restart_locked() {
  kill_locked();
  if (shut_down_) return Status(ErrorCode::unavailable, "kernel: the agent is shutting down");
  restarts_++;
  Status started = spawn_locked();
  if (!started) return started;
  return ensure_ready_locked();  // and replays the setup code
}

void PythonExecutor::replay_setup_locked() {
  for (const auto& code : options_.setup_code) {
    if (!process_ || !process_->ready) return;
    json req = {{"type", "execute"}, {"code", code}, {"silent", true}, {"store_history", false},
                {"allow_stdin", false}, {"execution_count", 0}};
    if (!write_frame(process_->channel.get(), req.dump())) return;
    NullSink null_sink;
    ExecutorSink& sink = options_.setup_sink ? *options_.setup_sink : null_sink;
    replaying_ = true;
    auto done = await_locked(sink, false, std::nullopt);
    replaying_ = false;
    if (done && done->value("status", "") != "ok") {
      std::fprintf(stderr, "gpubox kernel: setup code failed: %s: %s\n", done->value("ename", "").c_str(),
                   done->value("evalue", "").c_str());
    }
  }
}

Status PythonExecutor::ensure_ready_locked() {
  if (shut_down_) return Status(ErrorCode::unavailable, "kernel: the agent is shutting down; no code runs");
  if (process_ && process_->ready) return Status::ok();
  // Starting and setup: setting_up() says so until it ends, however it ends.
  struct SettingUp {
    std::atomic<bool>& flag;
    bool was = flag.exchange(true);
    ~SettingUp() { flag = was; }
  } setting_up{setting_up_};
  if (!process_) {
    Status started = spawn_locked();
    if (!started) return started;
  }
  NullSink sink;
  auto ready = await_locked(sink, true, Clock::now() + options_.startup_timeout);
  if (!ready) return ready.status();
  if (ready->value("died", false)) {
    return Status(ErrorCode::unavailable, "kernel: the Python executor did not start: " + ready->value("evalue", ""));
  }
  replay_setup_locked();
  if (!process_) return Status(ErrorCode::unavailable, "kernel: the Python executor died running its setup code");
  return Status::ok();
}

Result<json> PythonExecutor::request(const json& req, ExecutorSink& sink, std::optional<std::chrono::milliseconds> timeout) {
  MutexLock lock(mutex_);
  set_watching_locked(false);  // this thread reads the process's output until the request ends
  struct Rewatch {
    PythonExecutor& self;
    ~Rewatch() {
      self.set_watching_locked(true);
      self.trim_memory_locked();
    }
  } rewatch{*this};
  Status ready = ensure_ready_locked();
  if (!ready) {
    // One fresh try: a failed start leaves no process behind.
    kill_locked();
    return ready;
  }
  if (req.value("type", "") == "execute" && req.value("setup", false)) {
    options_.setup_code.push_back(req.value("code", ""));
  }
  pump_idle_locked();  // output from between requests is not this request's
  if (!process_) return Status(ErrorCode::internal, "kernel: lost the executor");
  // Only an execution produces output of its own: what a background thread writes
  // during a completion or an inspection goes where output between cells goes.
  const bool is_execute = req.value("type", "") == "execute";
  ExecutorSink& target = is_execute || !idle_sink_ ? sink : *idle_sink_;
  if (is_execute) sink.started();
  interrupt_requested_ = false;
  // A failed write means the executor is gone: await_locked reaps it, says why and restarts it.
  [[maybe_unused]] Status sent = write_frame(process_->channel.get(), req.dump(-1, ' ', false, json::error_handler_t::replace));
  std::optional<Clock::time_point> deadline;
  if (timeout) deadline = Clock::now() + *timeout;
  {
    MutexLock sending(interrupt_mutex_);
    running_pid_ = process_->pid;
    request_started_ = false;  // an execute's code starts with its "started" frame
  }
  auto result = await_locked(target, false, deadline);
  MutexLock ended(interrupt_mutex_);
  running_pid_ = 0;
  request_started_ = false;
  if (is_execute) interrupt_next_ = false;  // it was this cell's
  return result;
}

Result<json> PythonExecutor::await_locked(ExecutorSink& sink, bool startup, std::optional<Clock::time_point> deadline) {
  Process& p = *process_;
  bool pipe_open[2] = {true, true};
  auto pump = [&](int i) REQUIRES(mutex_) {
    if (pipe_open[i] && read_pipe_locked(p, i, startup ? nullptr : &sink)) pipe_open[i] = false;
  };
  auto drain = [&]() REQUIRES(mutex_) { pump(0), pump(1); };

  bool interrupted_for_timeout = false;
  Clock::time_point kill_at{};
  std::string death_reason;
  while (true) {
    int wait_ms = -1;
    if (deadline) {
      auto now = Clock::now();
      if (!interrupted_for_timeout && now >= *deadline) {
        interrupted_for_timeout = true;
        interrupt_main_thread(p.pid);
        kill_at = now + std::chrono::seconds(2);
      }
      if (interrupted_for_timeout && now >= kill_at) {
        ::kill(p.pid, SIGKILL);
        death_reason = "timed out (interrupted, then killed)";
        deadline.reset();
      }
      if (deadline) {
        auto until = interrupted_for_timeout ? kill_at : *deadline;
        wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
      }
    }
    pollfd pfds[3] = {{p.channel.get(), POLLIN, 0}, {pipe_open[0] ? p.out_fd(0) : -1, POLLIN, 0},
                      {pipe_open[1] ? p.out_fd(1) : -1, POLLIN, 0}};
    int n = ::poll(pfds, 3, wait_ms);
    if (n < 0 && errno != EINTR) return Status::from_errno(errno, "kernel: poll");
    if (n <= 0) continue;
    if (pfds[1].revents) pump(0);
    if (pfds[2].revents) pump(1);
    if (!pfds[0].revents) continue;
    auto fill = p.reader.fill(p.channel.get());
    std::string payload;
    while (death_reason.empty() && p.reader.next(payload)) {
      drain();  // output written before this frame goes out first
      json frame = json::parse(payload, nullptr, false);
      std::string why = "not JSON";
      if (frame.is_discarded() || !well_formed_frame(frame, &why)) {
        // User code wrote to the channel (it shares the executor's process):
        // nothing more from it can be trusted, so the executor is restarted.
        ::kill(p.pid, SIGKILL);
        death_reason = "broke its channel protocol (" + why + "), as user code writing to fd 3 would";
        break;
      }
      std::string type = frame.value("type", "");
      if (type == "ready") {
        p.ready = true;
        {
          MutexLock lock(info_mutex_);
          info_ = frame;
        }
        if (startup) return frame;
      } else if (type == "input_request") {
        std::optional<std::string> value;
        if (!interrupt_requested_) value = sink.input(frame.value("prompt", ""), frame.value("password", false));
        json reply = value ? json{{"value", *value}} : json{{"interrupted", true}};
        if (!write_frame(p.channel.get(), reply.dump(-1, ' ', false, json::error_handler_t::replace))) break;
      } else if (type == "started") {
        // The cell's code begins: an interrupt that came since it was sent lands now.
        MutexLock lock(interrupt_mutex_);
        if (running_pid_ == p.pid) {  // a request's, not setup code replayed
          request_started_ = true;
          if (interrupt_next_) {
            interrupt_next_ = false;
            interrupt_requested_ = true;
            interrupt_main_thread(p.pid);
          }
        }
      } else if (type == "done" || type == "reply") {
        if (interrupted_for_timeout) {
          frame["timed_out"] = true;
        }
        return frame;
      } else {
        sink.message(frame);
        // The executor waits for this before it writes more output (ordering);
        // its cell's last frame, after which no user code writes, asks for none.
        if (frame.value("ack", true) && !write_frame(p.channel.get(), "{}")) break;
      }
    }
    if (p.reader.oversized()) {
      ::kill(p.pid, SIGKILL);
      death_reason = "sent a frame over the size limit";
    }
    if (fill == FrameReader::Fill::more) continue;
    // The channel closed: the executor is gone (crash, os._exit, OOM kill, or our kill).
    drain();
    drain();  // now at EOF, unless a child of it holds the pipe: an incomplete last character goes too
    int status = launcher_->wait(p.pid);
    live_pid_ = 0;
    if (death_reason.empty()) death_reason = describe_exit(status);
    std::string output = p.startup_output;
    bool was_startup = startup;
    process_.reset();
    {
      MutexLock lock(info_mutex_);
      info_ = json::object();
    }
    std::string message = "the Python executor " + death_reason;
    if (was_startup) {
      if (!output.empty()) message += ": " + output.substr(output.size() > 2000 ? output.size() - 2000 : 0);
      return json{{"type", "done"}, {"status", "error"}, {"died", true}, {"ename", "KernelDied"}, {"evalue", message}};
    }
    if (replaying_) {  // setup code that kills the executor would kill every restart too
      return json{{"type", "done"}, {"status", "error"}, {"died", true}, {"ename", "KernelDied"}, {"evalue", message}};
    }
    Status restarted = restart_locked();
    message += restarted ? "; the kernel was restarted and its setup code replayed"
                         : "; restarting it failed: " + restarted.message();
    json done = {{"type", "done"}, {"status", "error"}, {"died", true}, {"ename", "KernelRestarted"},
                 {"evalue", message}, {"traceback", json::array({"KernelRestarted: " + message})}};
    if (interrupted_for_timeout) done["timed_out"] = true;
    return done;
  }
  return Status(ErrorCode::internal, "kernel: lost the executor channel");
}

}  // namespace gpubox::kernel
