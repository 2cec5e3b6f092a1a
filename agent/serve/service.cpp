#include "agent/serve/service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <optional>

#include "agent/log.h"
#include "agent/serve/memfd_pool.h"
#include "agent/serve/worker_process.h"
#include "agent/serve/worker_program.h"
#include "agent/serve/worker_wire.h"
#include "base/fd.h"

namespace gpubox::serve {

using nlohmann::json;

namespace {

// Reads the worker's source from fd 3 (a 4-byte big-endian length, then the
// text) and runs it: the source never appears in argv or on disk.
constexpr char kBootstrap[] =
    "import os\n"
    "def _take(n):\n"
    " got=bytearray()\n"
    " while len(got)<n:\n"
    "  part=os.read(3,n-len(got))\n"
    "  if not part: os._exit(0)\n"
    "  got+=part\n"
    " return bytes(got)\n"
    "_text=_take(int.from_bytes(_take(4),'big')).decode()\n"
    "exec(compile(_text,'<gpubox-serve-worker>','exec'),{'__name__':'gpubox_serve_worker'})\n";

// DATA a generator may send ahead of what the caller has taken.
constexpr int kItemWindow = 4;
// A call whose arguments take more than this goes through a handler thread:
// the RPC I/O thread writes only small messages to a worker.
constexpr std::size_t kFastCallBytes = 64 << 10;
// What the RPC I/O thread looks at on a worker's channel at once: a larger
// message is read by the worker's reader thread.
constexpr std::size_t kPeekBytes = 64 << 10;
constexpr std::chrono::milliseconds kExitWait{5000};

// The worker's "call" message for serve.call's params.
json call_request(std::uint64_t id, const json& params) {
  return {{"op", "call"}, {"id", id}, {"function", params["function"]},
          {"args", params.contains("args") ? params["args"] : json::array()},
          {"kwargs", params.contains("kwargs") ? params["kwargs"] : json::object()},
          {"window", kItemWindow}};
}

}  // namespace

Service::Service(ServiceOptions options, ProcessLauncher& launcher)
    : options_(std::move(options)), launcher_(launcher), stdout_(options_.log_bytes), stderr_(options_.log_bytes) {}

Service::~Service() { stop(); }

// What the service's WorkerRestarts starts and signals: a worker, started
// with the service's own spawn options (the Supervisor's are not used), whose
// end is reported once its reader thread is done with it. Supervision thread.
class Service::WorkerLauncher final : public ProcessLauncher {
 public:
  explicit WorkerLauncher(Service& service) : service_(service) {}
  Result<pid_t> spawn(const SpawnOptions&, ExitCallback on_exit) override { return service_.launch_worker(std::move(on_exit)); }
  bool signal_group(pid_t pgid, int sig) override { return service_.signal_worker(pgid, sig); }

 private:
  Service& service_;
};

void Service::start() {
  auto loop = EventLoop::create();
  if (!loop) {
    MutexLock lock(mutex_);
    error_ = "serve: cannot start the service's event loop: " + loop.status().message();
    first_load_done_ = true;
    first_load_ = Status(loop.status().code(), error_);
    state_ = "failed";
    changed_.notify_all();
    return;
  }
  loop_ = std::move(*loop);
  worker_launcher_ = std::make_unique<WorkerLauncher>(*this);
  restarts_policy_ = std::make_unique<WorkerRestarts>("serve:" + options_.name, *worker_launcher_, *loop_,
                                                     options_.restart_limit, options_.stop_grace);
  restarts_policy_->on_change([this](const WorkerRestarts::View& view) { on_supervision(view); });
  loop_->post([this] { restarts_policy_->start(); });
  supervisor_ = std::thread([this] { loop_->run(); });
}

Status Service::wait_first_load(const rpc::CallContext& call) {
  MutexLock lock(mutex_);
  while (!first_load_done_) {
    if (call.stopped()) return call.stop_reason();
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return first_load_;
}

Result<std::shared_ptr<WorkerProcess>> Service::spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return Status::from_errno(errno, "serve: socketpair");
  Fd mine(sv[0]), theirs(sv[1]);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::from_errno(errno, "serve: pipe");
  Fd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::from_errno(errno, "serve: pipe");
  Fd err_r(err[0]), err_w(err[1]);
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // Bigger socket buffers: fewer wake-ups per tensor (best effort; capped by the system).
  int size = 4 << 20;
  for (int fd : {mine.get(), theirs.get()}) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }

