#include "host/backends/local/runtime_binds.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "base/fd.h"

namespace gpubox::host {
namespace {

constexpr std::size_t kMaxSections = 1 << 16;
constexpr std::size_t kMaxDynamicEntries = 1 << 14;
constexpr std::size_t kMaxRunpath = 1 << 16;

bool read_at(int fd, std::uint64_t offset, void* into, std::size_t size) {
  return ::pread(fd, into, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
}

std::string real_path_or_empty(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : std::string();
}

std::string parent(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

// "/a/b/../c/./d" -> "/a/c/d" (lexically; "" for a relative path).
std::string normalized(const std::string& path) {
  if (path.empty() || path[0] != '/') return "";
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at <= path.size()) {
    std::size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(at, end - at);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    at = end + 1;
  }
  std::string out;
  for (const auto& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

bool stat_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

bool covered_by(const std::string& path, const std::vector<std::string>& covered) {
  return std::any_of(covered.begin(), covered.end(), [&](const std::string& root) { return is_under(path, root); });
}

// The tree a library directory needs: its nearest site-packages (wheels find
// each other's libraries through it: torch/lib -> ../../nvidia/*/lib), else
// the directory itself.
std::string library_tree(const std::string& dir) {
  for (std::string at = dir; at != "/"; at = parent(at)) {
    std::string name = at.substr(at.rfind('/') + 1);
    if (name == "site-packages" || name == "dist-packages") return at;
  }
  return dir;
}

std::string runpath_string(int fd) {
  Elf64_Ehdr header{};
  if (!read_at(fd, 0, &header, sizeof header) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
      header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shnum > kMaxSections) {
    return "";
  }
  auto section = [&](std::size_t index, Elf64_Shdr* out) {
    return index < header.e_shnum && read_at(fd, header.e_shoff + index * sizeof(Elf64_Shdr), out, sizeof *out);
  };
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr dynamic{}, strings{};
    if (!section(i, &dynamic) || dynamic.sh_type != SHT_DYNAMIC) continue;
    if (!section(dynamic.sh_link, &strings) || strings.sh_type != SHT_STRTAB) return "";
    std::uint64_t runpath = UINT64_MAX, rpath = UINT64_MAX;
    std::size_t count = std::min<std::uint64_t>(dynamic.sh_size / sizeof(Elf64_Dyn), kMaxDynamicEntries);
    for (std::size_t k = 0; k < count; ++k) {
      Elf64_Dyn entry{};
      if (!read_at(fd, dynamic.sh_offset + k * sizeof entry, &entry, sizeof entry) || entry.d_tag == DT_NULL) break;
      if (entry.d_tag == DT_RUNPATH) runpath = entry.d_un.d_val;
      if (entry.d_tag == DT_RPATH) rpath = entry.d_un.d_val;
    }
    std::uint64_t offset = runpath != UINT64_MAX ? runpath : rpath;
    if (offset >= strings.sh_size) return "";
    std::string text(std::min<std::uint64_t>(strings.sh_size - offset, kMaxRunpath), '\0');
    if (!read_at(fd, strings.sh_offset + offset, text.data(), text.size())) return "";
    return text.substr(0, text.find('\0'));
  }
  return "";
}

std::string replace_origin(std::string dir, const std::string& origin) {
  for (const char* token : {"${ORIGIN}", "$ORIGIN"}) {
    for (std::size_t at = dir.find(token); at != std::string::npos; at = dir.find(token, at + origin.size())) {
      dir.replace(at, std::strlen(token), origin);
    }
  }
  return dir;
}

}  // namespace

std::vector<std::string> elf_library_dirs(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return {};
  std::string runpath = runpath_string(fd.get());
  std::string real = real_path_or_empty(path);
  std::string origin = real.empty() ? parent(path) : parent(real);
  std::vector<std::string> dirs;
  std::size_t at = 0;
  while (!runpath.empty() && at <= runpath.size()) {
    std::size_t end = std::min(runpath.find(':', at), runpath.size());
    std::string dir = normalized(replace_origin(runpath.substr(at, end - at), origin));
    if (!dir.empty()) dirs.push_back(dir);
    at = end + 1;
  }
  return dirs;
}

std::vector<RootBind> runtime_binds(const std::string& agent_path, const std::string& kernel_python,
                                    const std::vector<std::string>& covered) {
  std::vector<RootBind> binds;
  std::vector<std::string> trees;
  std::string agent = real_path_or_empty(agent_path);
  if (agent.empty()) return binds;
  binds.push_back({agent, kSandboxAgentPath, true, false});
  std::string modeld = real_path_or_empty(parent(agent) + "/gpubox-modeld");
  if (!modeld.empty()) {
    binds.push_back({modeld, kSandboxModeldPath, true, false});
    for (const auto& dir : elf_library_dirs(modeld)) {
      if (covered_by(dir, covered) && stat_exists(dir)) trees.push_back(library_tree(dir));
    }
  }
  if (!kernel_python.empty() && kernel_python[0] == '/') {
    // The venv's prefix holds pyvenv.cfg and its site-packages; the real
    // interpreter's prefix, its standard library.
    for (const std::string& python : {normalized(kernel_python), real_path_or_empty(kernel_python)}) {
      if (!python.empty() && covered_by(python, covered) && stat_exists(python)) trees.push_back(parent(parent(python)));
    }
  }
  std::sort(trees.begin(), trees.end());
  std::string last;
  for (const auto& tree : trees) {
    // Never a whole covered directory (a python at /root/bin/python would bring all of /root).
    if ((!last.empty() && is_under(tree, last)) || std::find(covered.begin(), covered.end(), tree) != covered.end()) continue;
    binds.push_back({tree, tree, true, false});
    last = tree;
  }
  return binds;
}

}  // namespace gpubox::host
