// `gpubox adopt MODAL_ID --keys FILE [--server-key KEY] [--name NAME] [--app NAME]`: a
// Modal sandbox created elsewhere (another host, or this one before its store was lost)
// becomes a record of this store, reached with the keys it was created with.
#include <fstream>
#include <iostream>

#include "host/cli/cli.h"
#include "host/backends/registry.h"

namespace gpubox::host::cli {

int run_adopt(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox adopt MODAL_ID --keys FILE [--server-key KEY] [--name NAME] [--app NAME] [--json]\n"
      "  FILE: the client's key pair as gpubox keeps it (STORE/sandboxes/ID/client_keys.json:\n"
      "  {\"public_key\", \"secret_key\"}), with the agent's public key as \"server_key\" in it or as\n"
      "  --server-key (the record's spec.server_key). Prints the new sandbox id.\n";
  auto args = parse_args(raw, {"--keys", "--server-key", "--name", "--app"}, {});
  if (!args) return fail_usage("adopt", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 1 || args->positional[0].rfind("sb-", 0) != 0) {
    return fail_usage("adopt", "expected one Modal sandbox id (sb-...)");
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
  auto modal = backend_named("modal");
  if (!modal) return fail("adopt", modal.status(), kExitUsage);
  auto adopted = (*modal)->adopt(*store, {args->positional[0], client, server_key, args->last("--name").value_or(""),
                                          args->last("--app").value_or("gpubox")});
  if (!adopted) return fail("adopt", adopted.status(), exit_code_for(adopted.status()));
  if (global.json || args->flag("--json")) {
    std::cout << nlohmann::json{{"id", adopted->id}, {"name", adopted->name}, {"backend", "modal"},
                                {"endpoint", adopted->endpoint}, {"modal_id", args->positional[0]}}
                     .dump()
              << "\n";
  } else {
    std::cout << adopted->id << "\n";
  }
  return kExitOk;
}

}  // namespace gpubox::host::cli