  auto process = std::make_shared<WorkerProcess>();
  process->exited = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  process->turn = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  SpawnOptions spawn;
  spawn.argv = {options_.python, "-c", kBootstrap};
  spawn.env = options_.env;
  spawn.cwd = options_.cwd;
  spawn.stdin_fd = devnull.get();
  spawn.stdout_fd = out_w.get();
  spawn.stderr_fd = err_w.get();
  spawn.extra_fds = {{theirs.get(), 3}};
  auto pid = launcher_.spawn(spawn, [process](pid_t, ExitStatus status) {
    {
      MutexLock lock(process->mutex);
      process->exit = status;
      process->changed.notify_all();
    }
    signal_event(process->exited.get());
  });
  if (!pid) return Status(pid.status().code(), "cannot start the serve worker with kernel.python '" + options_.python +
                                                   "': " + pid.status().message());
  process->pid = *pid;
  process->channel = std::move(mine);
  process->out = std::move(out_r);
  process->err = std::move(err_r);
  ::fcntl(process->out.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(process->err.get(), F_SETFL, O_NONBLOCK);
  process->log_thread = std::thread([this, process] { read_logs(process); });
  return process;
}

void Service::read_logs(std::shared_ptr<WorkerProcess> process) {
  bool open[2] = {true, true};
  LogRing* rings[2] = {&stdout_, &stderr_};
  int fds[2] = {process->out.get(), process->err.get()};
  char buffer[65536];
  bool exited = false;
  while (open[0] || open[1]) {
    pollfd watch[3] = {{open[0] ? fds[0] : -1, POLLIN, 0}, {open[1] ? fds[1] : -1, POLLIN, 0},
                       {process->exited.get(), POLLIN, 0}};
    if (::poll(watch, exited ? 2 : 3, exited ? 0 : -1) < 0 && errno != EINTR) return;
    if (watch[2].revents & POLLIN) exited = true;
    bool any = false;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || !(watch[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i], buffer, sizeof buffer);
      if (n > 0) {
        rings[i]->append(std::string_view(buffer, static_cast<std::size_t>(n)));
        any = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        open[i] = false;
      }
    }
    // Once the process is gone, what is left in the pipes is read; a
    // grandchild that keeps them open does not keep this thread.
    if (exited && !any) return;
  }
}

Result<pid_t> Service::launch_worker(ProcessLauncher::ExitCallback on_exit) {
  bool first = !launched_any_;
  launched_any_ = true;
  auto spawned = spawn();
  if (!spawned) {
    MutexLock lock(mutex_);
    error_ = spawned.status().message();
    if (first) {
      first_load_done_ = true;
      first_load_ = Status(ErrorCode::invalid_request, error_);
      state_ = "failed";
    }
    changed_.notify_all();
    return spawned.status();
  }
  std::shared_ptr<WorkerProcess> process = *spawned;
  launched_ = process;
  // The reader's report runs on this thread, after this function: reader is set by then.
  process->reader = std::thread([this, process, first, on_exit = std::move(on_exit)] {
    run_worker(process, first);
    loop_->post([this, process, on_exit] {
      process->reader.join();
      if (launched_ == process) launched_.reset();
      ExitStatus status;
      status.signal = SIGKILL;  // when the reaper never told (run_worker waited kExitWait)
      {
        MutexLock lock(process->mutex);
        if (process->exit) status = *process->exit;
      }
      bool restart = true;
      {
        MutexLock lock(mutex_);
        restart = !no_restart_;
      }
      if (!restart) restarts_policy_->hold();  // begin_stop() or stop() came first; their own task may come later
      on_exit(process->pid, status);
      end_loop_if_done();
    });
  });
  return process->pid;
}

bool Service::signal_worker(pid_t pgid, int sig) {
  std::shared_ptr<WorkerProcess> process = launched_;
  if (!process || process->pid != pgid) return false;
  {
    MutexLock lock(process->mutex);
    if (process->exit) return false;  // reaped: the group may be someone else's now
  }
  return ::kill(-pgid, sig) == 0;
}

void Service::on_supervision(const WorkerRestarts::View& view) {
  MutexLock lock(mutex_);
  switch (view.state) {
    case ChildState::backoff:
      restarts_ = view.restarts;
      state_ = "restarting";
      break;
    case ChildState::failed:
      restarts_ = view.restarts;
      state_ = "failed";
      error_ = "the worker ended " + std::to_string(restarts_) + " times (restart_limit " +
               std::to_string(options_.restart_limit) + "); last: " + error_;
      log::error("serve worker failed", {{"service", options_.name}, {"error", error_}});
      break;
    case ChildState::stopped:
    case ChildState::exited:
      if (state_ != "failed") state_ = "stopped";
      break;
    case ChildState::running:
    case ChildState::stopping:
      return;  // the worker's own messages say more (ready, or why it ended)
  }
  changed_.notify_all();
}

