// What a local sandbox needs of the host to run its agent, wherever that
// lives: the sandbox hides /root, /home and the store and has a /tmp and /run
// of its own, so an agent, a gpubox-modeld, a LibTorch or a venv under one of
// them would be out of sight. The agent and modeld are placed read-only at the
// neutral /opt/gpubox/bin (the agent is executed from there, so it finds modeld
// beside itself); the library trees modeld's RUNPATH names and the kernel's
// Python prefix, when covered, come along read-only at their own paths, since
// those paths are written into them (RUNPATH, pyvenv.cfg, .pth files).
#pragma once

#include <string>
#include <vector>

#include "host/backends/local/sandbox_root.h"

namespace gpubox::host {

inline constexpr char kSandboxAgentPath[] = "/opt/gpubox/bin/gpubox-agent";
inline constexpr char kSandboxModeldPath[] = "/opt/gpubox/bin/gpubox-modeld";

// The directories an ELF file's DT_RUNPATH (or DT_RPATH) names, $ORIGIN
// expanded and "." and ".." resolved, in order. Empty when the file has none
// or is not a 64-bit little-endian ELF file.
std::vector<std::string> elf_library_dirs(const std::string& path);

// The binds above for an agent at agent_path (gpubox-modeld beside its real
// path, when there) and a kernel Python (a name found on PATH needs none),
// given the host directories the sandbox covers. Only existing paths.
std::vector<RootBind> runtime_binds(const std::string& agent_path, const std::string& kernel_python,
                                    const std::vector<std::string>& covered);

}  // namespace gpubox::host
