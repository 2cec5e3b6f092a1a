// Where the kernel loads each preloaded model from (config kernel.models). A
// hidden model's files are bind-mounted read-only at STATE_DIR/models/RANDOM,
// so that neither its name nor its configured path reaches the executor; this
// needs the agent as PID 1 of its own mount namespace (a sandbox), and without
// it a hidden model is not loaded at all. Call once, before the kernel starts.
#pragma once

#include <string>
#include <vector>

#include "kernel/model_setup.h"

namespace gpubox {

// own_mount_namespace: the agent may mount without touching the host (PID 1 of a sandbox).
std::vector<kernel::ModelLoad> place_models(const std::vector<kernel::PreloadedModel>& models, const std::string& state_dir,
                                            bool own_mount_namespace);

}  // namespace gpubox
