#include "host/rpc_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>

#include "host/sandbox_keys.h"
#include "host/sandbox_store.h"
#include "rpc/base64.h"
#include "rpc/client.h"

namespace gpubox::host {
namespace {

constexpr char kUsage[] =
    "usage: gpubox rpc ID|NAME|ENDPOINT METHOD [JSON] [--server-key Z85] [--client-keys FILE] [--timeout S]\n"
    "  ID|NAME       a sandbox that `gpubox create` made\n"
    "  ENDPOINT      ipc:///PATH or tcp://HOST:PORT (tcp needs --server-key and --client-keys)\n"
    "  JSON          the params, a JSON object (default {})\n"
    "  --client-keys a JSON file {\"public_key\": Z85, \"secret_key\": Z85} (gpubox-agent keygen writes one)\n"
    "  --timeout S   the request's deadline (default: none; unreachable agents are detected after 10 s)\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "gpubox rpc: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// Bytes become text when they are UTF-8, else {"base64": …}: JSON has no bytes.
nlohmann::json printable(const nlohmann::json& value) {
  if (value.is_binary()) {
    std::string bytes(value.get_binary().begin(), value.get_binary().end());
    try {
      (void)nlohmann::json(bytes).dump();  // throws on invalid UTF-8
      return bytes;
    } catch (const nlohmann::json::exception&) {
      return nlohmann::json{{"base64", base64_encode(bytes)}};
    }
  }
  if (value.is_object()) {
    nlohmann::json copy = nlohmann::json::object();
    for (const auto& [key, item] : value.items()) copy[key] = printable(item);
    return copy;
  }
  if (value.is_array()) {
    nlohmann::json copy = nlohmann::json::array();
    for (const auto& item : value) copy.push_back(printable(item));
    return copy;
  }
  return value;
}

}  // namespace

int run_rpc_command(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  rpc::ClientOptions client;
  double timeout_s = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= args.size()) return false;
      *out = args[++i];
      return true;
    };
    std::string text;
    if (arg == "--server-key") {
      if (!value(&client.server_public_key)) return usage_error("--server-key: expected a value");
    } else if (arg == "--client-keys") {
      if (!value(&text)) return usage_error("--client-keys: expected a file");
      std::ifstream in(text);
      nlohmann::json keys = nlohmann::json::parse(in, nullptr, false);
      if (!in || !keys.is_object() || !keys.value("public_key", nlohmann::json()).is_string() ||
          !keys.value("secret_key", nlohmann::json()).is_string()) {
        return usage_error("--client-keys: '" + text + "' is not a JSON file with public_key and secret_key");
      }
      client.client_keys = {keys["public_key"], keys["secret_key"]};
    } else if (arg == "--timeout") {
      if (!value(&text)) return usage_error("--timeout: expected seconds");
      try {
        timeout_s = std::stod(text);
      } catch (const std::exception&) {
        return usage_error("--timeout: expected seconds, got \"" + text + "\"");
      }
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--json") {
      // The output is JSON already.
    } else if (arg.rfind("--", 0) == 0) {
      return usage_error(arg + ": unknown option");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 2 || positional.size() > 3) return usage_error("expected ID|NAME|ENDPOINT METHOD [JSON]");
  nlohmann::json params = nlohmann::json::object();
  if (positional.size() == 3) {
    params = nlohmann::json::parse(positional[2], nullptr, false);
    if (!params.is_object()) return usage_error("JSON: expected a JSON object, got '" + positional[2] + "'");
  }
  client.endpoint = positional[0];
  if (client.endpoint.find("://") == std::string::npos) {
    // A sandbox of the store, by id or name.
    auto store = SandboxStore::open_default();
    auto record = store ? store->resolve(client.endpoint) : Result<SandboxRecord>(store.status());
    if (!record) {
      std::fprintf(stderr, "gpubox rpc: %s\n", record.status().message().c_str());
      return 2;
    }
    if (record->state() != "running") {
      std::fprintf(stderr, "gpubox rpc: sandbox %s is %s\n", record->id.c_str(), record->state().c_str());
      return 3;
    }
    auto options = client_options_for(*record);
    if (!options) {
      std::fprintf(stderr, "gpubox rpc: %s\n", options.status().message().c_str());
      return 3;
    }
    // Keys given on the command line still win.
    if (client.server_public_key.empty()) client.server_public_key = options->server_public_key;
    if (client.client_keys.public_key.empty()) client.client_keys = options->client_keys;
    client.endpoint = options->endpoint;
  }
  auto connected = rpc::Client::connect(client);
  if (!connected) {
    std::fprintf(stderr, "gpubox rpc: %s\n", connected.status().to_string().c_str());
    return connected.status().code() == ErrorCode::invalid_request ? 2 : 3;
  }
  rpc::CallOptions options;
  options.timeout_ms = static_cast<std::uint64_t>(timeout_s * 1000);
  // A method that streams (proc.spawn, kernel.execute, fs.read of a large file…):
  // each DATA item is printed as one JSON line as it arrives, its attachments as
  // "attachments" (text, or {"base64": …}), then the RESULT.
  auto stream = (*connected)->stream(positional[1], params, options);
  if (!stream) {
    std::fprintf(stderr, "gpubox rpc: %s\n", stream.status().to_string().c_str());
    return 1;
  }
  while (true) {
    auto item = (*stream)->next();
    if (!item || !*item) break;
    nlohmann::json line = printable((*item)->body);
    if (!(*item)->attachments.empty()) {
      nlohmann::json attachments = nlohmann::json::array();
      for (const auto& part : (*item)->attachments) {
        const auto* bytes = static_cast<const std::uint8_t*>(part.data());
        attachments.push_back(printable(nlohmann::json::binary({bytes, bytes + part.size()})));
      }
      line["attachments"] = std::move(attachments);
    }
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  const auto& result = (*stream)->result();
  if (!result) {
    std::fprintf(stderr, "gpubox rpc: %s\n", result.status().to_string().c_str());
    return 1;
  }
  std::cout << printable(result.value()).dump(2) << "\n";
  return 0;
}

}  // namespace gpubox::host
