#include "tests/image/test_image.h"

#include <unistd.h>

#include <filesystem>
#include <map>

#include "host/container_engine.h"

#ifndef GPUBOX_AGENT_PATH
#error "GPUBOX_AGENT_PATH must name the gpubox-agent binary"
#endif
#ifndef GPUBOX_SOURCE_DIR
#error "GPUBOX_SOURCE_DIR must name the source tree"
#endif

namespace gpubox::testing {

namespace fs = std::filesystem;
using host::run_engine;

const TestImage kTestImagePython = {"python", "localhost/gpubox-base-python:bookworm-2", true};
const TestImage kTestImageMinbase = {"minbase", "localhost/gpubox-base-minbase:bookworm-1", false};
const TestImage kTestImageBusybox = {"busybox", "localhost/gpubox-base-busybox:1", false};

std::string test_image_tag(const TestImage& image) { return std::string("localhost/gpubox-test-") + image.name + ":latest"; }

const std::string& podman_problem() {
  static const std::string problem = [] {
    auto info = run_engine("podman", {"info", "--format", "{{.Host.OCIRuntime.Name}}"}, std::chrono::seconds(60));
    if (!info) return "podman cannot run here: " + info.status().message() + " (scripts/setup_images.sh installs it)";
    if (info->status != 0) return "podman cannot run here: podman info failed: " + info->error_line();
    return std::string();
  }();
  return problem;
}

std::string build_test_image(const TestImage& image) {
  static std::map<std::string, std::string> built;
  if (auto found = built.find(image.name); found != built.end()) return found->second;
  std::string& outcome = built[image.name];
  auto base = run_engine("podman", {"image", "exists", image.base});
  if (!base || base->status != 0) return outcome = std::string("base ") + image.base + " is missing: run scripts/setup_images.sh";
  // The context holds only the agent: nothing else goes to the build.
  std::string context = "/tmp/gpubox-image-context-" + std::to_string(::getpid());
  fs::create_directories(context);
  fs::copy_file(GPUBOX_AGENT_PATH, context + "/gpubox-agent", fs::copy_options::overwrite_existing);
  auto build = run_engine("podman",
                          {"build", "--isolation", "chroot", "-q", "-f", std::string(GPUBOX_SOURCE_DIR) + "/image/Dockerfile",
                           "--build-arg", "AGENT_FROM=context", "--build-arg", std::string("BASE=") + image.base,
                           "--build-arg", "PYTHON_SETUP=none", "-t", test_image_tag(image), context},
                          std::chrono::seconds(300));
  std::error_code ignored;
  fs::remove_all(context, ignored);
  if (!build) return outcome = build.status().message();
  if (build->status != 0) return outcome = "podman build failed: " + build->err;
  return outcome = "";
}

}  // namespace gpubox::testing
