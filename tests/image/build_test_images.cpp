// build_test_images: builds the container tests' images (tests/image/test_image.h)
// for the tests that are not GoogleTest programs (the model-host-in-an-image
// suite, test_model_in_image.py), as a CTest fixture. Exits 0 having built
// them, 0 saying why when podman cannot run here (those tests then skip),
// 1 naming what failed.
#include <cstdio>

#include "tests/image/test_image.h"

int main() {
  using namespace gpubox::testing;
  if (!podman_problem().empty()) {
    std::printf("skipped: %s\n", podman_problem().c_str());
    return 0;
  }
  for (const TestImage* image : {&kTestImagePython, &kTestImageMinbase, &kTestImageBusybox}) {
    std::string problem = build_test_image(*image);
    if (!problem.empty()) {
      std::fprintf(stderr, "building %s on %s: %s\n", test_image_tag(*image).c_str(), image->base, problem.c_str());
      return 1;
    }
    std::printf("%s: built\n", test_image_tag(*image).c_str());
  }
  return 0;
}
