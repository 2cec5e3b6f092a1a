#include "kernel/model_report.h"

#include "kernel/model_setup.h"

namespace gpubox::kernel {

using nlohmann::json;

ModelReport::ModelReport(json initial, std::function<void(const json&)> on_report)
    : on_report_(std::move(on_report)), models_(std::move(initial)) {
  model_info_ = models_.empty() ? "Pre-loaded Models: none" : "Pre-loaded Models: not loaded yet";
}

json ModelReport::snapshot() const {
  MutexLock lock(mutex_);
  return {{"models", models_}, {"model_info", model_info_}};
}

void ModelReport::message(const json& frame) {
  if (frame.value("type", "") != "display") return;
  auto data = frame.find("data");
  if (data == frame.end() || !data->is_object()) return;
  auto report = data->find(kModelReportMime);
  if (report == data->end() || !report->is_object()) return;
  auto models = report->find("models");
  auto text = report->find("model_info");
  if (models == report->end() || !models->is_array() || text == report->end() || !text->is_string()) return;
  {
    MutexLock lock(mutex_);
    models_ = *models;
    model_info_ = text->get<std::string>();
  }
  if (on_report_) on_report_(*models);
}

}  // namespace gpubox::kernel
