// `gpubox rpc ID|ENDPOINT METHOD [JSON | -]`: one RPC call, its result printed as JSON.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "host/cli/cli.h"
#include "base/base64.h"
#include "rpc/client.h"

namespace gpubox::host::cli {
namespace {

constexpr char kRpcUsage[] =
    "usage: gpubox rpc ID|NAME|ENDPOINT METHOD [JSON | -] [--server-key Z85] [--client-keys FILE] [--timeout S]\n"
    "  ID|NAME       a sandbox that `gpubox create` made\n"
    "  ENDPOINT      ipc:///PATH or tcp://HOST:PORT (tcp needs --server-key and --client-keys)\n"
    "  JSON          the params, a JSON object (default {}); - reads it from stdin\n"
    "  --client-keys a JSON file {\"public_key\": Z85, \"secret_key\": Z85} (gpubox-agent keygen writes one)\n"
    "  --timeout S   the request's deadline (default: none; unreachable agents are detected after 10 s)\n";

int rpc_usage_error(const std::string& message) { return fail_usage("rpc", message); }

// Binary data longer than this is not dumped onto a terminal.
constexpr std::size_t kTerminalBinaryBytes = 64;

// Bytes become text when they are UTF-8, else {"base64": …}: JSON has no bytes.
// On a terminal, binary data (a tensor's bytes, say) becomes {"bytes": N} and a
// note: pipe stdout to get it.
nlohmann::json printable(const nlohmann::json& value, bool terminal) {
  if (value.is_binary()) {
    std::string bytes(value.get_binary().begin(), value.get_binary().end());
    try {
      (void)nlohmann::json(bytes).dump();  // throws on invalid UTF-8
      return bytes;
    } catch (const nlohmann::json::exception&) {
      if (terminal && bytes.size() > kTerminalBinaryBytes) {
        return nlohmann::json{{"bytes", bytes.size()}, {"not_shown", "binary; pipe stdout to get it as base64"}};
      }
      return nlohmann::json{{"base64", base64_encode(bytes)}};
    }
  }
  if (value.is_object()) {
    nlohmann::json copy = nlohmann::json::object();
    for (const auto& [key, item] : value.items()) copy[key] = printable(item, terminal);
    return copy;
  }
  if (value.is_array()) {
    nlohmann::json copy = nlohmann::json::array();
    for (const auto& item : value) copy.push_back(printable(item, terminal));
    return copy;
  }
  return value;
}

}  // namespace

int run_rpc(const std::vector<std::string>& args, const Global&) {
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
      if (!value(&client.server_public_key)) return rpc_usage_error("--server-key: expected a value");
    } else if (arg == "--client-keys") {
      if (!value(&text)) return rpc_usage_error("--client-keys: expected a file");
      std::ifstream in(text);
      nlohmann::json keys = nlohmann::json::parse(in, nullptr, false);
      if (!in || !keys.is_object() || !keys.value("public_key", nlohmann::json()).is_string() ||
          !keys.value("secret_key", nlohmann::json()).is_string()) {
        return rpc_usage_error("--client-keys: '" + text + "' is not a JSON file with public_key and secret_key");
      }
      client.client_keys = {keys["public_key"], keys["secret_key"]};
    } else if (arg == "--timeout") {
      if (!value(&text)) return rpc_usage_error("--timeout: expected seconds");
      try {
        timeout_s = std::stod(text);
      } catch (const std::exception&) {
        return rpc_usage_error("--timeout: expected seconds, got \"" + text + "\"");
      }
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kRpcUsage, stdout);
      return 0;
    } else if (arg == "--json") {
      // The output is JSON already.
    } else if (arg.rfind("--", 0) == 0) {
      return rpc_usage_error(arg + ": unknown option");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 2 || positional.size() > 3) return rpc_usage_error("expected ID|NAME|ENDPOINT METHOD [JSON]");
  nlohmann::json params = nlohmann::json::object();
  if (positional.size() == 3) {
    std::string text = positional[2];
    if (text == "-") {
      if (::isatty(STDIN_FILENO)) return rpc_usage_error("JSON: - reads the params from stdin, which is a terminal");
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    params = nlohmann::json::parse(text, nullptr, false);
    if (!params.is_object()) {
      return rpc_usage_error("JSON: expected a JSON object, got '" + (text.size() > 200 ? text.substr(0, 200) + "..." : text) + "'");
    }
  }
  client.endpoint = positional[0];
  if (client.endpoint.rfind("tcp://", 0) == 0 && client.server_public_key.empty()) {
    return rpc_usage_error("a tcp:// endpoint needs --server-key Z85 (the agent's public key, from `gpubox-agent keygen`) and "
                       "--client-keys FILE (a key pair the agent's rpc.authorized_keys lists)");
  }
  std::unique_ptr<rpc::Client> connected;
  if (client.endpoint.find("://") == std::string::npos) {
    // A sandbox of the store, by id or name.
    auto record = find_sandbox(client.endpoint);
    if (!record) return fail("rpc", record.status(), kExitUsage);
    auto reachable = connect_sandbox(*record);  // says how a dead sandbox ended
    if (!reachable) return fail("rpc", reachable.status(), kExitUnreachable);
    connected = std::move(*reachable);
  } else {
    auto reached = rpc::Client::connect(client);
    if (!reached) {
      return fail("rpc", reached.status(), reached.status().code() == ErrorCode::invalid_request ? kExitUsage : kExitUnreachable);
    }
    connected = std::move(*reached);
  }
  rpc::CallOptions options;
  options.timeout_ms = static_cast<std::uint64_t>(timeout_s * 1000);
  // A method that streams (proc.spawn, kernel.execute, fs.read of a large file…):
  // each DATA item is printed as one JSON line as it arrives, its attachments as
  // "attachments" (text, or {"base64": …}), then the RESULT.
  bool terminal = ::isatty(STDOUT_FILENO) != 0;
  auto stream = connected->stream(positional[1], params, options);
  if (!stream) return fail("rpc", stream.status().to_string(), kExitFailed);
  while (true) {
    auto item = (*stream)->next();
    if (!item || !*item) break;
    nlohmann::json line = printable((*item)->body, terminal);
    if (!(*item)->attachments.empty()) {
      nlohmann::json attachments = nlohmann::json::array();
      for (const auto& part : (*item)->attachments) {
        const auto* bytes = static_cast<const std::uint8_t*>(part.data());
        attachments.push_back(printable(nlohmann::json::binary({bytes, bytes + part.size()}), terminal));
      }
      line["attachments"] = std::move(attachments);
    }
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  const auto& result = (*stream)->result();
  if (!result) return fail("rpc", result.status().to_string(), kExitFailed);
  std::cout << printable(result.value(), terminal).dump(2) << "\n";
  return kExitOk;
}

}  // namespace gpubox::host::cli
