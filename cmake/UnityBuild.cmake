# Unity builds of the libraries with many sources (the default preset turns
# them on with GPUBOX_UNITY_BUILD=ON).
#
# Most of a gpubox translation unit's compile time is code generation for the
# same templates (nlohmann::json, fmt, spdlog) that every file instantiates
# again; parsing is a small part. Compiling a library's files in batches of
# GPUBOX_UNITY_BUILD_BATCH_SIZE, concatenated, generates that code once a batch.
# The price: names at file scope (an anonymous namespace is per batch, not per
# file) must not collide across the files of a library, so a file-local helper
# gets a name that says what it is, and a helper two files need lives once in a
# header.
#
# Off by default, so the ASan and fuzz builds (and incremental work on one
# file) compile file by file; test programs are never unity-built.

option(GPUBOX_UNITY_BUILD "Compile the large libraries as unity builds (faster cold builds)" OFF)
set(GPUBOX_UNITY_BUILD_BATCH_SIZE 16 CACHE STRING "Source files per unity translation unit")

# gpubox_unity_build(TARGET...): unity-build each TARGET when GPUBOX_UNITY_BUILD is on.
function(gpubox_unity_build)
  if(NOT GPUBOX_UNITY_BUILD)
    return()
  endif()
  foreach(target IN LISTS ARGN)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${GPUBOX_UNITY_BUILD_BATCH_SIZE})
  endforeach()
endfunction()
