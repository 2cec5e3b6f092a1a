// `gpubox kernelspec install [--user] [--prefix DIR] [--sandbox ID] [--name N]`:
// writes a Jupyter kernelspec so that any frontend can start the gpubox
// kernel by name: the standalone kernel (gpubox-agent kernel), or, with
// --sandbox, a sandbox's kernel through `gpubox attach`. `kernelspec list`
// and `kernelspec remove NAME` show and remove gpubox's kernelspecs (never
// another kernel's); `terminate` removes those of the sandboxes it ends.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "base/terminal_text.h"
#include "host/cli/cli.h"
#include "host/backends/backend.h"
#include "host/kernelspecs.h"
#include "host/sandboxes/state.h"

namespace gpubox::host::cli {
namespace {

constexpr char kKernelspecUsage[] =
    "usage: gpubox kernelspec install [--user | --prefix DIR] [--sandbox ID] [--name NAME] [--python PATH]\n"
    "       gpubox kernelspec list [--prefix DIR] [--json]\n"
    "       gpubox kernelspec remove NAME [--prefix DIR]\n"
    "Installs a Jupyter kernelspec into KERNELS/NAME/kernel.json, where KERNELS is\n"
    "  /usr/local/share/jupyter/kernels           (default)\n"
    "  $JUPYTER_DATA_DIR/kernels, else ~/.local/share/jupyter/kernels   (--user)\n"
    "  DIR/share/jupyter/kernels                  (--prefix DIR)\n"
    "Without --sandbox: the standalone kernel, `gpubox-agent kernel -f {connection_file}` (NAME gpubox;\n"
    "--python names the executor's python3). With --sandbox ID: that sandbox's kernel through\n"
    "`gpubox attach ID --connection-file {connection_file}` (NAME gpubox-SANDBOXNAME, or gpubox-ID\n"
    "for a sandbox without a name).\n"
    "list shows gpubox's kernelspecs in those folders (and $JUPYTER_PATH's, /usr/share/jupyter/kernels) with\n"
    "the sandbox each one attaches to and its state; remove deletes one of them (only a gpubox kernelspec).\n";

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return name != "." && name != "..";
}

Status make_kernelspec_dirs(const std::string& path) {
  for (std::size_t at = 1; at != std::string::npos;) {
    at = path.find('/', at + 1);
    std::string so_far = path.substr(0, at);
    if (::mkdir(so_far.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::from_errno(errno, "cannot create '" + so_far + "'");
    }
  }
  return Status::ok();
}

std::string self_path() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "gpubox";
  self[n] = '\0';
  return self;
}

// Where kernelspecs may live: --prefix's first (host/kernelspecs.h).
std::vector<std::string> kernel_dirs(const Args& args) { return kernelspec_dirs(args.last("--prefix").value_or("")); }

int list_specs(const Args& args, const Global& global) {
  auto store = SandboxStore::open_default();
  nlohmann::json specs = nlohmann::json::array();
  for (const auto& spec : find_kernelspecs(kernel_dirs(args))) {
    std::string state = "-";
    if (!spec.sandbox.empty()) {
      auto record = store ? store->resolve(spec.sandbox) : Result<SandboxRecord>(store.status());
      state = record ? sandbox_state(*record) : "gone";
    }
    specs.push_back({{"name", spec.name}, {"dir", spec.dir}, {"sandbox", spec.sandbox.empty() ? nlohmann::json() : nlohmann::json(spec.sandbox)},
                     {"sandbox_state", state}});
  }
  if (global.json || args.flag("--json")) {
    std::cout << specs.dump() << "\n";
    return kExitOk;
  }
  std::printf("%-24s  %-12s  %-8s  %s\n", "NAME", "SANDBOX", "STATE", "DIR");
  for (const auto& spec : specs) {
    // Read back from kernel.json files and sandbox records: nothing in them acts on the terminal.
    std::printf("%-24s  %-12s  %-8s  %s\n", escape_for_terminal(spec["name"].get<std::string>()).c_str(),
                spec["sandbox"].is_null() ? "(standalone)" : escape_for_terminal(spec["sandbox"].get<std::string>()).c_str(),
                escape_for_terminal(spec["sandbox_state"].get<std::string>()).c_str(),
                escape_for_terminal(spec["dir"].get<std::string>()).c_str());
  }
  return kExitOk;
}

int remove_spec(const Args& args, const Global& global) {
  if (args.positional.size() != 2) return fail_usage("kernelspec", "remove: expected one kernelspec NAME");
  const std::string& name = args.positional[1];
  for (const auto& spec : find_kernelspecs(kernel_dirs(args))) {
    if (spec.name != name) continue;
    std::error_code error;
    std::filesystem::remove_all(spec.dir, error);
    if (error) return fail("kernelspec", "cannot remove '" + spec.dir + "': " + error.message(), kExitFailed);
    if (global.json || args.flag("--json")) {
      std::cout << nlohmann::json{{"removed", name}, {"dir", spec.dir}}.dump() << "\n";
    } else {
      std::printf("removed kernelspec %s from %s\n", escape_for_terminal(name).c_str(), escape_for_terminal(spec.dir).c_str());
    }
    return kExitOk;
  }
  return fail("kernelspec", "no gpubox kernelspec named '" + name + "' (`gpubox kernelspec list` shows them)", kExitUsage);
}

int install(const Args& args, const Global& global) {
  if (args.flag("--user") && args.last("--prefix")) {
    return fail_usage("kernelspec", "--user and --prefix: give one or neither");
  }
  std::string kernels;
  if (auto prefix = args.last("--prefix")) {
    if (prefix->empty() || (*prefix)[0] != '/') return fail_usage("kernelspec", "--prefix: expected an absolute path");
    kernels = *prefix + "/share/jupyter/kernels";
  } else if (args.flag("--user")) {
    const char* data = std::getenv("JUPYTER_DATA_DIR");
    const char* home = std::getenv("HOME");
    if (data && *data) {
      kernels = std::string(data) + "/kernels";
    } else if (home && *home) {
      kernels = std::string(home) + "/.local/share/jupyter/kernels";
    } else {
      return fail_usage("kernelspec", "--user: neither JUPYTER_DATA_DIR nor HOME is set");
    }
  } else {
    kernels = "/usr/local/share/jupyter/kernels";
  }

  nlohmann::json spec = {{"language", "python"}, {"interrupt_mode", "message"}, {"metadata", {{"debugger", false}}}};
  std::string name;
  if (auto sandbox = args.last("--sandbox")) {
    if (args.last("--python")) return fail_usage("kernelspec", "--python: the sandbox's config names its python");
    auto record = find_sandbox(*sandbox);
    if (!record) return fail("kernelspec", record.status(), exit_code_for(record.status()));
    name = "gpubox-" + (record->name.empty() ? record->id : record->name);
    spec["argv"] = {self_path(), "attach", record->id, "--connection-file", "{connection_file}"};
    spec["display_name"] = "Python 3 (gpubox sandbox " + (record->name.empty() ? record->id : record->name) + ")";
    // attach must find the same sandbox store, whatever environment the frontend has.
    if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state) spec["env"] = {{"XDG_STATE_HOME", state}};
  } else {
    name = "gpubox";
    spec["argv"] = {default_agent_path(), "kernel", "-f", "{connection_file}"};
    if (auto python = args.last("--python")) {
      if (python->empty()) return fail_usage("kernelspec", "--python: expected a path");
      spec["argv"].push_back("--python");
      spec["argv"].push_back(*python);
    }
    spec["display_name"] = "Python 3 (gpubox)";
  }
  if (auto given = args.last("--name")) name = *given;
  if (!valid_name(name)) {
    return fail_usage("kernelspec", "--name: '" + name + "' is not a kernel name (letters, digits, '-', '_', '.')");
  }
  std::string dir = kernels + "/" + name;
  if (Status made = make_kernelspec_dirs(dir); !made) return fail("kernelspec", made.message(), kExitFailed);
  std::string path = dir + "/kernel.json";
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << spec.dump(2) << "\n";
    if (!out.flush()) return fail("kernelspec", "cannot write '" + tmp + "'", kExitFailed);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail("kernelspec", Status::from_errno(errno, "cannot write '" + path + "'").message(), kExitFailed);
  }
  if (global.json) {
    std::printf("%s\n", nlohmann::json({{"name", name}, {"path", dir}, {"spec", spec}}).dump().c_str());
  } else {
    std::printf("installed kernelspec %s in %s\n", escape_for_terminal(name).c_str(), escape_for_terminal(dir).c_str());
  }
  return kExitOk;
}

}  // namespace

int run_kernelspec(const std::vector<std::string>& raw, const Global& global) {
  auto args = parse_args(raw, {"--prefix", "--sandbox", "--name", "--python"}, {"--user"});
  if (!args) return fail_usage("kernelspec", args.status());
  if (args->flag("--help")) return show_usage(kKernelspecUsage);
  std::string sub = args->positional.empty() ? "" : args->positional[0];
  if (sub == "list" && args->positional.size() == 1) return list_specs(*args, global);
  if (sub == "remove") return remove_spec(*args, global);
  if (sub == "install" && args->positional.size() == 1) return install(*args, global);
  return fail_usage("kernelspec", "expected the subcommand install, list or remove NAME");
}

}  // namespace gpubox::host::cli
