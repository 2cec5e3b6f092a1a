#include "kernel/kernel_history.h"

#include <fnmatch.h>

#include <set>

namespace gpubox::kernel {

// xeus 2.4.1 passes session 0 and a constant line number: rows are numbered
// here instead, like IPython's (session 1, line = the cell's execution count,
// since every stored cell takes the next count).
void KernelHistory::store_inputs_impl(int, int, const std::string& input, const std::string&) {
  entries_.push_back({kSession, static_cast<int>(entries_.size()) + 1, input});
}

nl::json KernelHistory::reply(const std::vector<const Entry*>& rows, bool output) {
  nl::json history = nl::json::array();
  for (const Entry* e : rows) {
    if (output) {
      history.push_back({e->session, e->line, {e->input, nullptr}});
    } else {
      history.push_back({e->session, e->line, e->input});
    }
  }
  return {{"status", "ok"}, {"history", history}};
}

nl::json KernelHistory::get_tail_impl(int n, bool, bool output) const {
  std::vector<const Entry*> rows;
  size_t count = n < 0 ? 0 : static_cast<size_t>(n);
  size_t first = entries_.size() > count ? entries_.size() - count : 0;
  for (size_t i = first; i < entries_.size(); ++i) rows.push_back(&entries_[i]);
  return reply(rows, output);
}

nl::json KernelHistory::get_range_impl(int session, int start, int stop, bool, bool output) const {
  std::vector<const Entry*> rows;
  for (const Entry& e : entries_) {
    bool same_session = session <= 0 || e.session == session;  // 0 and negatives: this session
    if (same_session && e.line >= start && (stop <= 0 || e.line < stop)) rows.push_back(&e);
  }
  return reply(rows, output);
}

nl::json KernelHistory::search_impl(const std::string& pattern, bool, bool output, int n, bool unique) const {
  std::vector<const Entry*> rows;
  std::set<std::string> seen;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (n > 0 && rows.size() >= static_cast<size_t>(n)) break;
    if (::fnmatch(pattern.c_str(), it->input.c_str(), 0) != 0) continue;
    if (unique && !seen.insert(it->input).second) continue;
    rows.insert(rows.begin(), &*it);
  }
  return reply(rows, output);
}

}  // namespace gpubox::kernel
