// The stdio MCP server: reads newline-delimited JSON-RPC from in_fd, answers
// on out_fd (one writer lock: messages never interleave), runs each
// tools/call on a thread of its own so that a long cell blocks nothing else.
// run() is called once, on the thread that owns the reader.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "host/mcp/dispatcher.h"

namespace gpubox::mcp {

// Writes whole messages to one fd. Any thread.
class Output {
 public:
  explicit Output(int fd) : fd_(fd) {}
  void write(const json& message) EXCLUDES(mutex_);

 private:
  Mutex mutex_;
  int fd_ GUARDED_BY(mutex_);  // never changes: the lock is for what is written to it
};

class Server {
 public:
  Server(Toolbox& tools, ServerIdentity identity, int in_fd, int out_fd);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();

  // Serves until end of input; then cancels the calls still running, waits
  // for them and returns 0.
  int run() EXCLUDES(calls_mutex_);

 private:
  class Call;
  void start_call(CallRequest request) EXCLUDES(calls_mutex_);
  void cancel_call(const json& id) EXCLUDES(calls_mutex_);
  void reap_finished();

  Toolbox& tools_;
  Dispatcher dispatcher_;
  int in_fd_;
  Output output_;
  Mutex calls_mutex_;
  std::map<std::string, std::shared_ptr<Call>> calls_ GUARDED_BY(calls_mutex_);  // in flight, by id
  std::vector<std::pair<std::shared_ptr<Call>, std::thread>> threads_;  // reader thread only
};

}  // namespace gpubox::mcp
