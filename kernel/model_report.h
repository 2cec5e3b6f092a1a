// The model loader's report (kernel/model_loader.py): what each preloaded
// model is (type, device, parameters, dtype) or why it failed, and the
// model_info text. Receives the loader's display while setup code is replayed
// (the executor's requesting thread) and answers kernel.info (any thread).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/thread_annotations.h"
#include "kernel/python_executor.h"

namespace gpubox::kernel {

class ModelReport : public ExecutorSink {
 public:
  // initial: pending_model_report(); on_report: called with each new report (the agent logs it).
  ModelReport(nlohmann::json initial, std::function<void(const nlohmann::json&)> on_report);

  // {"models": [...], "model_info": "..."}.
  nlohmann::json snapshot() const EXCLUDES(mutex_);

  void stream(const std::string&, std::string) override {}
  void message(const nlohmann::json& frame) EXCLUDES(mutex_) override;
  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }

 private:
  std::function<void(const nlohmann::json&)> on_report_;
  mutable Mutex mutex_;
  nlohmann::json models_ GUARDED_BY(mutex_);
  std::string model_info_ GUARDED_BY(mutex_);
};

}  // namespace gpubox::kernel
