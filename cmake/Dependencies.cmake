# Third-party libraries. Everything PID 1 links is linked statically:
# libzmq from build/deps (scripts/setup.sh), spdlog and fmt header-only.
find_package(Threads REQUIRED)
find_package(nlohmann_json REQUIRED)

add_library(gpubox_spdlog INTERFACE)
target_compile_definitions(gpubox_spdlog INTERFACE SPDLOG_HEADER_ONLY FMT_HEADER_ONLY SPDLOG_FMT_EXTERNAL SPDLOG_PREVENT_CHILD_FD)

# OpenSSL's libcrypto, static, for SHA-256 (SHA-NI / AVX2 code paths) and for
# libzmq's CURVE on bulk messages (Poly1305: scripts/zmq-patches).
find_library(GPUBOX_CRYPTO_STATIC NAMES libcrypto.a)
if(NOT GPUBOX_CRYPTO_STATIC)
  message(FATAL_ERROR "libcrypto.a not found: run scripts/setup.sh (libssl-dev)")
endif()
add_library(gpubox_crypto INTERFACE)
target_link_libraries(gpubox_crypto INTERFACE ${GPUBOX_CRYPTO_STATIC} ${CMAKE_DL_LIBS} Threads::Threads)

find_library(GPUBOX_ZMQ_STATIC NAMES libzmq.a PATHS ${GPUBOX_DEPS_DIR}/lib NO_DEFAULT_PATH)
find_library(GPUBOX_SODIUM_STATIC NAMES libsodium.a)
if(GPUBOX_ZMQ_STATIC AND GPUBOX_SODIUM_STATIC)
  add_library(gpubox_zmq INTERFACE)
  target_include_directories(gpubox_zmq INTERFACE ${GPUBOX_DEPS_DIR}/include)
  target_link_libraries(gpubox_zmq INTERFACE ${GPUBOX_ZMQ_STATIC} ${GPUBOX_SODIUM_STATIC} gpubox_crypto Threads::Threads)
  target_compile_definitions(gpubox_zmq INTERFACE ZMQ_STATIC)
else()
  message(FATAL_ERROR "static libzmq not found under ${GPUBOX_DEPS_DIR}: run scripts/setup.sh first")
endif()

# libarchive, static, with exactly what tar + zstd needs (docs/architecture.md,
# "One static binary"; docs/build.md): pkg-config's static list would drag in libxml2 and ICU.
set(GPUBOX_ARCHIVE_LIBS)
foreach(name archive nettle acl zstd lz4 bz2 z lzma)
  find_library(GPUBOX_${name}_STATIC NAMES lib${name}.a)
  if(NOT GPUBOX_${name}_STATIC)
    message(FATAL_ERROR "lib${name}.a not found: run scripts/setup.sh (libarchive-dev and its static dependencies)")
  endif()
  list(APPEND GPUBOX_ARCHIVE_LIBS ${GPUBOX_${name}_STATIC})
endforeach()
add_library(gpubox_archive_shim OBJECT ${CMAKE_SOURCE_DIR}/cmake/libarchive_write_shim.c)
add_library(gpubox_archive INTERFACE)
# The shim's object goes on every consumer's link line, ahead of libarchive.a.
target_link_libraries(gpubox_archive INTERFACE $<TARGET_OBJECTS:gpubox_archive_shim> ${GPUBOX_ARCHIVE_LIBS})

# libseccomp (Debian's, static): builds the syscall filter the agent installs
# in every process it starts (agent/seccomp_filter.h).
find_library(GPUBOX_SECCOMP_STATIC NAMES libseccomp.a)
find_path(GPUBOX_SECCOMP_INCLUDE seccomp.h)
if(NOT GPUBOX_SECCOMP_STATIC OR NOT GPUBOX_SECCOMP_INCLUDE)
  message(FATAL_ERROR "libseccomp.a not found: run scripts/setup.sh (libseccomp-dev)")
endif()
add_library(gpubox_seccomp INTERFACE)
target_include_directories(gpubox_seccomp INTERFACE ${GPUBOX_SECCOMP_INCLUDE})
target_link_libraries(gpubox_seccomp INTERFACE ${GPUBOX_SECCOMP_STATIC})

# xeus 2.4.1 (Debian's static libxeus.a) for the Jupyter kernel, linked with our
# static libzmq, libcrypto (HMAC) and libuuid; cppzmq and xtl are header-only.
find_library(GPUBOX_XEUS_STATIC NAMES libxeus.a)
find_library(GPUBOX_UUID_STATIC NAMES libuuid.a)
if(NOT GPUBOX_XEUS_STATIC OR NOT GPUBOX_UUID_STATIC)
  message(FATAL_ERROR "libxeus.a or libuuid.a not found: run scripts/setup.sh (xeus-dev, uuid-dev)")
endif()
add_library(gpubox_xeus INTERFACE)
target_compile_definitions(gpubox_xeus INTERFACE XEUS_STATIC_LIB GUID_LIBUUID)
target_link_libraries(gpubox_xeus INTERFACE ${GPUBOX_XEUS_STATIC} gpubox_zmq gpubox_crypto ${GPUBOX_UUID_STATIC} nlohmann_json::nlohmann_json)