void Service::end_loop_if_done() {
  if (stop_requested_ && restarts_policy_->idle()) loop_->stop();
}

void Service::run_worker(std::shared_ptr<WorkerProcess> process, bool first) {
  const std::string source = worker_program();
  std::string frame;
  for (int shift = 24; shift >= 0; shift -= 8) frame.push_back(static_cast<char>((source.size() >> shift) & 0xff));
  frame += source;
  int failed = write_fully(process->channel.get(), frame.data(), frame.size());
  json load = {{"op", "load"}, {"name", options_.name}, {"path", options_.path},
               {"sys_path", options_.sys_path}, {"models", options_.models}};
  Status sent = failed ? Status::from_errno(failed, "serve: cannot send the worker its source") : process->send(load);
  if (!sent) log::warn("serve worker did not take its source", {{"service", options_.name}, {"error", sent.message()}});
  {
    MutexLock lock(mutex_);
    process_ = process;
    if (no_restart_) ::kill(-process->pid, SIGKILL);
  }

  bool again = true;  // false: the first worker did not load, and WorkerRestarts does not restart it
  auto head = read_message(process->channel.get(), process->exited.get());
  std::string op = head && *head ? body_string((*head)->body, "op") : "";
  if (op == "ready") {
    {
      MutexLock lock(mutex_);
      functions_ = (*head)->body.value("functions", json::array());
      state_ = "ready";
      if (first) {
        first_load_done_ = true;
        first_load_ = Status::ok();
      }
      changed_.notify_all();
    }
    loop_->post([this] { restarts_policy_->loaded(); });
    log::info("serve worker ready", {{"service", options_.name}, {"pid", static_cast<long long>(process->pid)}});
    if (!options_.fd_watch || read_with_fd_watch(process)) {
      while (handle_read(*process, read_message(process->channel.get(), process->exited.get(), process->unmapped))) {
      }
    }
  } else {
    std::string why;
    if (op == "load_failed") {
      const json& body = (*head)->body;
      why = options_.path + " failed to import: " + body_string(body, "type") + ": " + body_string(body, "message") +
            "\n" + body_string(body, "traceback");
    } else {
      why = "the serve worker ended before it imported " + options_.path +
            (head ? std::string() : " (" + head.status().message() + ")");
    }
    MutexLock lock(mutex_);
    error_ = why;
    if (first) {
      first_load_done_ = true;
      first_load_ = Status(ErrorCode::invalid_request, why);
      state_ = "failed";
      again = false;
    }
    changed_.notify_all();
  }

  // The worker is done (or must be): end its whole group, then name how it ended.
  ::kill(-process->pid, SIGKILL);
  std::string ended;
  {
    MutexLock lock(process->mutex);
    process->changed.wait_for(lock, kExitWait, [&]() REQUIRES(process->mutex) { return process->exit.has_value(); });
    ended = process->exit ? process->exit->describe() : "ended";
    process->ended = true;
  }
  bool restarting;
  bool no_restart;
  {
    MutexLock lock(mutex_);
    no_restart = no_restart_;
    restarting = again && !no_restart_;
    process_.reset();
    if (restarting) state_ = "restarting";  // calls now wait for the next worker
    if (op == "ready") error_ = "the worker ended: " + ended;
    changed_.notify_all();
  }
  std::string reason = "the serve worker of '" + options_.name + "' " + ended + " during the call; " +
                       (restarting ? "it is restarting (serve.list shows when it is ready)" : "it is not restarted");
  std::map<std::uint64_t, std::shared_ptr<PendingCall>> pending;
  {
    MutexLock lock(process->mutex);
    pending.swap(process->pending);
  }
  for (auto& [id, call] : pending) call->fail(Status(ErrorCode::unavailable, reason));
  if (process->log_thread.joinable()) process->log_thread.join();
  if (op == "ready" && !no_restart) {
    log::warn("serve worker ended", {{"service", options_.name}, {"how", ended}, {"calls_failed", static_cast<long long>(pending.size())}});
  }
}

