// `gpubox snapshot ID [--name N]`, `gpubox snapshots [--json]` and
// `gpubox snapshots rm NAME...`: snapshots of sandboxes (host/snapshot.h);
// `gpubox create --from-snapshot N` restores one.
#include <cstdio>
#include <ctime>
#include <iostream>
#include <optional>

#include "base/terminal_text.h"
#include "host/backends/registry.h"
#include "host/cli/cli.h"
#include "host/snapshot.h"
#include "host/sandboxes/state.h"
#include "host/sandboxes/snapshots.h"

namespace gpubox::host::cli {

int run_snapshot(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox snapshot ID|NAME [--name SNAPSHOT] [--json]\n"
      "  a container's file system (files, installed packages) committed as an image, or a local\n"
      "  sandbox's work dir and its root's upper layer (what it installed, changed or deleted outside\n"
      "  the work dir) archived (tar + zstd, sha256-checked), or a Modal sandbox's file system as a Modal\n"
      "  image (snapshot_filesystem; Volumes are not in it), with the sandbox's settings;\n"
      "  running processes are not kept. gpubox create --from-snapshot SNAPSHOT restores it.\n";
  auto args = parse_args(raw, {"--name"}, {});
  if (!args) return fail_usage("snapshot", args.status().message());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 1) return fail_usage("snapshot", "expected one sandbox id or name");
  auto store = SandboxStore::open_default();
  if (!store) return fail("snapshot", store.status().message(), kExitUsage);
  auto record = store->resolve(args->positional[0]);
  if (!record) return fail("snapshot", record.status().message(), exit_code_for(record.status()));
  if (sandbox_state(*record) == "creating") return fail("snapshot", "sandbox " + record->id + " is still being created", kExitUnreachable);
  auto snapshot = take_snapshot(*store, *record, args->last("--name").value_or(""));
  if (!snapshot) return fail("snapshot", snapshot.status().message(), exit_code_for(snapshot.status()));
  const Backend* backend = find_backend(snapshot->backend);
  std::string contents = backend ? backend->snapshot_contents(*snapshot) : snapshot->image;
  if (global.json || args->flag("--json")) {
    std::cout << snapshot->to_json().dump() << "\n";
  } else {
    std::printf("%s\n", escape_for_terminal(snapshot->name).c_str());
    std::fprintf(stderr, "gpubox snapshot: %s of %s (%s, %.1f MiB); running processes are not part of it\n",
                 escape_for_terminal(snapshot->name).c_str(), escape_for_terminal(record->id).c_str(),
                 escape_for_terminal(contents).c_str(),
                 static_cast<double>(snapshot->size_bytes) / 1048576.0);
  }
  return kExitOk;
}

int run_create_from_snapshot(const std::vector<std::string>& raw, const Global& global) {
  std::vector<std::string> args;
  std::optional<std::string> name;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == "--") {
      args.insert(args.end(), raw.begin() + static_cast<long>(i), raw.end());
      break;
    }
    if (raw[i] == "--from-snapshot") {
      if (i + 1 >= raw.size()) return fail("create", "--from-snapshot: expected a value", kExitUsage);
      name = raw[++i];
    } else if (raw[i].rfind("--from-snapshot=", 0) == 0) {
      name = raw[i].substr(16);
    } else {
      args.push_back(raw[i]);
    }
  }
  auto store = SandboxStore::open_default();
  if (!store) return fail("create", store.status().message(), kExitUsage);
  auto snapshot = find_snapshot(*store, name.value_or(""));
  if (!snapshot) return fail("create", "--from-snapshot: " + snapshot.status().message(), kExitUsage);
  std::vector<std::string> full = snapshot_create_args(*snapshot);
  full.insert(full.end(), args.begin(), args.end());
  return create_sandbox(full, global, &*snapshot);
}

int run_snapshots(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox snapshots [--json]          list the snapshots\n"
      "       gpubox snapshots rm SNAPSHOT...    remove snapshots (and their images)\n";
  auto args = parse_args(raw, {}, {});
  if (!args) return fail_usage("snapshots", args.status().message());
  if (args->flag("--help")) return show_usage(kUsage);
  auto store = SandboxStore::open_default();
  if (!store) return fail("snapshots", store.status().message(), kExitUsage);
  if (!args->positional.empty() && args->positional[0] == "rm") {
    if (args->positional.size() < 2) return fail_usage("snapshots", "rm: expected snapshot names");
    int code = kExitOk;
    for (size_t i = 1; i < args->positional.size(); ++i) {
      auto snapshot = find_snapshot(*store, args->positional[i]);
      Status removed = snapshot ? remove_snapshot(*store, *snapshot) : snapshot.status();
      if (!removed) code = std::max(code, fail("snapshots", removed.message(), exit_code_for(removed)));
    }
    return code;
  }
  if (!args->positional.empty()) return fail_usage("snapshots", "unexpected argument '" + args->positional[0] + "'");
  auto snapshots = list_snapshots(*store);
  if (global.json || args->flag("--json")) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& snapshot : snapshots) list.push_back(snapshot.to_json());
    std::cout << list.dump() << "\n";
    return kExitOk;
  }
  std::printf("%-28s  %-7s  %-7s  %-12s  %10s  %s\n", "NAME", "KIND", "BACKEND", "SOURCE", "SIZE", "CREATED (UTC)");
  for (const auto& snapshot : snapshots) {
    char when[32];
    std::time_t at = static_cast<std::time_t>(snapshot.created_at);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::gmtime(&at));
    // Read back from records on disk: nothing in them acts on the terminal.
    std::printf("%-28s  %-7s  %-7s  %-12s  %8.1f M  %s\n", escape_for_terminal(snapshot.name).c_str(),
                escape_for_terminal(snapshot.kind).c_str(), escape_for_terminal(snapshot.backend).c_str(),
                escape_for_terminal(snapshot.source_id).c_str(), static_cast<double>(snapshot.size_bytes) / 1048576.0, when);
  }
  return kExitOk;
}

}  // namespace gpubox::host::cli
