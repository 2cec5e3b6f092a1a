#include "tests/image/test_image.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

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

namespace {

// What the image is made of: the Dockerfile, the base and this agent binary
// (size and modification time). Every test process builds the images it
// uses; one whose label holds this key is current and is not built again
// (a cached podman build still takes seconds here).
std::string recipe_key(const TestImage& image) {
  std::ifstream dockerfile(std::string(GPUBOX_SOURCE_DIR) + "/image/Dockerfile");
  std::stringstream text;
  text << dockerfile.rdbuf();
  struct stat agent {};
  ::stat(GPUBOX_AGENT_PATH, &agent);
  std::string key = text.str() + "|" + image.base + "|" + std::to_string(agent.st_size) + "|" +
                    std::to_string(agent.st_mtim.tv_sec) + "." + std::to_string(agent.st_mtim.tv_nsec);
  return std::to_string(std::hash<std::string>{}(key));
}

}  // namespace

std::string build_test_image(const TestImage& image) {
  static std::map<std::string, std::string> built;
  if (auto found = built.find(image.name); found != built.end()) return found->second;
  std::string& outcome = built[image.name];
  std::string key = recipe_key(image);
  auto current = run_engine("podman", {"image", "inspect", "--format", "{{index .Labels \"gpubox.test.recipe\"}}", test_image_tag(image)});
  if (current && current->status == 0 && current->out == key + "\n") return outcome = "";
  auto base = run_engine("podman", {"image", "exists", image.base});
  if (!base || base->status != 0) return outcome = std::string("base ") + image.base + " is missing: run scripts/setup_images.sh";
  // The context holds only the agent, without its debug info (75 MB -> 8 MB): nothing else goes to the build.
  std::string context = "/tmp/gpubox-image-context-" + std::to_string(::getpid());
  fs::create_directories(context);
  std::string agent = context + "/gpubox-agent";
  auto stripped = run_engine("strip", {"-o", agent, GPUBOX_AGENT_PATH});
  if (!stripped || stripped->status != 0) fs::copy_file(GPUBOX_AGENT_PATH, agent, fs::copy_options::overwrite_existing);
  auto build = run_engine("podman",
                          {"build", "--isolation", "chroot", "-q", "-f", std::string(GPUBOX_SOURCE_DIR) + "/image/Dockerfile",
                           "--build-arg", "AGENT_FROM=context", "--build-arg", std::string("BASE=") + image.base,
                           "--build-arg", "PYTHON_SETUP=none", "--label", "gpubox.test.recipe=" + key, "--layers=false",
                           "-t", test_image_tag(image), context},
                          std::chrono::seconds(300));
  // The image this one replaced (a machine's podman storage outlives its CI runs).
  (void)run_engine("podman", {"image", "prune", "--force", "--filter", "label=gpubox.test.recipe"});
  std::error_code ignored;
  fs::remove_all(context, ignored);
  if (!build) return outcome = build.status().message();
  if (build->status != 0) return outcome = "podman build failed: " + build->err;
  return outcome = "";
}

}  // namespace gpubox::testing
