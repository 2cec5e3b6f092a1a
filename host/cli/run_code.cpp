// `gpubox run-code ID [CODE | -]`: runs Python in the sandbox's Jupyter
// kernel (kernel.execute), printing its streams as they arrive and its
// results, saving image outputs to files; exit 1 when the cell raised.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "host/cli/cli.h"
#include "host/process_identity.h"
#include "base/base64.h"
#include "base/fd.h"
#include "rpc/client.h"

namespace gpubox::host::cli {
namespace {

using nlohmann::json;

constexpr char kRunCodeUsage[] =
    "usage: gpubox run-code ID|NAME [CODE | -] [--out-dir DIR] [--timeout S] [--json]\n"
    "  runs CODE (or stdin, with - or no CODE) in the sandbox's Jupyter kernel: streams print as they arrive,\n"
    "  results print as text, images (png, jpeg, svg) are saved in --out-dir (default: .) and their paths printed.\n"
    "  exit codes: 0 ok, 1 the cell raised (traceback on stderr) or the kernel restarted, 2 usage, 3 unreachable.\n";

volatile std::sig_atomic_t g_interrupted = 0;

constexpr std::size_t kInlineCodeMax = 256 << 10;  // larger cells travel as the CALL's attachment
constexpr std::size_t kMaxCode = 32 << 20;         // well below the agent's 64 MiB frame limit

bool write_all(int fd, const std::string& text) { return write_fully(fd, text.data(), text.size()) == 0; }

// Tracebacks from IPython carry ANSI colours; a file or a pipe gets them without.
std::string strip_ansi(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      size_t j = i + 2;
      while (j < text.size() && !(text[j] >= '@' && text[j] <= '~')) ++j;
      i = j;
      continue;
    }
    out += text[i];
  }
  return out;
}

// What one cell produced, for --json and for choosing file names.
class CellPrinter {
 public:
  CellPrinter(std::string out_dir, bool json_mode) : out_dir_(std::move(out_dir)), json_(json_mode) {}

  // One DATA item of kernel.execute; false when a file could not be written.
  Status handle(const json& item) {
    if (item.contains("stream")) {
      std::string name = item.value("stream", "stdout");
      std::string text = item.value("text", "");
      if (json_) {
        (name == "stderr" ? stderr_ : stdout_) += text;
      } else {
        write_all(name == "stderr" ? STDERR_FILENO : STDOUT_FILENO, text);
      }
      return Status::ok();
    }
    std::string kind = item.value("kind", "");
    if (kind == "display" || kind == "execute_result") {
      const json& data = item.contains("data") && item["data"].is_object() ? item["data"] : json::object();
      // --json keeps every MIME type the output offers (text/html, text/markdown, …).
      json output = {{"type", kind == "display" ? "display_data" : "execute_result"}, {"data", data},
                     {"metadata", item.value("metadata", json::object())}};
      for (const auto& [mime, ext] : {std::pair{"image/png", ".png"}, {"image/jpeg", ".jpg"}, {"image/svg+xml", ".svg"}}) {
        if (!data.contains(mime)) continue;
        auto saved = save_image(data[mime], mime, ext);
        if (!saved) return saved.status();
        images_.push_back(*saved);
        output["path"] = *saved;
        outputs_.push_back(std::move(output));
        if (!json_) write_all(STDOUT_FILENO, "[image saved: " + *saved + "]\n");
        return Status::ok();  // one file per output: its richest image form
      }
      outputs_.push_back(std::move(output));
      if (data.contains("text/plain") && data["text/plain"].is_string()) {
        std::string text = data["text/plain"].get<std::string>();
        if (json_) {
          results_.push_back(text);
        } else {
          write_all(STDOUT_FILENO, text + "\n");
        }
      }
      return Status::ok();
    }
    if (kind == "error") {
      error_ = item;
      if (!json_) print_traceback(item);
    }
    return Status::ok();
  }

