// The sandbox images the container tests run: image/Dockerfile built by podman
// with AGENT_FROM=context (this build's static agent) and PYTHON_SETUP=none on
// the local bases of scripts/setup_images.sh. Built once per test process;
// podman's layer cache makes a rebuild with an unchanged agent about a second.
// One thread.
#pragma once

#include <string>

namespace gpubox::testing {

struct TestImage {
  const char* name;  // python, minbase, busybox
  const char* base;  // the local base image
  bool has_python;
};

extern const TestImage kTestImagePython;   // bookworm + python3 + IPython: the CUDA + PyTorch stand-in
extern const TestImage kTestImageMinbase;  // bookworm minbase, no Python
extern const TestImage kTestImageBusybox;  // a busybox-only root

std::string test_image_tag(const TestImage& image);

// Why podman cannot run here, or "" when it can (checked once).
const std::string& podman_problem();

// Builds the image once; "" or what went wrong.
std::string build_test_image(const TestImage& image);

}  // namespace gpubox::testing
