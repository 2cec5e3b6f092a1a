#include "agent/log.h"
#include "base/thread_annotations.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

namespace gpubox::log {
namespace {

constexpr std::string_view kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger> make_logger(std::vector<spdlog::sink_ptr> sinks, Level level) {
  auto logger = std::make_shared<spdlog::logger>("gpubox", sinks.begin(), sinks.end());
  logger->set_pattern("%v");
  logger->set_level(to_spdlog(level));
  logger->flush_on(spdlog::level::trace);  // the log is how a dead sandbox explains itself
  return logger;
}

Mutex g_mutex;
std::shared_ptr<spdlog::logger> g_logger GUARDED_BY(g_mutex);

std::shared_ptr<spdlog::logger> current() {
  MutexLock lock(g_mutex);
  if (!g_logger) {
    g_logger = make_logger({std::make_shared<spdlog::sinks::stderr_sink_mt>()}, Level::warn);
  }
  return g_logger;
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto seconds = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long long>(micros));
  return text;
}

nlohmann::ordered_json to_json(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> nlohmann::ordered_json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Secret>) {
          return "[redacted]";
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          return std::string(v);
        } else if constexpr (std::is_same_v<T, const char*>) {
          return v ? std::string(v) : std::string();
        } else {
          return v;
        }
      },
      value);
}

}  // namespace

bool parse_level(std::string_view text, Level* level) {
  for (size_t i = 0; i < std::size(kLevelNames); ++i) {
    if (kLevelNames[i] == text) {
      *level = static_cast<Level>(i);
      return true;
    }
  }
  return false;
}

bool configure(const Options& options, std::string* error) {
  std::vector<spdlog::sink_ptr> sinks;
  if (options.to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  bool ok = true;
  if (!options.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file));
    } catch (const spdlog::spdlog_ex& e) {
      if (error) *error = e.what();
      ok = false;
      if (!options.to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
    }
  }
  auto logger = make_logger(std::move(sinks), options.level);
  MutexLock lock(g_mutex);
  g_logger = std::move(logger);
  return ok;
}

std::string format_line(Level level, std::string_view message, std::initializer_list<Field> fields) {
  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["ts"] = timestamp();
  line["level"] = kLevelNames[static_cast<size_t>(level)];
  line["msg"] = std::string(message);
  for (const auto& [key, value] : fields) line[std::string(key)] = to_json(value);
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void write(Level level, std::string_view message, std::initializer_list<Field> fields) {
  auto logger = current();
  if (!logger->should_log(to_spdlog(level))) return;
  logger->log(to_spdlog(level), format_line(level, message, fields));
}

void flush() { current()->flush(); }

}  // namespace gpubox::log
