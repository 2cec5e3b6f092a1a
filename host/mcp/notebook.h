// Notebook sessions kept as real .ipynb files (nbformat 4.5): each
// execute_code of a session appends a code cell with its outputs in
// nbformat's shapes (stream, execute_result, display_data, error) and its
// execution count, add_markdown a markdown cell. The file is rewritten after
// every cell, atomically (a temp file renamed over it; not fsynced), so it can be opened
// at any time. A file already there (an earlier server's) is continued.
// Any thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox::mcp {

// Collects one cell's outputs as the kernel.execute DATA items arrive.
class CellOutputs {
 public:
  // One DATA item of kernel.execute (rpc/PROTOCOL.md, "Kernel").
  void add(const nlohmann::json& item);
  // The error of a cell that ended without an error item (a restart, a timeout).
  void add_error(const std::string& ename, const std::string& evalue, const nlohmann::json& traceback);
  const nlohmann::json& outputs() const { return outputs_; }
  bool has_error() const;

 private:
  nlohmann::json outputs_ = nlohmann::json::array();
};

class Notebooks {
 public:
  explicit Notebooks(std::string dir) : dir_(std::move(dir)) {}

  // The file a session's notebook is in: DIR/SESSION.ipynb (unsafe characters as _).
  std::string path_for(const std::string& session_id) const;
  // Appends a cell and rewrites the file; its path.
  Result<std::string> add_code_cell(const std::string& session_id, const std::string& sandbox_id, const std::string& code,
                                    const nlohmann::json& outputs, const nlohmann::json& execution_count);
  Result<std::string> add_markdown_cell(const std::string& session_id, const std::string& sandbox_id, const std::string& text);
  const std::string& dir() const { return dir_; }

 private:
  Result<std::string> append(const std::string& session_id, const std::string& sandbox_id, nlohmann::json cell)
      EXCLUDES(mutex_);
  nlohmann::json& notebook(const std::string& session_id, const std::string& sandbox_id) REQUIRES(mutex_);

  std::string dir_;
  Mutex mutex_;  // also keeps two cells' rewrites of one file apart
  std::map<std::string, nlohmann::json> notebooks_ GUARDED_BY(mutex_);  // by session id
};

// Splits text into nbformat's list of lines, each keeping its "\n".
nlohmann::json source_lines(const std::string& text);

}  // namespace gpubox::mcp
