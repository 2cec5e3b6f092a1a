// guarded(): runs an RPC handler body, turning LibTorch's exceptions into
// errors (the handler is the exception boundary: LibTorch throws, modeld
// keeps serving). Any thread.
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <exception>
#include <new>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/modeld/split/rank_exchange.h"

namespace gpubox::modeld {

template <typename Body>
Result<nlohmann::json> guarded(const char* method, Body&& body) {
  try {
    return body();
  } catch (const RankFailure& e) {  // a split model's rank failed: the model is down until it loads again
    return Status(ErrorCode::unavailable, fmt::format("{}: {} (the model is down: it loads again)", method, e.what()));
  } catch (const c10::OutOfMemoryError& e) {
    return Status(ErrorCode::resource_exhausted, fmt::format("{}: out of memory on the device: {}", method, e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return Status(ErrorCode::internal, fmt::format("{}: {}", method, e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::resource_exhausted, fmt::format("{}: out of host memory", method));
  } catch (const std::exception& e) {  // a bug's, not a caller's: still never the whole host
    return Status(ErrorCode::internal, fmt::format("{}: {}", method, e.what()));
  }
}

}  // namespace gpubox::modeld
