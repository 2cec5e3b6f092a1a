// Journal replay: folds the events of events.jsonl into the last known state
// of each job, so a restarted agent knows every job it ever accepted. Pure.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpubox::jobs {

struct ReplayedJob {
  std::string id;
  nlohmann::json spec;            // as submitted
  std::string state = "queued";   // queued | running | stopping | staging | finished
  double submitted_unix = 0;
  nlohmann::json result;          // set once finished
  nlohmann::json manifest;        // set once finished
  bool acked = false;
  std::string persisted_to;
  std::string cgroup;             // the job's own memory cgroup, when it had one
};

struct Replay {
  std::map<std::string, ReplayedJob> jobs;  // by id
  long long last_number = 0;                // the highest N of the ids "job-N"
};

Replay replay_journal(const std::vector<nlohmann::json>& events);

// True for a state the job can leave: it was not finished when the journal ended.
bool is_unfinished_state(const std::string& state);

}  // namespace gpubox::jobs
