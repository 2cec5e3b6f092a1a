// Setup from config that the executor runs hidden at every start and restart
// (kernel.workspace_dir, kernel.models): the Python code that puts the
// workspace on sys.path and loads the preloaded models with the embedded
// kernel/model_loader.py. Plain functions; any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpubox::kernel {

// One preloaded model as configured (docs/config.md, kernel.models).
struct PreloadedModel {
  std::string name;
  std::string path;
  std::string var_name = "model";
  std::string tokenizer_var;  // transformers only; empty: no tokenizer
  std::string loader;         // "transformers" | "torchscript" | "safetensors"
  std::string device = "cpu"; // "cpu", "cuda" or "cuda:N"
  std::string dtype;          // empty: as stored; "float32" "float16" "bfloat16" "float64"
  bool hidden = false;
  std::string base_model;     // transformers with is_peft: the base the adapter at path applies to
  bool is_peft = false;
};

// What the executor is told about one model: where to load it from (for a
// hidden model, a path that does not reveal it), or why it cannot be loaded.
struct ModelLoad {
  PreloadedModel spec;
  std::string load_path;        // what the loader opens
  std::string load_base_model;  // likewise for base_model
  std::string error;            // non-empty: not loaded, reported with this message
};

// The MIME type of the display the loader sends (hidden, during setup) with its report.
inline constexpr char kModelReportMime[] = "application/vnd.gpubox.models+json";

// Python that creates dir if needed and puts it first on sys.path.
std::string workspace_setup_code(const std::string& dir);

// Python that loads every model (one failure does not stop the others), binds
// var_name / tokenizer_var and `model_info` in the user namespace, and sends its
// report as a display of kModelReportMime. A hidden model's name and configured
// path never enter this code.
std::string models_setup_code(const std::vector<ModelLoad>& loads);

// The report of models before the loader has run: each one "pending" (or
// "failed" with its error), hidden ones without name or path.
nlohmann::json pending_model_report(const std::vector<ModelLoad>& loads);

// The embedded kernel/model_loader.py.
extern const char kModelLoaderSource[];

// Python that makes the gpubox package importable in the kernel, at the
// agent's own version, whatever the image holds: the embedded sources of
// python/gpubox, served by a finder first on sys.meta_path and compiled
// at a module's first import. A cell reaches the agent's model host with
// gpubox.Client() (GPUBOX_ENDPOINT; pure Python when the image lacks pyzmq).
std::string python_package_setup_code();

// The embedded python/gpubox/*.py: (module name, source), "__init__" included.
const std::vector<std::pair<std::string, std::string>>& python_package_sources();

}  // namespace gpubox::kernel