bool Service::read_with_fd_watch(const std::shared_ptr<WorkerProcess>& process) {
  int channel = process->channel.get();
  while (true) {
    if (!options_.fd_watch->watch(channel, [this, process] { return read_on_io_thread(*process); })) return true;
    pollfd fds[2] = {{process->turn.get(), POLLIN, 0}, {process->exited.get(), POLLIN, 0}};
    while (::poll(fds, 2, -1) < 0) {
      if (errno != EINTR) break;
    }
    if (!(fds[0].revents & POLLIN)) {
      options_.fd_watch->unwatch(channel);
      return true;
    }
    drain_event(process->turn.get());
    if (!handle_read(*process, read_message(channel, process->exited.get(), process->unmapped))) return false;
  }
}

// On the RPC I/O thread, whenever the worker's channel is readable: handles
// each whole message without a memfd waiting there, and hands the channel
// to the worker's reader thread (no longer watched: false) at anything else —
// a memfd, a message not whole yet, a malformed one, the channel's end.
bool Service::read_on_io_thread(WorkerProcess& process) {
  thread_local std::string bytes(kPeekBytes, '\0');
  int channel = process.channel.get();
  while (true) {
    ssize_t n = ::recv(channel, bytes.data(), bytes.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    auto whole = n > 0 ? parse_whole_message(std::string_view(bytes.data(), static_cast<std::size_t>(n))) : std::nullopt;
    if (!whole) {
      signal_event(process.turn.get());
      return false;
    }
    // The same bytes, taken off the channel (they are all there: nobody else reads it now).
    for (std::size_t taken = 0; taken < whole->second;) {
      ssize_t got = ::recv(channel, bytes.data(), whole->second - taken, MSG_DONTWAIT);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        signal_event(process.turn.get());
        return false;
      }
      taken += static_cast<std::size_t>(got);
    }
    try {
      handle(process, std::move(whole->first));
    } catch (const std::exception& e) {  // one message lost, never the channel or the I/O thread
      log::error("serve: a worker's message could not be handled", {{"service", options_.name}, {"error", e.what()}});
    }
  }
}

bool Service::handle_read(WorkerProcess& process, Result<std::optional<WireMessage>> message) {
  if (!message) {
    log::warn("serve worker sent a malformed message; it is ended",
              {{"service", options_.name}, {"error", message.status().message()}});
    return false;
  }
  if (!*message) return false;
  handle(process, std::move(**message));
  return true;
}

void Service::handle(WorkerProcess& process, WireMessage message) {
  if (body_string(message.body, "op") == "released") {
    for (const FileId& file : released_files(message.body)) process.pool.give_back(file);
    return;
  }
  deliver(process, std::move(message.body), std::move(message.attachments));
}

void Service::deliver(WorkerProcess& process, json body, std::vector<zmq::message_t> attachments) {
  auto id_field = body.find("id");
  if (id_field == body.end() || !id_field->is_number_unsigned()) return;
  std::uint64_t id = id_field->get<std::uint64_t>();
  auto call = process.find(id);
  if (!call) return;  // a call that has ended (cancelled, timed out)
  WireMessage message{std::move(body), std::move(attachments)};
  if (call->answer(message)) {
    process.remove(id);
    return;
  }
  call->push(std::move(message));
}

const json* Service::function_entry(const std::string& name) const {
  for (const auto& entry : functions_) {
    if (entry.value("name", "") == name) return &entry;
  }
  return nullptr;
}

bool Service::take_call(const std::shared_ptr<rpc::CallContext>& call) {
  if (!options_.fd_watch) return false;
  std::size_t bytes = 0;
  for (const auto& attachment : call->attachments()) bytes += attachment.size();
  if (bytes > kFastCallBytes) return false;
  std::shared_ptr<WorkerProcess> process;
  {
    MutexLock lock(mutex_);
    const json* entry = state_ == "ready" && process_ ? function_entry(call->params()["function"].get<std::string>()) : nullptr;
    if (!entry || entry->value("is_generator", true)) return false;
    process = process_;
  }
  auto pending = std::make_shared<PendingCall>(call);
  std::uint64_t id = next_id_++;
  if (!process->add(id, pending)) {
    pending->close();
    return false;
  }
  call->on_stop([process, pending, id] {
    pending->close();
    process->remove(id);
    (void)process->send({{"op", "cancel"}, {"id", id}});
  });
  if (!process->try_send(call_request(id, call->params()), call->attachments())) {
    call->on_stop(nullptr);
    pending->close();
    process->remove(id);
    return false;
  }
  return true;
}

