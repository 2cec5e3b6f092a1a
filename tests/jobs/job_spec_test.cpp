// parse_job_spec(): job.submit's params, and the refusals that name the field.
#include "agent/jobs/job_spec.h"

#include <gtest/gtest.h>

namespace gpubox::jobs {
namespace {

using nlohmann::json;

const std::string kSha(64, 'a');

std::string error_of(const json& params) {
  auto spec = parse_job_spec(params);
  return spec ? "ok" : spec.status().message();
}

TEST(JobSpec, ParsesEveryField) {
  auto spec = parse_job_spec({{"command", "python3 train.py"},
                              {"inputs", {{{"name", "data.bin"}, {"sha256", std::string(64, 'A')}, {"size", 10}}}},
                              {"env", {{"SEED", "1"}}},
                              {"timeout_seconds", 90.5},
                              {"outputs", {{{"glob", "*.png"}, {"kind", "featured"}}, {{"glob", "ckpt/*"}, {"kind", "hidden"}}}},
                              {"intent", "train a probe"},
                              {"memory_limit_bytes", 1 << 30}});
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_EQ(spec->command, "python3 train.py");
  ASSERT_EQ(spec->inputs.size(), 1u);
  EXPECT_EQ(spec->inputs[0].sha256, kSha) << "hex is lower-cased";
  EXPECT_EQ(spec->timeout_s, 90.5);
  ASSERT_EQ(spec->outputs.size(), 2u);
  EXPECT_TRUE(spec->outputs[0].featured);
  EXPECT_FALSE(spec->outputs[1].featured);
  EXPECT_EQ(spec->memory_limit_bytes, 1u << 30);
  JobSpec back = job_spec_from_json(spec->to_json());
  EXPECT_EQ(back.to_json(), spec->to_json());
}

TEST(JobSpec, SecretsAreParsedButNeverWrittenBack) {
  auto spec = parse_job_spec({{"command", "true"}, {"secrets", {{"HF_TOKEN", "hf_not_in_the_journal"}}}});
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_EQ(spec->secrets.at("HF_TOKEN"), "hf_not_in_the_journal");
  EXPECT_EQ(spec->to_json().dump().find("hf_not_in_the_journal"), std::string::npos) << "to_json() is what the journal holds";
  EXPECT_NE(error_of({{"command", "x"}, {"secrets", {{"1BAD", "v"}}}}).find("params.secrets"), std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"secrets", {{"A", 3}}}}).find("params.secrets"), std::string::npos);
}

TEST(JobSpec, InputNamesMustBeBareFileNames) {
  for (const char* name : {"../etc/passwd", "a/b", "/abs", "..", ".", "", "out"}) {
    json params = {{"command", "true"}, {"inputs", {{{"name", name}, {"sha256", kSha}, {"size", 1}}}}};
    EXPECT_NE(error_of(params).find("params.inputs[0].name"), std::string::npos) << name << ": " << error_of(params);
  }
  json duplicate = {{"command", "true"},
                    {"inputs", {{{"name", "a"}, {"sha256", kSha}, {"size", 1}}, {{"name", "a"}, {"sha256", kSha}, {"size", 1}}}}};
  EXPECT_NE(error_of(duplicate).find("params.inputs[1].name"), std::string::npos);
}

TEST(JobSpec, RefusalsNameTheField) {
  EXPECT_EQ(error_of({{"inputs", json::array()}}), "params.command: required");
  EXPECT_NE(error_of({{"command", ""}}).find("params.command"), std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"inputs", {{{"name", "a"}, {"sha256", "xyz"}, {"size", 1}}}}}).find("params.inputs[0].sha256"),
            std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"inputs", {{{"name", "a"}, {"sha256", kSha}}}}}).find("params.inputs[0].size: required"),
            std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"outputs", {{{"glob", "*"}, {"kind", "shiny"}}}}}).find("params.outputs[0].kind"),
            std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"timeout_seconds", -1}}).find("params.timeout_seconds"), std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"env", {{"1BAD", "v"}}}}).find("params.env"), std::string::npos);
  EXPECT_NE(error_of({{"command", "x"}, {"colour", "red"}}).find("params.colour: unknown"), std::string::npos);
}

TEST(JobSpec, AnInputIsAFileOrADirectorysArchive) {
  auto spec = parse_job_spec({{"command", "ls data"},
                              {"inputs", {{{"name", "data"}, {"sha256", kSha}, {"size", 10240}, {"kind", "dir"}},
                                          {{"name", "x.bin"}, {"sha256", kSha}, {"size", 1}, {"kind", "file"}},
                                          {{"name", "y.bin"}, {"sha256", kSha}, {"size", 1}}}}});
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_TRUE(spec->inputs[0].directory);
  EXPECT_FALSE(spec->inputs[1].directory);
  EXPECT_FALSE(spec->inputs[2].directory) << "a file by default";
  EXPECT_TRUE(job_spec_from_json(spec->to_json()).inputs[0].directory) << "kept through the journal";
  EXPECT_NE(error_of({{"command", "x"}, {"inputs", {{{"name", "a"}, {"sha256", kSha}, {"size", 1}, {"kind", "tar"}}}}})
                .find("params.inputs[0].kind"),
            std::string::npos);
}

TEST(GlobMatches, StarStaysWithinOneDirectory) {
  EXPECT_TRUE(glob_matches("*.png", "plot.png"));
  EXPECT_FALSE(glob_matches("*.png", "figs/plot.png"));
  EXPECT_TRUE(glob_matches("figs/*.png", "figs/plot.png"));
  EXPECT_FALSE(glob_matches("*", ".hidden"));
}

}  // namespace
}  // namespace gpubox::jobs
