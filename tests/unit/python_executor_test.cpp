// PythonExecutor against a real Python (Debian's /usr/bin/python3, plain mode)
// and sinks slower than the process writes: output must not starve the channel
// during a cell, nor hold off the next request between cells.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "kernel/python_executor.h"

extern char** environ;

namespace gpubox::kernel {
namespace {

using namespace std::chrono_literals;

// A frontend that reads output slower than a flooding cell writes it.
class SlowSink : public ExecutorSink {
 public:
  void stream(const std::string&, std::string text) override {
    streamed += text.size();
    std::this_thread::sleep_for(5ms);
  }
  void message(const nlohmann::json& frame) override {
    if (frame.value("type", "") == "display") displays++;
  }
  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }

  std::atomic<size_t> streamed{0};
  std::atomic<int> displays{0};
};

ExecutorOptions plain_python() {
  ExecutorOptions options;
  options.python = "/usr/bin/python3";
  options.mode = "plain";
  for (char** e = environ; *e != nullptr; ++e) options.env.emplace_back(*e);
  return options;
}

nlohmann::json execute(const std::string& code) {
  return {{"type", "execute"}, {"code", code}, {"silent", false}, {"store_history", true},
          {"allow_stdin", false}, {"execution_count", 1}};
}

// A cell that starts a thread writing 64 KiB blocks to stdout until `stop` is set.
constexpr char kStartFlood[] =
    "import os, threading\n"
    "stop = False\n"
    "def flood():\n"
    "    block = b'y' * 65536\n"
    "    while not stop:\n"
    "        os.write(1, block)\n"
    "writer = threading.Thread(target=flood)\n"
    "writer.start()\n";

// A request's status, or why it has none.
std::string status_of(const Result<nlohmann::json>& reply) {
  return reply.is_ok() ? reply->value("status", "") : reply.status().message();
}

// The request's final frame, or nullopt when it took over 30 s (the executor is
// then stopped, which ends the request: the test fails instead of hanging).
std::optional<Result<nlohmann::json>> run_cell(PythonExecutor& executor, const std::string& code, ExecutorSink& sink) {
  auto done = std::async(std::launch::async, [&] { return executor.request(execute(code), sink); });
  if (done.wait_for(30s) == std::future_status::ready) return done.get();
  executor.stop();
  done.wait();
  return std::nullopt;
}

// A thread keeps the stdout pipe full while the cell's main thread sends a
// display frame, which waits for the agent's answer: the agent must read the
// channel between pieces of output, or the cell never ends. (Under ASan, a cell
// that floods stdout and is interrupted hung this way: the interrupt waits for
// the cell's "started" frame, which was never read.)
TEST(PythonExecutor, AFloodOfOutputDoesNotStarveTheChannel) {
  PythonExecutor executor(plain_python(), make_direct_launcher());
  ASSERT_TRUE(executor.start());
  SlowSink sink;
  const std::string cell = std::string(kStartFlood) +
                           "import time\n"
                           "time.sleep(0.5)\n"  // the pipe (1 MiB) is full from here on
                           "display('through the channel')\n"
                           "stop = True\n"
                           "writer.join()\n";
  auto reply = run_cell(executor, cell, sink);
  ASSERT_TRUE(reply) << "the cell's display frame was never read while output kept coming";
  EXPECT_EQ(status_of(*reply), "ok");
  EXPECT_EQ(sink.displays.load(), 1);
  EXPECT_GT(sink.streamed.load(), size_t{1} << 20) << "the flood went on past one full pipe";
  executor.stop();
}

// Between cells the watcher thread publishes a background thread's output, holding
// the executor: the next request must get it while the thread still floods.
TEST(PythonExecutor, AFloodBetweenCellsDoesNotHoldOffTheNextRequest) {
  PythonExecutor executor(plain_python(), make_direct_launcher());
  auto idle = std::make_shared<SlowSink>();
  executor.set_idle_sink(idle);
  ASSERT_TRUE(executor.start());
  SlowSink sink;
  auto started = run_cell(executor, kStartFlood, sink);
  ASSERT_TRUE(started) << "the cell that starts the flood did not end";
  ASSERT_EQ(status_of(*started), "ok");
  std::this_thread::sleep_for(500ms);  // the watcher publishes the flood meanwhile
  auto reply = run_cell(executor, "stop = True\nwriter.join()\n", sink);
  ASSERT_TRUE(reply) << "the next request waited while the watcher read a flood that never ended";
  EXPECT_EQ(status_of(*reply), "ok");
  EXPECT_GT(idle->streamed.load(), 0u) << "the flood between cells went to the idle sink";
  executor.set_idle_sink(nullptr);
  executor.stop();
}

}  // namespace
}  // namespace gpubox::kernel
