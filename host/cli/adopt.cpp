// `gpubox adopt REMOTE_ID --keys FILE [--backend NAME] [--server-key KEY] [--name NAME] [--app NAME]`:
// a sandbox of a control plane (Modal's, a Kubernetes cluster's) created elsewhere (another host,
// or this one before its store was lost) becomes a record of this store, reached with the keys
// it was created with.
#include <fstream>
#include <iostream>

#include "host/cli/cli.h"
#include "host/backends/registry.h"

namespace gpubox::host::cli {

namespace {

// The control plane a remote id belongs to: --backend's, else the one whose ids begin as it does.
Result<const Backend*> plane_of(const Args& args) {
  if (auto name = args.last("--backend")) return control_plane_backend(*name);
  for (const Backend* backend : control_plane_backends()) {
    const ControlPlane* plane = backend->control_plane();
    if (plane && !args.positional.empty() && args.positional[0].rfind(plane->id_prefix, 0) == 0) return backend;
  }
  return control_plane_backend();
}

}  // namespace

std::optional<HelpLine> adopt_help(const std::vector<const Backend*>& backends) {
  std::string planes, docs;
  for (const Backend* backend : backends) {
    if (const ControlPlane* plane = backend->control_plane()) {
      planes += (planes.empty() ? "" : " or ") + plane->name;
      docs += (docs.empty() ? "" : ", ") + plane->doc;
    }
  }
  if (planes.empty()) return std::nullopt;
  return HelpLine{"adopt REMOTE_ID --keys FILE", "record a " + planes + " sandbox created elsewhere (gpubox adopt --help, " + docs + ")"};
}

int run_adopt(const std::vector<std::string>& raw, const Global& global) {
  std::string ids;
  for (const Backend* backend : control_plane_backends()) {
    if (const ControlPlane* plane = backend->control_plane()) ids += (ids.empty() ? "" : ", ") + plane->name + "'s " + plane->id_prefix + "...";
  }
  const std::string kUsage =
      "usage: gpubox adopt REMOTE_ID --keys FILE [--backend NAME] [--server-key KEY] [--name NAME] [--app NAME] [--json]\n"
      "  REMOTE_ID: " + ids + " (--backend picks the control plane; else the id's beginning does).\n"
      "  --app: the Modal app, or the Kubernetes namespace (--namespace too; default: default).\n"
      "  FILE: the client's key pair as gpubox keeps it (STORE/sandboxes/ID/client_keys.json:\n"
      "  {\"public_key\", \"secret_key\"}), with the agent's public key as \"server_key\" in it or as\n"
      "  --server-key (the record's spec.server_key). Prints the new sandbox id.\n";
  auto args = parse_args(raw, {"--keys", "--server-key", "--name", "--app", "--namespace", "--backend"}, {});
  if (!args) return fail_usage("adopt", args.status());
  if (args->flag("--help")) return show_usage(kUsage.c_str());
  auto backend = plane_of(*args);
  if (!backend) return fail("adopt", backend.status(), kExitUsage);
  const ControlPlane& plane = *(*backend)->control_plane();
  if (args->positional.size() != 1 || args->positional[0].rfind(plane.id_prefix, 0) != 0) {
    return fail_usage("adopt", "expected one " + plane.name + " sandbox id (" + plane.id_prefix + "...)");
  }
  auto file = args->last("--keys");
  if (!file) return fail_usage("adopt", "--keys FILE is required (the client's CURVE key pair)");
  std::ifstream in(*file);
  auto keys = nlohmann::json::parse(in, nullptr, false);
  auto text = [&](const char* key) {
    return keys.is_object() && keys.value(key, nlohmann::json()).is_string() ? keys[key].get<std::string>() : "";
  };
  rpc::KeyPair client{text("public_key"), text("secret_key")};
  std::string server_key = args->last("--server-key").value_or(text("server_key"));
  if (!in || client.public_key.size() != 40 || client.secret_key.size() != 40) {
    return fail("adopt", "--keys '" + *file + "': expected {\"public_key\", \"secret_key\"} (40 Z85 characters each)", kExitUsage);
  }
  if (server_key.size() != 40) return fail("adopt", "the agent's public key (--server-key, or server_key in FILE) is missing", kExitUsage);
  auto store = SandboxStore::open_default();
  if (!store) return fail("adopt", store.status(), kExitUsage);
  auto adopted = (*backend)->adopt(*store, {args->positional[0], client, server_key, args->last("--name").value_or(""),
                                            args->last("--namespace").value_or(args->last("--app").value_or(""))});
  if (!adopted) return fail("adopt", adopted.status(), exit_code_for(adopted.status()));
  if (global.json || args->flag("--json")) {
    std::cout << nlohmann::json{{"id", adopted->id}, {"name", adopted->name}, {"backend", (*backend)->name()},
                                {"endpoint", adopted->endpoint}, {plane.id_key, args->positional[0]}}
                     .dump()
              << "\n";
  } else {
    std::cout << adopted->id << "\n";
  }
  return kExitOk;
}

}  // namespace gpubox::host::cli
