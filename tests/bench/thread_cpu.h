// Per-thread CPU seconds of a process (user + system, from /proc/PID/task),
// so a bench can say where the CPU of one transfer went even when other
// work on the machine makes its wall-clock figures swing.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

namespace gpubox::bench {

// CPU seconds so far of each thread of a process, by thread id, with its name.
struct ThreadCpu {
  struct Thread {
    std::string name;
    double seconds = 0;
  };
  std::map<pid_t, Thread> threads;
  double process_seconds = 0;  // the whole process, threads that have ended included

  static ThreadCpu of(pid_t pid) {
    ThreadCpu snapshot;
    std::string dir = "/proc/" + std::to_string(pid);
    snapshot.process_seconds = read_stat(dir + "/stat").seconds;
    DIR* tasks = ::opendir((dir + "/task").c_str());
    if (!tasks) return snapshot;
    while (dirent* entry = ::readdir(tasks)) {
      if (entry->d_name[0] == '.') continue;
      Thread thread = read_stat(dir + "/task/" + entry->d_name + "/stat");
      if (!thread.name.empty()) snapshot.threads[static_cast<pid_t>(std::atol(entry->d_name))] = thread;
    }
    ::closedir(tasks);
    return snapshot;
  }

  // "total T (name t, …)": CPU seconds per `per` units (e.g. GiB) between two
  // snapshots, summed by thread name ("ended" for threads gone by the second);
  // names under 0.01 are left out.
  static std::string used(const ThreadCpu& before, const ThreadCpu& after, double per) {
    std::map<std::string, double> by_name;
    double total = (after.process_seconds - before.process_seconds) / per;
    double named = 0;
    for (const auto& [tid, thread] : after.threads) {
      auto earlier = before.threads.find(tid);
      double seconds = thread.seconds - (earlier == before.threads.end() ? 0 : earlier->second.seconds);
      by_name[thread.name] += seconds / per;
      named += seconds / per;
    }
    if (total - named >= 0.01) by_name["ended"] += total - named;
    char text[64];
    std::snprintf(text, sizeof text, "%.2f (", total);
    std::string out = text;
    bool first = true;
    for (const auto& [name, seconds] : by_name) {
      if (seconds < 0.01) continue;
      std::snprintf(text, sizeof text, "%s%s %.2f", first ? "" : ", ", name.c_str(), seconds);
      out += text;
      first = false;
    }
    return out + ")";
  }

 private:
  // A /proc stat file's name and user + system CPU seconds (name empty when unreadable).
  static Thread read_stat(const std::string& path) {
    std::ifstream stat(path);
    std::string line;
    if (!std::getline(stat, line)) return {};
    auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) return {};
    unsigned long utime = 0, stime = 0;
    if (std::sscanf(line.c_str() + close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return {};
    return Thread{line.substr(open + 1, close - open - 1),
                  static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK))};
  }
};

}  // namespace gpubox::bench
