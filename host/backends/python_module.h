// The backends whose control-plane steps run in Python, through their
// platform's official SDK (Modal's, the Kubernetes client): `PYTHON -m
// gpubox.MODULE COMMAND` with the request as JSON on its stdin, so that the
// agent's config and keys are in no argv; PYTHON is $GPUBOX_PYTHON, else
// python3 on PATH. When this CLI runs from a checkout's build/bin, the
// checkout's python/ is put on PYTHONPATH. One thread; forks.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace gpubox::host {

// One backend's Python module and how its messages name it.
struct PythonModule {
  std::string module;        // "gpubox.modal_backend"
  std::string backend;       // "modal": as --backend names it
  std::string sdk;           // what it needs ("Modal's SDK")
  std::string install;       // how to install the package with it ("pip install 'gpubox[modal]'")
};

// The Python that runs the modules: $GPUBOX_PYTHON, else "python3".
std::string backend_python();

// Runs `PYTHON -m MODULE COMMAND` with request on stdin; its JSON result, or
// its error (invalid_request for a usage error such as no SDK or no
// credentials, unavailable for a failure of the platform, internal when the
// module could not run).
Result<nlohmann::json> call_python_module(const PythonModule& module, const std::string& command,
                                          const nlohmann::json& request, std::chrono::milliseconds timeout);

}  // namespace gpubox::host
