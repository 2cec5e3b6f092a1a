// Python packages shipped inside a binary (cmake/EmbedPython.cmake) and made
// importable in a Python process the binary starts, whatever its image holds.
// Plain functions; any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gpubox {

// (module name, source) of one package; "__init__" is the package itself.
using EmbeddedSources = std::vector<std::pair<std::string, std::string>>;

// Python that puts a finder first on sys.meta_path serving `package` and
// `package.MODULE` from sources, each compiled at its first import under the
// file name ORIGIN/MODULE.py (origin: e.g. "<gpubox>", so tracebacks name the
// embedded copy). It leaves no name behind in the namespace it runs in.
std::string embedded_package_code(const std::string& package, const std::string& origin,
                                  const EmbeddedSources& sources);

// A whole program for `python3 -c`: embedded_package_code, then `package.__main__`'s main().
std::string embedded_package_program(const std::string& package, const std::string& origin,
                                     const EmbeddedSources& sources);

}  // namespace gpubox
