// Small helpers the agent harnesses and their tests share: files, temporary
// directories, polling. Plain functions, safe on any thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace gpubox::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Polls cond every few milliseconds until it holds or the timeout passes.
bool wait_until(const std::function<bool()>& cond, milliseconds timeout);

bool file_exists(const std::string& path);
// The whole file; "" when it cannot be read.
std::string read_file(const std::string& path);
// Writes PATH.tmp with this mode, then renames it over path: a reader sees
// the old content or the new, never part of it. Throws when it cannot.
void write_file(const std::string& path, const std::string& text, int mode = 0644);
int count_lines(const std::string& text);

// Creates a fresh directory /tmp/PREFIX-XXXXXX; the caller removes it. Throws when it cannot.
std::string make_temp_dir(const std::string& prefix);

}  // namespace gpubox::testing
