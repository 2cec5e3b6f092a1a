// The fixture every integration test uses: starts agents through the harness
// (tests/support/agent_process.h) and checks, when the test ends, that it
// left no zombie behind.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/agent_process.h"
#include "tests/support/host_processes.h"

namespace gpubox::testing {

// Generous bounds: they only decide how long a broken agent takes to fail a test.
// An exit under ASan, beside the sweeps of exit_status_test.cpp on 2 loaded
// cores, came within 0.2 s of 10 s in CI: 30 s.
inline constexpr milliseconds kStartTimeout{10'000};
inline constexpr milliseconds kExitTimeout{30'000};

class IntegrationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Every sandbox is a local of the test body, destroyed (and reaped) by now.
    EXPECT_EQ(count_zombie_children(::getpid()), 0) << "the test left a zombie behind";
  }

  // Starts a sandbox and waits until the agent says it is ready.
  static std::unique_ptr<AgentProcess> start_ready(const AgentOptions& options) {
    std::string error;
    auto box = AgentProcess::start(options, &error);
    EXPECT_TRUE(box) << error;
    if (box) {
      EXPECT_TRUE(box->wait_ready(kStartTimeout)) << "agent not ready; stderr:\n" << box->stderr_text();
    }
    return box;
  }

  static std::unique_ptr<AgentProcess> start(const AgentOptions& options) {
    std::string error;
    auto box = AgentProcess::start(options, &error);
    EXPECT_TRUE(box) << error;
    return box;
  }
};

// {"/bin/sh", "-c", script, "sh", args...}: args are $1, $2, … inside the script.
inline std::vector<std::string> sh(const std::string& script, std::initializer_list<std::string> args = {}) {
  std::vector<std::string> argv = {"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Messages of the log entries, in order.
inline std::vector<std::string> log_messages(const AgentProcess& box) {
  std::vector<std::string> messages;
  for (const auto& entry : box.log_entries()) messages.push_back(entry.value("msg", ""));
  return messages;
}

// Log entries with this message (and this child, when given).
inline std::vector<nlohmann::json> log_with(const AgentProcess& box, const std::string& msg, const std::string& child = "") {
  std::vector<nlohmann::json> found;
  for (const auto& entry : box.log_entries()) {
    if (entry.value("msg", "") == msg && (child.empty() || entry.value("child", "") == child)) found.push_back(entry);
  }
  return found;
}

inline double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace gpubox::testing
