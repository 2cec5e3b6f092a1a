// JobSpec: what job.submit asks for (rpc/PROTOCOL.md, "Jobs"), validated
// from the RPC params. Plain data; safe to copy between threads.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::jobs {

// One input file, uploaded before the job starts and checked against size and sha256.
struct InputFile {
  std::string name;    // a bare file name: no '/', not "." or ".."
  std::string sha256;  // lower-case hex
  std::uint64_t size = 0;
  // kind "dir": the bytes are a plain tar archive, unpacked by the safe
  // extractor into the work dir's NAME/ (its files together no larger than size).
  bool directory = false;
};

// A glob over paths relative to out/ (fnmatch, '*' does not cross '/').
// featured: listed in the result's featured_files; hidden: archived like
// everything else but left out of the result's output_files.
struct OutputRule {
  std::string glob;
  bool featured = true;
};

struct JobSpec {
  std::string command;  // run with /bin/sh -c in the job's work dir
  std::vector<InputFile> inputs;
  std::map<std::string, std::string> env;
  // Also in the job's environment (after env), but never journaled, logged
  // nor returned: to_json() leaves them out, so a replayed job has none.
  std::map<std::string, std::string> secrets;
  std::optional<double> timeout_s;  // none: the container's remaining life minus the harvest margin
  std::vector<OutputRule> outputs;
  std::string intent;
  std::optional<std::uint64_t> memory_limit_bytes;  // the job's own memory cgroup limit, where cgroups allow

  nlohmann::json to_json() const;
};

// Validates job.submit params; errors are invalid_request naming the field
// ("params.inputs[1].name: a bare file name, got \"../x\"").
Result<JobSpec> parse_job_spec(const nlohmann::json& params);
// Reads a spec back from the journal (trusted: written by to_json()).
JobSpec job_spec_from_json(const nlohmann::json& value);

// True when name may be a file in a job's work dir.
bool is_bare_file_name(const std::string& name);
// Whether relative_path (under out/) matches glob.
bool glob_matches(const std::string& glob, const std::string& relative_path);

}  // namespace gpubox::jobs
