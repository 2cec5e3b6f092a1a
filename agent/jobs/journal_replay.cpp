#include "agent/jobs/journal_replay.h"

namespace gpubox::jobs {
namespace {

// Folds one event into the replay; may throw on a line of the wrong shape.
void apply(Replay& replay, const nlohmann::json& event) {
  if (!event.contains("job") || !event["job"].is_string() || !event.contains("event") || !event["event"].is_string()) return;
  std::string id = event["job"].get<std::string>();
  std::string kind = event["event"].get<std::string>();
  if (id.rfind("job-", 0) == 0) {
    try {
      replay.last_number = std::max(replay.last_number, std::stoll(id.substr(4)));
    } catch (const std::exception&) {
    }
  }
  if (kind == "submitted") {
    ReplayedJob job;
    job.id = id;
    job.spec = event.value("spec", nlohmann::json::object());
    job.submitted_unix = event.value("submitted_unix", 0.0);
    replay.jobs[id] = std::move(job);
    return;
  }
  auto it = replay.jobs.find(id);
  if (it == replay.jobs.end()) return;  // an event for a job whose submission was torn away
  ReplayedJob& job = it->second;
  if (kind == "started") {
    job.state = "running";
    job.cgroup = event.value("cgroup", "");
  } else if (kind == "stopping") {
    job.state = job.state == "queued" ? "queued" : "stopping";
  } else if (kind == "exited" || kind == "lost") {
    job.state = "staging";
  } else if (kind == "finished") {
    job.state = "finished";
    job.result = event.value("result", nlohmann::json::object());
    job.manifest = event.value("manifest", nlohmann::json::object());
  } else if (kind == "acked") {
    job.acked = true;
  } else if (kind == "persisted") {
    job.persisted_to = event.value("path", "");
  }
}

}  // namespace

bool is_unfinished_state(const std::string& state) { return state != "finished"; }

Replay replay_journal(const std::vector<nlohmann::json>& events) {
  Replay replay;
  for (const auto& event : events) {
    // A line of the wrong shape (a hand-edited journal) is skipped, never fatal to PID 1.
    try {
      apply(replay, event);
    } catch (const std::exception&) {
    }
  }
  return replay;
}

}  // namespace gpubox::jobs
