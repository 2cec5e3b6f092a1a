# Clang's thread-safety analysis (base/thread_annotations.h) as a build step.
#
# A clang build compiles every target with -Werror=thread-safety
# (CompilerWarnings.cmake). The default build is gcc, which has no such
# analysis: there gpubox_check_thread_safety_everywhere(), called once after
# every directory, has clang++ parse, with -fsyntax-only, each source of every
# C++ target that uses the annotations (it, or a header of the project it
# includes, says GUARDED_BY, REQUIRES, EXCLUDES, ACQUIRE or MutexLock), and fails
# the build on any finding. Only those files, and only parsed: the check costs
# seconds, not a second build. Each file is checked again when it or a header
# it includes changes.
#
# Off with -DGPUBOX_THREAD_SAFETY_CHECK=OFF; under CI=true a missing clang++
# is an error (scripts/setup.sh installs it), not a check that quietly vanishes.

if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(gpubox_tsa_default OFF)  # the compile itself checks
elseif(GPUBOX_SANITIZE)
  set(gpubox_tsa_default OFF)  # the same sources as the default build, which checks them
else()
  find_program(GPUBOX_CLANG_CXX NAMES clang++ clang++-14)
  if(GPUBOX_CLANG_CXX)
    set(gpubox_tsa_default ON)
  elseif("$ENV{CI}" STREQUAL "true" AND NOT DEFINED CACHE{GPUBOX_THREAD_SAFETY_CHECK})
    message(FATAL_ERROR "CI=true, and no clang++ for the thread-safety check: run scripts/setup.sh "
                        "(or configure with -DGPUBOX_THREAD_SAFETY_CHECK=OFF)")
  else()
    set(gpubox_tsa_default OFF)
  endif()
endif()
option(GPUBOX_THREAD_SAFETY_CHECK "Check the thread-safety annotations with clang++ -fsyntax-only (gcc builds)"
       ${gpubox_tsa_default})

# gpubox_check_thread_safety(TARGET): the check over TARGET's annotated sources,
# as target thread_safety_TARGET, part of ALL. Once per target.
function(gpubox_check_thread_safety target)
  if(NOT GPUBOX_THREAD_SAFETY_CHECK OR TARGET thread_safety_${target})
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  if(NOT sources)
    return()
  endif()
  get_target_property(source_dir ${target} SOURCE_DIR)
  get_property(gpubox_tsa_checked GLOBAL PROPERTY gpubox_tsa_checked_sources)
  # The target's include directories and definitions, its dependencies' included, less
  # the system's own directories and empty entries.
  set(includes "$<REMOVE_DUPLICATES:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>>")
  set(includes "$<FILTER:${includes},EXCLUDE,^(/usr(/local)?/include/?)?$>")
  set(definitions "$<FILTER:$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>,EXCLUDE,^$>")
  set(stamps)
  foreach(source ${sources})
    if(NOT source MATCHES "\\.cpp$")
      continue()
    endif()
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${source_dir} OUTPUT_VARIABLE path)
    if(NOT EXISTS ${path})
      continue()  # generated
    endif()
    set(read ${path})
    file(STRINGS ${path} lines REGEX "^#include \"")
    foreach(line ${lines})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
      if(EXISTS ${CMAKE_SOURCE_DIR}/${header})
        list(APPEND read ${CMAKE_SOURCE_DIR}/${header})
      endif()
    endforeach()
    set(annotated OFF)
    if(${path} IN_LIST gpubox_tsa_checked)
      continue()  # a source of two targets is parsed once
    endif()
    foreach(file ${read})
      file(STRINGS ${file} hits REGEX "GUARDED_BY\\(|REQUIRES\\(|EXCLUDES\\(|ACQUIRE\\(|MutexLock")
      if(hits)
        set(annotated ON)
        break()
      endif()
    endforeach()
    if(NOT annotated)
      continue()
    endif()
    file(RELATIVE_PATH name ${CMAKE_SOURCE_DIR} ${path})
    set(stamp ${CMAKE_BINARY_DIR}/thread_safety/${name}.checked)
    add_custom_command(OUTPUT ${stamp}
      COMMAND ${GPUBOX_CLANG_CXX} -std=c++${CMAKE_CXX_STANDARD} -fsyntax-only
              -Wno-everything -Wthread-safety -Werror=thread-safety
              "-I$<JOIN:${includes},;-I>" "$<$<BOOL:${definitions}>:-D$<JOIN:${definitions},;-D>>"
              -MD -MF ${stamp}.d -MT ${stamp} ${path}
      COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
      DEPENDS ${path}
      DEPFILE ${stamp}.d
      COMMENT "Thread-safety analysis of ${name}"
      COMMAND_EXPAND_LISTS VERBATIM)
    list(APPEND stamps ${stamp})
    set_property(GLOBAL APPEND PROPERTY gpubox_tsa_checked_sources ${path})
  endforeach()
  add_custom_target(thread_safety_${target} ALL DEPENDS ${stamps})
endfunction()

# The C++ targets defined in DIR and below it, into OUT.
function(gpubox_cxx_targets_below dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(found)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      list(APPEND found ${target})
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory ${subdirectories})
    gpubox_cxx_targets_below(${subdirectory} below)
    list(APPEND found ${below})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# The check over every C++ target of the build (libraries, programs, tests,
# benchmarks, LibTorch's sources included): called once, after every directory.
function(gpubox_check_thread_safety_everywhere)
  if(NOT GPUBOX_THREAD_SAFETY_CHECK)
    return()
  endif()
  gpubox_cxx_targets_below(${CMAKE_SOURCE_DIR} targets)
  foreach(target ${targets})
    gpubox_check_thread_safety(${target})
  endforeach()
endfunction()