  // The result of kernel.execute: prints what no DATA item said (a kernel restart); the exit code.
  int finish(const json& result) {
    bool ok = result.value("status", "error") == "ok";
    if (!ok && !error_) {
      error_ = result;
      if (!json_) print_traceback(result);
    }
    if (result.value("timed_out", false) && !json_) {
      write_all(STDERR_FILENO, "gpubox run-code: the cell ran past --timeout and was interrupted\n");
    }
    if (json_) {
      json out = {{"status", ok ? "ok" : "error"}, {"stdout", stdout_}, {"stderr", stderr_},
                  {"results", results_},         {"images", images_},        {"outputs", outputs_}};
      if (result.contains("execution_count")) out["execution_count"] = result["execution_count"];
      for (const char* key : {"died", "timed_out"}) {
        if (result.contains(key)) out[key] = result[key];
      }
      if (error_) {
        json traceback = json::array();
        for (const auto& line : error_->value("traceback", json::array())) {
          if (line.is_string()) traceback.push_back(strip_ansi(line.get<std::string>()));
        }
        out["error"] = {{"ename", error_->value("ename", "")}, {"evalue", error_->value("evalue", "")},
                        {"traceback", traceback}};
      }
      std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
    return ok ? kExitOk : kExitFailed;
  }

 private:
  void print_traceback(const json& error) {
    bool colour = ::isatty(STDERR_FILENO);
    std::string text;
    const json& traceback = error.contains("traceback") && error["traceback"].is_array() ? error["traceback"] : json::array();
    for (const auto& line : traceback) {
      if (line.is_string()) text += (colour ? line.get<std::string>() : strip_ansi(line.get<std::string>())) + "\n";
    }
    if (text.empty()) text = error.value("ename", "Error") + ": " + error.value("evalue", "") + "\n";
    write_all(STDERR_FILENO, text);
  }

  // Writes one image to a new file DIR/output-N.EXT (never replacing a file); its path.
  Result<std::string> save_image(const json& value, const std::string& mime, const std::string& ext) {
    if (!value.is_string()) return Status(ErrorCode::invalid_request, "the kernel sent " + mime + " that is not a string");
    std::string bytes = value.get<std::string>();
    if (mime != "image/svg+xml") {
      auto decoded = base64_decode(bytes);
      if (!decoded) return Status(ErrorCode::invalid_request, "the kernel sent " + mime + " that is not base64");
      bytes = std::move(*decoded);
    }
    for (int n = static_cast<int>(images_.size()) + 1;; ++n) {
      std::string path = out_dir_ + "/output-" + std::to_string(n) + ext;
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0 && errno == EEXIST) continue;
      if (fd < 0) return Status::from_errno(errno, "cannot create '" + path + "'");
      bool written = write_all(fd, bytes);
      ::close(fd);
      if (!written) return Status(ErrorCode::internal, "cannot write '" + path + "'");
      return path;
    }
  }

  std::string out_dir_;
  bool json_;
  std::string stdout_, stderr_;
  std::vector<std::string> results_;
  std::vector<std::string> images_;
  json outputs_ = json::array();  // every display and result, whole, in order (--json)
  std::optional<json> error_;
};

