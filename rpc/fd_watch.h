// FdWatch: has a thread that already polls (the RPC server's I/O thread) also
// call a function when another descriptor becomes readable, so that an answer
// arriving there goes out without waking a thread of its own first. Methods
// may be called from any thread.
#pragma once

#include <functional>

namespace gpubox::rpc {

class FdWatch {
 public:
  virtual ~FdWatch() = default;
  // Calls ready on the watching thread whenever fd is readable (or at its
  // end), until ready returns false. ready must never block. False (ready is
  // never called) once the watching thread has ended.
  virtual bool watch(int fd, std::function<bool()> ready) = 0;
  // Stops watching fd. Once it returns, ready is neither running nor called
  // again, so fd may be closed. Not from within ready (return false there).
  virtual void unwatch(int fd) = 0;
};

}  // namespace gpubox::rpc
