#include "agent/kernel_launcher.h"

#include <fcntl.h>
#include <sys/wait.h>

#include <chrono>
#include <condition_variable>
#include <map>

#include "base/fd.h"
#include "base/thread_annotations.h"

namespace gpubox {
namespace {

// Exit statuses the event-loop thread reports; shared with its callbacks, which may outlive the launcher.
struct ExitBoard {
  Mutex mutex;
  std::condition_variable_any changed;
  std::map<pid_t, ExitStatus> exited GUARDED_BY(mutex);
};

class TableLauncher : public kernel::ExecutorLauncher {
 public:
  explicit TableLauncher(ProcessLauncher& launcher) : launcher_(launcher) {}

  Result<pid_t> spawn(const kernel::ExecutorProcessSpec& spec) override {
    Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    SpawnOptions options;
    options.argv = spec.argv;
    options.env = spec.env;
    options.stdin_fd = devnull.get();
    options.stdout_fd = spec.stdout_fd;
    options.stderr_fd = spec.stderr_fd;
    options.extra_fds = {{spec.channel_fd, 3}};
    auto board = board_;
    return launcher_.spawn(options, [board](pid_t pid, ExitStatus status) {
      MutexLock lock(board->mutex);
      board->exited[pid] = status;
      board->changed.notify_all();
    });
  }

  int wait(pid_t pid) override {
    MutexLock lock(board_->mutex);
    while (true) {
      auto it = board_->exited.find(pid);
      if (it != board_->exited.end()) {
        ExitStatus status = it->second;
        board_->exited.erase(it);
        return status.signal ? status.signal : (status.code & 0xff) << 8;  // as waitpid encodes it
      }
      // The loop thread reaps it; should it be gone (shutdown), reap it here.
      auto reaped = [&]() REQUIRES(board_->mutex) { return board_->exited.count(pid) > 0; };
      if (!board_->changed.wait_for(lock, std::chrono::milliseconds(200), reaped)) {
        int raw = 0;
        if (::waitpid(pid, &raw, WNOHANG) == pid) return raw;
      }
    }
  }

 private:
  ProcessLauncher& launcher_;
  std::shared_ptr<ExitBoard> board_ = std::make_shared<ExitBoard>();
};

}  // namespace

std::unique_ptr<kernel::ExecutorLauncher> make_table_launcher(ProcessLauncher& launcher) {
  return std::make_unique<TableLauncher>(launcher);
}

}  // namespace gpubox
