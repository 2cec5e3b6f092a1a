# Sourced by scripts/test.sh once its setup phases have run: from here on every
# prerequisite that the setup installs is present, so a test that finds one
# missing fails instead of skipping (tests/prerequisite.py, tests/prerequisite.h)
# and CMake refuses a build without LibTorch or clang's thread-safety check,
# whether or not the caller's environment set CI. What no setup can install
# (a GPU, a Modal token, an instruction set) still skips, and is counted.
export CI=true
