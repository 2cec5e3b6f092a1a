// The sandbox images the container tests run: image/Dockerfile built by podman
// with AGENT_FROM=context (this build's static agent) on the local bases of
// scripts/setup_images.sh; on the torch base also with PYTHON_SETUP=pip from
// the wheelhouse (offline) and MODELD_FROM=context (this build's
// gpubox-modeld), elsewhere with PYTHON_SETUP=none and MODELD_FROM=none.
// Built once per recipe (a label on the image holds its key). One thread.
#pragma once

#include <string>

namespace gpubox::testing {

struct TestImage {
  const char* name;  // python, minbase, busybox
  const char* base;  // the local base image
  bool has_python;   // python3 with torch, the Dockerfile's PYTHON_PACKAGES and gpubox-modeld
};

extern const TestImage kTestImagePython;   // bookworm + a venv with PyPI's torch: the CUDA + PyTorch stand-in
extern const TestImage kTestImageMinbase;  // bookworm minbase, no Python
extern const TestImage kTestImageBusybox;  // a busybox-only root

std::string test_image_tag(const TestImage& image);

// Why podman cannot run here, or "" when it can (checked once).
const std::string& podman_problem();

// Where the wheels of tests/image/python-standin.lock are (setup_images.sh).
std::string wheelhouse();

// Builds the image once; "" or what went wrong.
std::string build_test_image(const TestImage& image);

// Why the Docker engine of the tests (tests/cli/docker_engine.sh, reached
// through DOCKER_HOST) cannot run containers here, or "" when it can.
const std::string& docker_problem();

// Builds the image with podman (build_test_image) and loads it into Docker's
// engine unless the engine holds this recipe already; "" or what went wrong.
std::string load_test_image_into_docker(const TestImage& image);

}  // namespace gpubox::testing
