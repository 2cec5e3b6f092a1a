#include "host/mcp/notebook.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/fd.h"

namespace gpubox::mcp {

using nlohmann::json;

json source_lines(const std::string& text) {
  json lines = json::array();
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t newline = text.find('\n', start);
    std::size_t end = newline == std::string::npos ? text.size() : newline + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

void CellOutputs::add(const json& item) {
  if (item.contains("stream")) {
    std::string name = item.value("stream", "stdout");
    std::string text = item.value("text", "");
    // Consecutive writes to one stream are one output, as Jupyter saves them.
    if (!outputs_.empty() && outputs_.back().value("output_type", "") == "stream" && outputs_.back().value("name", "") == name) {
      json& last = outputs_.back()["text"];
      std::string joined;
      for (const auto& line : last) joined += line.get<std::string>();
      last = source_lines(joined + text);
      return;
    }
    outputs_.push_back({{"output_type", "stream"}, {"name", name}, {"text", source_lines(text)}});
    return;
  }
  std::string kind = item.value("kind", "");
  json data = item.contains("data") && item["data"].is_object() ? item["data"] : json::object();
  json metadata = item.contains("metadata") && item["metadata"].is_object() ? item["metadata"] : json::object();
  if (kind == "display") {
    outputs_.push_back({{"output_type", "display_data"}, {"data", data}, {"metadata", metadata}});
  } else if (kind == "execute_result") {
    outputs_.push_back({{"output_type", "execute_result"},
                        {"data", data},
                        {"metadata", metadata},
                        {"execution_count", item.contains("execution_count") ? item["execution_count"] : json()}});
  } else if (kind == "error") {
    json traceback = json::array();
    if (item.contains("traceback") && item["traceback"].is_array()) {
      for (const auto& line : item["traceback"]) {
        if (line.is_string()) traceback.push_back(line);
      }
    }
    outputs_.push_back({{"output_type", "error"}, {"ename", item.value("ename", "")}, {"evalue", item.value("evalue", "")},
                        {"traceback", traceback}});
  } else if (kind == "clear_output") {
    outputs_ = json::array();
  }
}

void CellOutputs::add_error(const std::string& ename, const std::string& evalue, const json& traceback) {
  json lines = json::array();
  if (traceback.is_array()) {
    for (const auto& line : traceback) {
      if (line.is_string()) lines.push_back(line);
    }
  }
  outputs_.push_back({{"output_type", "error"}, {"ename", ename}, {"evalue", evalue}, {"traceback", lines}});
}

bool CellOutputs::has_error() const {
  for (const auto& output : outputs_) {
    if (output.value("output_type", "") == "error") return true;
  }
  return false;
}

std::string Notebooks::path_for(const std::string& session_id) const {
  std::string name;
  for (char c : session_id) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (name.empty() || name[0] == '.') name = "_" + name;
  return dir_ + "/" + name + ".ipynb";
}

namespace {

std::string cell_id() {
  static thread_local std::mt19937_64 random(std::random_device{}());
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 12; ++i) id += kHex[random() % 16];
  return id;
}

json empty_notebook(const std::string& sandbox_id) {
  return {{"nbformat", 4},
          {"nbformat_minor", 5},
          {"metadata",
           {{"kernelspec", {{"name", "gpubox"}, {"display_name", "gpubox (Python)"}, {"language", "python"}}},
            {"language_info", {{"name", "python"}}},
            {"gpubox", {{"sandbox_id", sandbox_id}}}}},
          {"cells", json::array()}};
}

// Writes text to path through a temp file beside it, renamed over it: a reader sees the old
// notebook or the new one, never a part. Not fsynced: that cost 4-5 ms a cell, as much as the cell;
// a crash of this server loses nothing (the page cache has it), one of the machine the latest cells.
Status write_atomically(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp-" + std::to_string(::getpid()) + "-" + cell_id();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::from_errno(errno, "cannot write the notebook '" + path + "'");
  bool ok = write_fully(fd, text.data(), text.size()) == 0;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    Status error = Status::from_errno(errno, "cannot write the notebook '" + path + "'");
    ::unlink(temp.c_str());
    return error;
  }
  return Status::ok();
}

}  // namespace

json& Notebooks::notebook(const std::string& session_id, const std::string& sandbox_id) {
  auto found = notebooks_.find(session_id);
  if (found != notebooks_.end()) return found->second;
  json loaded;
  std::ifstream in(path_for(session_id));
  if (in) loaded = json::parse(in, nullptr, false);
  if (!loaded.is_object() || !loaded.contains("cells") || !loaded["cells"].is_array() || loaded.value("nbformat", 0) != 4) {
    loaded = empty_notebook(sandbox_id);
  }
  return notebooks_[session_id] = std::move(loaded);
}

Result<std::string> Notebooks::append(const std::string& session_id, const std::string& sandbox_id, json cell) {
  MutexLock lock(mutex_);
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) return Status(ErrorCode::internal, "cannot create the notebook directory '" + dir_ + "': " + error.message());
  json& book = notebook(session_id, sandbox_id);
  cell["id"] = cell_id();
  book["cells"].push_back(std::move(cell));
  std::string path = path_for(session_id);
  if (Status written = write_atomically(path, book.dump(1, ' ', false, json::error_handler_t::replace) + "\n"); !written) {
    return written;
  }
  return path;
}

Result<std::string> Notebooks::add_code_cell(const std::string& session_id, const std::string& sandbox_id, const std::string& code,
                                             const json& outputs, const json& execution_count) {
  json cell = {{"cell_type", "code"},
               {"execution_count", execution_count.is_number_integer() ? execution_count : json()},
               {"metadata", json::object()},
               {"source", source_lines(code)},
               {"outputs", outputs}};
  return append(session_id, sandbox_id, std::move(cell));
}

Result<std::string> Notebooks::add_markdown_cell(const std::string& session_id, const std::string& sandbox_id, const std::string& text) {
  json cell = {{"cell_type", "markdown"}, {"metadata", json::object()}, {"source", source_lines(text)}};
  return append(session_id, sandbox_id, std::move(cell));
}

}  // namespace gpubox::mcp