// Runs kernel.execute to its end, handing each DATA item to the printer as it
// arrives. Waits in slices so that an agent that dies meanwhile is noticed and
// a Ctrl-C becomes kernel.interrupt. The outer Result fails when the agent
// could not be followed; the inner one is the request's RESULT or ERROR.
Result<Result<json>> run_cell(rpc::Client& client, const ProcessIdentity& agent, const json& params, CellPrinter& printer) {
  // A cell too large for the body (the agent's limit is 1 MiB) goes as an attachment.
  json body = params;
  std::vector<zmq::message_t> attachments;
  const std::string& code = params["code"].get_ref<const std::string&>();
  if (code.size() > kInlineCodeMax) {
    attachments.emplace_back(code.data(), code.size());
    body.erase("code");
  }
  auto opened = client.stream("kernel.execute", body, {.attachments = &attachments});
  if (!opened) return opened.status();
  rpc::Stream& cell = **opened;
  while (true) {
    if (g_interrupted) {
      g_interrupted = 0;
      (void)client.call("kernel.interrupt", json::object(), {.wait = std::chrono::milliseconds(5000)});
    }
    Result<std::optional<rpc::Incoming>> got = std::optional<rpc::Incoming>();
    try {
      got = cell.next_within(std::chrono::milliseconds(200));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return Status(ErrorCode::unavailable, std::string("receiving: ") + e.what());
    }
    if (!got) return got.status();
    if (got->has_value()) {
      if (Status handled = printer.handle((*got)->body); !handled) return Result<json>(handled);
      continue;
    }
    if (cell.ended()) return cell.result();
    // pid 0: the agent is no process of this host (a control plane's sandbox).
    if (agent.pid > 0 && !process_alive(agent)) return Status(ErrorCode::unavailable, "the sandbox's agent ended while the cell ran");
  }
}

}  // namespace

int run_run_code(const std::vector<std::string>& raw, const Global& global) {
  auto args = parse_args(raw, {"--out-dir", "--timeout"}, {});
  if (!args) return fail_usage("run-code", args.status());
  if (args->flag("--help")) return show_usage(kRunCodeUsage);
  if (args->positional.empty() || args->positional.size() > 2 || !args->command.empty()) {
    return fail_usage("run-code", "expected a sandbox id or name and, optionally, CODE or -");
  }
  bool json_mode = global.json || args->flag("--json");
  std::string code;
  if (args->positional.size() == 1 || args->positional[1] == "-") {
    if (::isatty(STDIN_FILENO)) return fail_usage("run-code", "no CODE given and stdin is a terminal (give CODE, or pipe it with -)");
    char buffer[65536];
    while (true) {
      ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail("run-code", std::string("cannot read stdin: ") + std::strerror(errno), kExitUsage);
      if (n == 0) break;
      code.append(buffer, static_cast<size_t>(n));
    }
  } else {
    code = args->positional[1];
  }
  if (code.size() > kMaxCode) {
    return fail("run-code", "the code is " + std::to_string(code.size() >> 20) +
                                " MiB, more than a cell can carry (32 MiB): put the data in a file (`gpubox put`) and read it "
                                "from the cell",
                kExitUsage);
  }
  json params = {{"code", code}};
  if (auto timeout = args->last("--timeout")) {
    auto seconds = parse_number(*timeout, 0.001, 30 * 86400);
    if (!seconds) return fail_usage("run-code", "--timeout: expected seconds, got '" + *timeout + "'");
    params["timeout_s"] = *seconds;
  }
  std::string out_dir = args->last("--out-dir").value_or(".");
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error || !std::filesystem::is_directory(out_dir)) {
    return fail_usage("run-code", "--out-dir: '" + out_dir + "' is not a directory that can be created");
  }

  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("run-code", record.status(), exit_code_for(record.status()));
  auto client = connect_sandbox(*record);
  if (!client) return fail("run-code", client.status(), kExitUnreachable);

  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction interrupt {};
  interrupt.sa_handler = [](int) { g_interrupted = 1; };
  ::sigaction(SIGINT, &interrupt, nullptr);

  CellPrinter printer(out_dir, json_mode);
  auto ran = run_cell(**client, record->agent, params, printer);
  if (!ran) {
    int exit_code = ran.status().code() == ErrorCode::unavailable ? kExitUnreachable : kExitFailed;
    return fail("run-code", ran.status(), exit_code);
  }
  if (!ran->is_ok()) return fail("run-code", ran->status().message(), kExitFailed);
  return printer.finish(ran->value());
}

}  // namespace gpubox::host::cli
