// The config's jobs section: defaults, every key, and refusals naming the key.
#include <gtest/gtest.h>

#include "agent/config.h"

namespace gpubox {
namespace {

using namespace std::chrono_literals;

std::string error_of(const char* text) {
  auto config = parse_config(text);
  return config ? "ok" : config.status().message();
}

TEST(JobsConfig, Defaults) {
  auto config = parse_config("{}");
  ASSERT_TRUE(config);
  EXPECT_EQ(config->jobs.dir, "");
  EXPECT_EQ(config->jobs.max_concurrent, 1);
  EXPECT_EQ(config->jobs.grace, 10s);
  EXPECT_EQ(config->jobs.compression_level, 3);
  EXPECT_EQ(config->jobs.max_input_bytes, 64LL << 30);
}

TEST(JobsConfig, ReadsEveryKey) {
  auto config = parse_config(R"({"jobs": {"dir": "/scratch/jobs", "staging_dir": "/vol/staged", "max_concurrent": 4,
                                          "max_queued": 10, "grace_seconds": 2.5, "max_input_bytes": 1024,
                                          "compression_level": 9, "compression_threads": 3}})");
  ASSERT_TRUE(config) << config.status().message();
  EXPECT_EQ(config->jobs.dir, "/scratch/jobs");
  EXPECT_EQ(config->jobs.staging_dir, "/vol/staged");
  EXPECT_EQ(config->jobs.max_concurrent, 4);
  EXPECT_EQ(config->jobs.max_queued, 10);
  EXPECT_EQ(config->jobs.grace, 2500ms);
  EXPECT_EQ(config->jobs.max_input_bytes, 1024);
  EXPECT_EQ(config->jobs.compression_level, 9);
  EXPECT_EQ(config->jobs.compression_threads, 3);
  EXPECT_NE(config_to_json(*config).find("\"max_concurrent\": 4"), std::string::npos);
}

TEST(JobsConfig, RefusalsNameTheKey) {
  EXPECT_EQ(error_of(R"({"jobs": {"max_concurrent": 0}})"), "jobs.max_concurrent: expected an integer from 1 to 1024, got 0");
  EXPECT_EQ(error_of(R"({"jobs": {"dir": "relative"}})"), "jobs.dir: expected an absolute path, got \"relative\"");
  EXPECT_EQ(error_of(R"({"jobs": {"grace_seconds": -1}})"), "jobs.grace_seconds: expected a number from 0 to 3600, got -1");
  EXPECT_EQ(error_of(R"({"jobs": {"max_input_bytes": -5}})"), "jobs.max_input_bytes: expected an integer ≥ 0, got -5");
  EXPECT_EQ(error_of(R"({"jobs": {"colour": 1}})"), "jobs.colour: unknown key");
}

}  // namespace
}  // namespace gpubox
