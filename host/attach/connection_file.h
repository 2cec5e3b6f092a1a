// Jupyter connection files (jupyter_client's JSON format): where a kernel's
// five sockets listen and the key its messages are signed with. Any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpubox::host {

// One kernel's connection: its address, its five ports and its key.
struct ConnectionInfo {
  std::string ip = "127.0.0.1";
  int shell_port = 0;  // 0: any free port (when attach binds its own)
  int iopub_port = 0;
  int stdin_port = 0;
  int control_port = 0;
  int hb_port = 0;
  std::string key;  // empty: messages are not signed
  std::string signature_scheme = "hmac-sha256";
  std::string kernel_name;
};

// Parses a connection file's text. invalid_request naming the field: not
// JSON, transport other than tcp, an ip that is not a loopback address
// (attach serves this machine only), a port outside 1–65535, a signature
// scheme other than hmac-sha256.
Result<ConnectionInfo> parse_connection_file(std::string_view text);
// Reads and parses path; not_found / permission_denied when it cannot be read.
Result<ConnectionInfo> read_connection_file(const std::string& path);
// Writes path (mode 0600, through a temp file and a rename).
Status write_connection_file(const std::string& path, const ConnectionInfo& info);
nlohmann::json connection_json(const ConnectionInfo& info);
// 32 random bytes as hex, for a fresh key.
Result<std::string> random_hex_key();

}  // namespace gpubox::host
