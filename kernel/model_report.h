// The model loader's report (kernel/model_loader.py): what each preloaded
// model is (type, device, parameters, dtype) or why it failed, and the
// model_info text. Receives the loader's display while setup code is replayed
// (the executor's requesting thread) and answers kernel.info (any thread).
#pragma once

#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "kernel/python_executor.h"

namespace gpubox::kernel {

class ModelReport : public ExecutorSink {
 public:
  // initial: pending_model_report(); on_report: called with each new report (the agent logs it).
  ModelReport(nlohmann::json initial, std::function<void(const nlohmann::json&)> on_report);

  // {"models": [...], "model_info": "..."}.
  nlohmann::json snapshot() const;

  void stream(const std::string&, std::string) override {}
  void message(const nlohmann::json& frame) override;
  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }

 private:
  std::function<void(const nlohmann::json&)> on_report_;
  mutable std::mutex mutex_;
  nlohmann::json models_;   // guarded by mutex_
  std::string model_info_;  // guarded by mutex_
};

}  // namespace gpubox::kernel
