// What a GoogleTest does when a prerequisite is missing (tests/prerequisite.py
// for Python): one the project's setup installs (podman and the images, root,
// the npm assets) skips on a developer's machine but fails under CI=true, so
// that a green CI run has run every such test. What a machine cannot have (a
// GPU, an instruction set) keeps a plain GTEST_SKIP.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace gpubox::testing {

inline bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::strcmp(ci, "true") == 0;
}

}  // namespace gpubox::testing

// Skips, or under CI=true fails, the current test with message (streamable).
#define GPUBOX_MISSING(message)                                                                         \
  do {                                                                                                  \
    if (::gpubox::testing::under_ci()) {                                                                \
      GTEST_FAIL() << "a prerequisite the setup installs is missing under CI=true: " << message;       \
    } else {                                                                                            \
      GTEST_SKIP() << message;                                                                          \
    }                                                                                                   \
  } while (0)
