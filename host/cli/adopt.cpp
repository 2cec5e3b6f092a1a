// `gpubox adopt REMOTE_ID --keys FILE [--server-key KEY] [--name NAME] [--app NAME]`: a
// sandbox of a control plane (control_plane_backend()) created elsewhere (another host, or
// this one before its store was lost) becomes a record of this store, reached with the keys
// it was created with.
#include <cctype>
#include <fstream>
#include <iostream>

#include "host/cli/cli.h"
#include "host/backends/registry.h"

namespace gpubox::host::cli {

namespace {

// "remote_id" -> "REMOTE_ID": a key as the name of an argument.
std::string upper(std::string key) {
  for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return key;
}

}  // namespace

std::optional<HelpLine> adopt_help(const std::vector<const Backend*>& backends) {
  for (const Backend* backend : backends) {
    if (const ControlPlane* plane = backend->control_plane()) {
      return HelpLine{"adopt " + upper(plane->id_key) + " --keys FILE",
                      "record a " + plane->name + " sandbox created elsewhere (gpubox adopt --help, " + plane->doc + ")"};
    }
  }
  return std::nullopt;
}

int run_adopt(const std::vector<std::string>& raw, const Global& global) {
  auto backend = control_plane_backend();
  if (!backend) return fail("adopt", backend.status(), kExitUsage);
  const ControlPlane& plane = *(*backend)->control_plane();
  const std::string kUsage =
      "usage: gpubox adopt " + upper(plane.id_key) + " --keys FILE [--server-key KEY] [--name NAME] [--app NAME] [--json]\n"
      "  FILE: the client's key pair as gpubox keeps it (STORE/sandboxes/ID/client_keys.json:\n"
      "  {\"public_key\", \"secret_key\"}), with the agent's public key as \"server_key\" in it or as\n"
      "  --server-key (the record's spec.server_key). Prints the new sandbox id.\n";
  auto args = parse_args(raw, {"--keys", "--server-key", "--name", "--app"}, {});
  if (!args) return fail_usage("adopt", args.status());
  if (args->flag("--help")) return show_usage(kUsage.c_str());
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
                                            args->last("--app").value_or("gpubox")});
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
