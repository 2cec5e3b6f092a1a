// The kernel's input history, in memory, answering history_request with rows of
// three [session, line, input] whose session and line are integers (xeus 2.4.1's
// in-memory manager answers with strings and four-element rows).
// xeus calls it on the shell thread only.
#pragma once

#include <string>
#include <vector>

#include "xeus/xhistory_manager.hpp"

namespace gpubox::kernel {

class KernelHistory : public xeus::xhistory_manager {
 private:
  static constexpr int kSession = 1;
  struct Entry {
    int session;
    int line;
    std::string input;
  };
  void configure_impl() override {}
  void store_inputs_impl(int session, int line, const std::string& input, const std::string& output) override;
  nl::json get_tail_impl(int n, bool raw, bool output) const override;
  nl::json get_range_impl(int session, int start, int stop, bool raw, bool output) const override;
  nl::json search_impl(const std::string& pattern, bool raw, bool output, int n, bool unique) const override;
  static nl::json reply(const std::vector<const Entry*>& rows, bool output);

  std::vector<Entry> entries_;
};

}  // namespace gpubox::kernel
