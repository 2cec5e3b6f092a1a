// TestClusterProcess: the Kubernetes test cluster of tests/kubernetes (the real
// kube-apiserver on loopback and the test controller, whose pods are podman
// containers) with one namespace, run by tests/kubernetes/run_cluster.py as a
// child of the test process, for the CLI's suite on --backend kubernetes.
// stop() (or the destructor) ends it with SIGTERM, and it removes the
// containers it started. One thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace gpubox::testing {

class TestClusterProcess {
 public:
  // Starts the cluster in a directory of its own under /tmp; "" or what went wrong in *problem.
  explicit TestClusterProcess(std::string* problem);
  ~TestClusterProcess();
  TestClusterProcess(const TestClusterProcess&) = delete;
  TestClusterProcess& operator=(const TestClusterProcess&) = delete;

  // The environment a user of this cluster has (KUBECONFIG, GPUBOX_PYTHON...).
  std::map<std::string, std::string> user_environment() const;
  // The namespace gpubox's sandboxes go to.
  const std::string& namespace_name() const { return namespace_; }
  // The podman container of the namespace's pod `pod` (the test node names them so).
  std::string container_of(const std::string& pod) const;
  // What is on the cluster now: the namespace's objects ("Kind/name") and running containers
  // ("container NAME"); a line naming the failure when it cannot say.
  std::vector<std::string> left() const;
  // The last lines the cluster's controller (its pods' node) and run_cluster.py logged.
  std::string log_tail() const;
  void stop();

 private:
  std::string work_;
  std::string kubeconfig_;
  std::string namespace_;
  std::string run_id_;
  pid_t pid_ = -1;
};

// Why the kubernetes suite cannot run here (no kube-apiserver, no kubernetes package in build/venv, no podman), or "".
const std::string& kubernetes_cluster_problem();

}  // namespace gpubox::testing
