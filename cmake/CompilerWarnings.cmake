# gpubox_set_warnings(TARGET): the warning set every gpubox target builds with.
function(gpubox_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  # The lock rules of base/thread_annotations.h; gcc builds check them with
  # gpubox_check_thread_safety (ThreadSafety.cmake).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror=thread-safety)
  endif()
endfunction()

# gpubox_harden(TARGET): hardening flags for shipped binaries.
function(gpubox_harden target)
  target_compile_options(${target} PRIVATE -fstack-protector-strong -D_FORTIFY_SOURCE=2)
endfunction()
