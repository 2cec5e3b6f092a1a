// A frame whose bytes other owners share (a SHA-256 thread hashing them):
// ZeroMQ sends them without a copy and drops its reference once they are sent.
#pragma once

#include <cstddef>
#include <memory>
#include <zmq.hpp>

namespace gpubox::rpc {

inline zmq::message_t shared_frame(std::shared_ptr<const char> bytes, std::size_t size) {
  const char* data = bytes.get();
  auto* held = new std::shared_ptr<const char>(std::move(bytes));  // released on ZeroMQ's I/O thread
  return zmq::message_t(const_cast<char*>(data), size,
                        [](void*, void* hint) { delete static_cast<std::shared_ptr<const char>*>(hint); }, held);
}

}  // namespace gpubox::rpc
