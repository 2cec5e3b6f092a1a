#include "tests/image/test_image.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include "host/program_run.h"

#ifndef GPUBOX_AGENT_PATH
#error "GPUBOX_AGENT_PATH must name the gpubox-agent binary"
#endif
#ifndef GPUBOX_SOURCE_DIR
#error "GPUBOX_SOURCE_DIR must name the source tree"
#endif

namespace gpubox::testing {

namespace fs = std::filesystem;
using host::run_program;

const TestImage kTestImagePython = {"python", "localhost/gpubox-base-torch:bookworm-1", true};
const TestImage kTestImageMinbase = {"minbase", "localhost/gpubox-base-minbase:bookworm-1", false};
const TestImage kTestImageBusybox = {"busybox", "localhost/gpubox-base-busybox:1", false};

// GPUBOX_TEST_IMAGE_VERSION (default "latest") lets two checkouts on one machine keep their own test images.
std::string test_image_tag(const TestImage& image) {
  const char* version = std::getenv("GPUBOX_TEST_IMAGE_VERSION");
  return std::string("localhost/gpubox-test-") + image.name + ":" + (version && *version ? version : "latest");
}

const std::string& podman_problem() {
  static const std::string problem = [] {
    auto info = run_program("podman", {"info", "--format", "{{.Host.OCIRuntime.Name}}"}, std::chrono::seconds(60));
    if (!info) return "podman cannot run here: " + info.status().message() + " (scripts/setup_images.sh installs it)";
    if (info->status != 0) return "podman cannot run here: podman info failed: " + info->error_line();
    return std::string();
  }();
  return problem;
}

std::string wheelhouse() {
  const char* set = std::getenv("GPUBOX_WHEELHOUSE");
  return set && *set ? set : "/var/cache/gpubox/wheels";
}

namespace {

std::string text_of_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string stamp_of(const std::string& path) {
  struct stat info {};
  ::stat(path.c_str(), &info);
  return std::to_string(info.st_size) + "|" + std::to_string(info.st_mtim.tv_sec) + "." +
         std::to_string(info.st_mtim.tv_nsec);
}

// gpubox-modeld beside the agent (the build puts them in one directory).
std::string modeld_path() { return fs::path(GPUBOX_AGENT_PATH).parent_path() / "gpubox-modeld"; }

// What the image is made of: the Dockerfile, the base, the agent binary
// (size and modification time) and, with Python, the stand-in's lock and
// gpubox-modeld; without the binaries, what Docker's base copy is made of. Every test process builds the images it uses; one whose
// label holds this key is current and is not built again (a cached podman
// build still takes seconds here).
std::string recipe_key(const TestImage& image, bool with_binaries = true) {
  std::string key = text_of_file(std::string(GPUBOX_SOURCE_DIR) + "/image/Dockerfile") + "|" + image.base;
  if (with_binaries) key += "|" + stamp_of(GPUBOX_AGENT_PATH);
  if (image.has_python) {
    key += "|" + text_of_file(std::string(GPUBOX_SOURCE_DIR) + "/tests/image/python-standin.lock");
    if (with_binaries) key += "|" + stamp_of(modeld_path());
  }
  return std::to_string(std::hash<std::string>{}(key));
}

// A binary into the build context, without its debug info (the agent: 75 MB -> 8 MB).
void put_stripped(const std::string& binary, const std::string& context) {
  std::string copy = context + "/" + fs::path(binary).filename().string();
  auto stripped = run_program("strip", {"-o", copy, binary});
  if (!stripped || stripped->status != 0) fs::copy_file(binary, copy, fs::copy_options::overwrite_existing);
}

}  // namespace

std::string build_test_image(const TestImage& image) {
  static std::map<std::string, std::string> built;
  if (auto found = built.find(image.name); found != built.end()) return found->second;
  std::string& outcome = built[image.name];
  std::string key = recipe_key(image);
  auto current = run_program("podman", {"image", "inspect", "--format", "{{index .Labels \"gpubox.test.recipe\"}}", test_image_tag(image)});
  if (current && current->status == 0 && current->out == key + "\n") return outcome = "";
  auto base = run_program("podman", {"image", "exists", image.base});
  if (!base || base->status != 0) return outcome = std::string("base ") + image.base + " is missing: run scripts/setup_images.sh";
  if (image.has_python && !fs::exists(modeld_path())) return outcome = "no gpubox-modeld at " + modeld_path();
  if (image.has_python && !fs::exists(wheelhouse() + "/.gpubox-lock")) {
    return outcome = "no wheelhouse at " + wheelhouse() + ": run scripts/setup_images.sh";
  }
  // The context holds only the binaries: nothing else goes to the build.
  std::string context = "/tmp/gpubox-image-context-" + std::to_string(::getpid());
  fs::create_directories(context);
  put_stripped(GPUBOX_AGENT_PATH, context);
  std::vector<std::string> args = {"build", "--isolation", "chroot", "-q", "-f",
                                   std::string(GPUBOX_SOURCE_DIR) + "/image/Dockerfile", "--build-arg", "AGENT_FROM=context",
                                   "--build-arg", std::string("BASE=") + image.base};
  if (image.has_python) {
    put_stripped(modeld_path(), context);
    args.insert(args.end(), {"--build-arg", "PYTHON_SETUP=pip", "--build-arg", "MODELD_FROM=context", "--build-arg",
                             "PIP_OPTIONS=--no-index --find-links /wheels", "--volume", wheelhouse() + ":/wheels:ro"});
  } else {
    args.insert(args.end(), {"--build-arg", "PYTHON_SETUP=none", "--build-arg", "MODELD_FROM=none"});
  }
  args.insert(args.end(), {"--label", "gpubox.test.recipe=" + key, "--layers=false", "-t", test_image_tag(image), context});
  auto build = run_program("podman", args, std::chrono::seconds(900));
  // The image this one replaced (a machine's podman storage outlives its CI runs).
  (void)run_program("podman", {"image", "prune", "--force", "--filter", "label=gpubox.test.recipe"});
  std::error_code ignored;
  fs::remove_all(context, ignored);
  if (!build) return outcome = build.status().message();
  if (build->status != 0) return outcome = "podman build failed: " + build->err;
  return outcome = "";
}

const std::string& docker_problem() {
  static const std::string problem = [] {
    const char* host = std::getenv("DOCKER_HOST");
    if (!host || !*host) return std::string("no Docker engine: DOCKER_HOST is unset (ctest starts one: tests/cli/docker_engine.sh)");
    auto info = run_program("docker", {"version", "--format", "{{.Server.Version}}"}, std::chrono::seconds(30));
    if (!info) return "docker cannot run here: " + info.status().message() + " (scripts/setup.sh installs docker.io)";
    if (info->status != 0) return "no Docker engine answers at " + std::string(host) + ": " + info->error_line();
    return std::string();
  }();
  return problem;
}

// Docker gets the podman image whole once per base recipe (5 GB: minutes),
// then this build's binaries as one thin layer on it (seconds), as each
// build changes them.
std::string load_test_image_into_docker(const TestImage& image) {
  if (std::string built = build_test_image(image); !built.empty()) return built;
  std::string tag = test_image_tag(image), key = recipe_key(image);
  auto current = run_program("docker", {"image", "inspect", "--format", "{{index .Config.Labels \"gpubox.test.recipe\"}}", tag});
  if (current && current->status == 0 && current->out == key + "\n") return "";
  std::string base = std::string("localhost/gpubox-test-") + image.name + ":base-" + recipe_key(image, false);
  auto has_base = run_program("docker", {"image", "inspect", "--format", "{{.Id}}", base});
  if (!has_base || has_base->status != 0) {
    auto loaded = run_program("sh", {"-c", "podman save --format docker-archive " + tag + " | docker load && docker tag " + tag + " " + base},
                             std::chrono::seconds(900));
    if (!loaded) return loaded.status().message();
    if (loaded->status != 0) return "podman save | docker load failed: " + loaded->err;
    // Bases of earlier recipes: 5 GB each.
    auto tags = run_program("docker", {"images", "--format", "{{.Repository}}:{{.Tag}}", std::string("localhost/gpubox-test-") + image.name});
    std::istringstream lines(tags ? tags->out : "");
    for (std::string line; std::getline(lines, line);) {
      if (line != base && line.find(":base-") != std::string::npos) (void)run_program("docker", {"rmi", line});
    }
  }
  std::string context = "/tmp/gpubox-docker-context-" + std::to_string(::getpid());
  fs::create_directories(context);
  put_stripped(GPUBOX_AGENT_PATH, context);
  std::string dockerfile = "FROM " + base + "\nCOPY gpubox-agent /usr/local/bin/gpubox-agent\n";
  if (image.has_python) {
    put_stripped(modeld_path(), context);
    dockerfile += "COPY gpubox-modeld /usr/local/bin/gpubox-modeld\n";
  }
  std::ofstream(context + "/Dockerfile") << dockerfile << "LABEL gpubox.test.recipe=" << key << "\n";
  // DOCKER_BUILDKIT=0: the engine's own builder (Debian's docker.io has no buildx).
  auto built = run_program("env", {"DOCKER_BUILDKIT=0", "docker", "build", "-q", "-t", tag, context}, std::chrono::seconds(300));
  std::error_code ignored;
  fs::remove_all(context, ignored);
  if (!built) return built.status().message();
  if (built->status != 0) return "docker build failed: " + built->err;
  (void)run_program("docker", {"image", "prune", "--force"});  // the layers of the build this one replaced
  return "";
}

}  // namespace gpubox::testing
