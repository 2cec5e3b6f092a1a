// FakeModalProcess: the fake Modal control plane of tests/modal/fake_modal
// (a grpclib server on 127.0.0.1 whose sandboxes are podman containers), run
// as a child of the test process with build/venv's python, for the CLI's
// suite on --backend modal. stop() (or the destructor) ends it with SIGTERM,
// and it removes the containers it started. One thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace gpubox::testing {

class FakeModalProcess {
 public:
  // Starts the fake in a directory of its own under /tmp; "" or what went wrong in *problem.
  explicit FakeModalProcess(std::string* problem);
  ~FakeModalProcess();
  FakeModalProcess(const FakeModalProcess&) = delete;
  FakeModalProcess& operator=(const FakeModalProcess&) = delete;

  // The environment a Modal user has, pointed at this fake (MODAL_SERVER_URL, a test token, GPUBOX_PYTHON...).
  std::map<std::string, std::string> user_environment() const;
  // The names of the containers this fake has started so far.
  std::vector<std::string> containers() const;
  // Those of names that run now.
  std::vector<std::string> running(const std::vector<std::string>& names) const;
  // The container of the sandbox with Modal id `modal_id`.
  static std::string container_of(const std::string& modal_id) { return "fake-modal-" + modal_id; }
  void stop();

 private:
  std::string work_;
  std::string url_;
  pid_t pid_ = -1;
};

// Why the modal suite cannot run here (no podman, no modal SDK in build/venv), or "".
const std::string& fake_modal_problem();

}  // namespace gpubox::testing
