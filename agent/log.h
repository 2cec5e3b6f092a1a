// Structured logging: one JSON object per line, to stderr and to
// STATE_DIR/agent.log. Any thread may call the functions here.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace gpubox::log {

enum class Level { trace, debug, info, warn, error, off };

// A string that must never appear in a log: formatted as "[redacted]".
struct Secret {
  std::string value;
};

using FieldValue = std::variant<std::string, std::string_view, const char*, long long, int, unsigned, double, bool, Secret>;
using Field = std::pair<std::string_view, FieldValue>;

struct Options {
  Level level = Level::info;
  bool to_stderr = true;
  std::string file;  // empty: no file sink
};

// Parses "trace" … "off"; false for any other text.
bool parse_level(std::string_view text, Level* level);

// Replaces the sinks. Before the first call, warnings and errors go to stderr.
// Returns false (and keeps logging to stderr) when the file cannot be opened.
bool configure(const Options& options, std::string* error);

void write(Level level, std::string_view message, std::initializer_list<Field> fields = {});
inline void debug(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::debug, m, f); }
inline void info(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::info, m, f); }
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::warn, m, f); }
inline void error(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::error, m, f); }

// Renders one log line (no trailing newline); exposed for tests.
std::string format_line(Level level, std::string_view message, std::initializer_list<Field> fields);

// Writes everything buffered to its sink.
void flush();

}  // namespace gpubox::log