Result<json> Service::call(rpc::CallContext& call) {
  const json& params = call.params();
  std::string function = params["function"].get<std::string>();
  std::shared_ptr<WorkerProcess> process;
  bool streams = true;  // a generator function: its items go out before its result, through relay()
  {
    MutexLock lock(mutex_);
    while (state_ == "starting" || state_ == "restarting") {
      if (call.stopped()) return call.stop_reason();
      changed_.wait_for(lock, std::chrono::milliseconds(20));
    }
    if (state_ != "ready" || !process_) {
      return Status(ErrorCode::unavailable, "service '" + options_.name + "' is " + state_ +
                                                (error_.empty() ? std::string() : ": " + error_));
    }
    const json* entry = function_entry(function);
    if (!entry) {
      std::string names;
      for (const auto& known : functions_) names += (names.empty() ? "" : ", ") + known.value("name", "");
      return Status(ErrorCode::not_found, "service '" + options_.name + "' has no function '" + function +
                                              "'; it has: " + names);
    }
    streams = entry->value("is_generator", true);
    process = process_;
  }
  auto pending = std::make_shared<PendingCall>();
  if (!streams) {
    MutexLock lock(pending->answer_mutex);
    pending->direct = &call;
  }
  std::uint64_t id = next_id_++;
  if (!process->add(id, pending)) {
    return Status(ErrorCode::unavailable, "the serve worker of '" + options_.name + "' has just ended; try again");
  }
  if (Status sent = process->send(call_request(id, params), call.attachments()); !sent) {
    pending->close();
    process->remove(id);
    return Status(ErrorCode::unavailable, "cannot reach the serve worker of '" + options_.name + "': " + sent.message());
  }
  Result<json> result = relay(call, *process, *pending, id);
  pending->close();  // before the handler returns: CallContext::answer's contract
  process->remove(id);
  return result;
}

Result<json> Service::relay(rpc::CallContext& call, WorkerProcess& process, PendingCall& pending, std::uint64_t id) {
  auto cancel_worker = [&] { (void)process.send({{"op", "cancel"}, {"id", id}}); };
  while (true) {
    drain_event(pending.event);
    std::deque<WireMessage> messages;
    std::optional<Status> failed;
    {
      MutexLock lock(pending.mutex);
      messages.swap(pending.inbox);
      failed = pending.failed;
    }
    {
      MutexLock lock(pending.answer_mutex);
      if (pending.answered) return json();  // answered by the reader thread: this value is ignored
    }
    for (auto& message : messages) {
      if (body_string(message.body, "op") == "item") {
        Status sent = call.send_data(json{{"item", message.body.value("item", json())}}, std::move(message.attachments));
        if (!sent) {
          cancel_worker();
          return sent;
        }
        (void)process.send({{"op", "credit"}, {"id", id}, {"n", 1}});
      } else if (auto result = outcome(message, call)) {
        return std::move(*result);
      }
    }
    if (failed) return *failed;
    pollfd fds[2] = {{pending.event, POLLIN, 0}, {call.stop_fd(), POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) return Status::from_errno(errno, "serve.call: poll");
    if (fds[1].revents & POLLIN) {
      cancel_worker();
      Status reason = call.stop_reason();
      return reason.is_ok() ? Status(ErrorCode::cancelled, "cancelled") : reason;
    }
  }
}

void Service::begin_stop() {
  {
    MutexLock lock(mutex_);
    no_restart_ = true;
    changed_.notify_all();
  }
  if (loop_) loop_->post([this] { restarts_policy_->hold(); });
}

void Service::stop() {
  if (!supervisor_.joinable()) return;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    no_restart_ = true;
    changed_.notify_all();
  }
  loop_->post([this] {
    stop_requested_ = true;
    restarts_policy_->stop();
    end_loop_if_done();
  });
  if (supervisor_.get_id() != std::this_thread::get_id()) supervisor_.join();
}

json Service::describe() const {
  MutexLock lock(mutex_);
  json entry = {{"name", options_.name}, {"path", options_.path}, {"state", state_},
                {"pid", process_ ? json(process_->pid) : json()}, {"restarts", restarts_}, {"functions", functions_}};
  if (!error_.empty() && state_ != "ready") entry["error"] = error_;
  return entry;
}

json Service::logs(std::size_t tail_bytes) const {
  return {{"stdout", stdout_.tail(tail_bytes)}, {"stderr", stderr_.tail(tail_bytes)},
          {"stdout_dropped", stdout_.dropped()}, {"stderr_dropped", stderr_.dropped()}};
}

}  // namespace gpubox::serve
