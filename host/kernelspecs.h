// gpubox's Jupyter kernelspecs on this host: where they may be, which of
// them attach to a sandbox, and their removal when the sandbox ends (by
// `gpubox terminate` and MCP's terminate_sandbox alike). Files only; one thread.
#pragma once

#include <string>
#include <vector>

namespace gpubox::host {

// One of gpubox's kernelspecs found on disk.
struct FoundKernelspec {
  std::string name;
  std::string dir;
  std::string sandbox;  // the id it attaches to; empty for the standalone kernel
};

// Where kernelspecs may live, most specific first (as Jupyter searches them):
// PREFIX/share/jupyter/kernels when prefix is given, then the user's, $JUPYTER_PATH's and the system's.
std::vector<std::string> kernelspec_dirs(const std::string& prefix);
// gpubox's kernelspecs (argv: `gpubox attach ID ...` or `gpubox-agent kernel ...`) in dirs, by folder.
std::vector<FoundKernelspec> find_kernelspecs(const std::vector<std::string>& dirs);
// Removes the kernelspecs (in the folders kernelspec_dirs("") names) that
// attach to this sandbox; the folders removed.
std::vector<std::string> remove_sandbox_kernelspecs(const std::string& sandbox_id);

}  // namespace gpubox::host
