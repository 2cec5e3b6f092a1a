// The model host's admission (model/modeld/scheduler/admission.h) driven by random
// arrivals, sizes, cancellations and ends, each input byte pair one event,
// checked after every event against a model of what it must hold: the blocks
// and rows of the started requests and nothing else are taken (no leak), the
// queue never passes max_queue, requests start in the order they came (none
// overtakes the head), and a head that fits an idle batch and an empty pool
// always starts (no deadlock). At the end everything is given back.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>

#include "model/modeld/scheduler/admission.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using gpubox::modeld::Admission;

struct Held {
  std::int64_t rows, blocks;
};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gpubox::fuzz::InputCursor input(data, size);
  const std::int64_t pool = 1 + input.byte() % 64, max_batch = 1 + input.byte() % 16, max_queue = input.byte() % 8;
  Admission admission(pool, max_batch, max_queue);
  std::deque<std::uint64_t> queued;        // the model's queue, in arrival order
  std::map<std::uint64_t, Held> waiting;   // what each queued request asks for
  std::map<std::uint64_t, Held> started;
  std::uint64_t next_id = 1;
  while (!input.empty()) {
    std::uint8_t event = input.byte(), value = input.byte();
    switch (event % 4) {
      case 0: {  // arrival: work alone (0 rows; holding no blocks, or some as a static generation) or a
                 // generation of 1..max_batch+2 rows
        std::int64_t rows = value % 5 == 0 ? 0 : 1 + value % (max_batch + 2);
        std::int64_t blocks = rows == 0 && value % 2 == 0 ? 0 : 1 + (value / 5) % (pool + 2);
        auto offered = admission.offer(next_id, rows, blocks);
        if (blocks > pool) {
          check(offered == Admission::Offer::too_large);
        } else if (static_cast<std::int64_t>(queued.size()) >= max_queue) {
          check(offered == Admission::Offer::queue_full);
        } else {
          check(offered == Admission::Offer::queued);
          queued.push_back(next_id);
          waiting[next_id] = {rows, blocks};
        }
        ++next_id;
        break;
      }
      case 1: {  // the scheduler starts what it can
        while (auto next = admission.start_head()) {
          check(!queued.empty() && next->id == queued.front());  // first come first served
          Held held = waiting[next->id];
          check((held.blocks == 0) == (next->first_block < 0));
          check(next->first_block + held.blocks <= pool);
          started[next->id] = held;
          waiting.erase(next->id);
          queued.pop_front();
        }
        break;
      }
      case 2: {  // a waiting caller leaves
        if (queued.empty()) break;
        std::uint64_t id = queued[value % queued.size()];
        check(admission.withdraw(id));
        check(!admission.withdraw(id));
        std::erase(queued, id);
        waiting.erase(id);
        break;
      }
      case 3: {  // a started request ends (finished, cancelled, or its caller left)
        if (started.empty()) break;
        auto it = std::next(started.begin(), static_cast<std::ptrdiff_t>(value % started.size()));
        admission.release(it->first);
        started.erase(it);
        break;
      }
    }
    std::int64_t rows = 0, blocks = 0;
    for (const auto& [id, held] : started) rows += held.rows, blocks += held.blocks;
    check(admission.blocks().consistent());
    check(admission.blocks().used() == blocks);
    check(admission.batch_rows() == rows);
    check(admission.running() == static_cast<std::int64_t>(started.size()));
    check(admission.queue_depth() == static_cast<std::int64_t>(queued.size()));
    check(admission.queue_depth() <= max_queue);
    check(rows <= max_batch || started.size() == 1 || rows == 0 ||
          [&] {  // more rows than max_batch only when one request of them runs with work alone beside it
            std::size_t generations = 0;
            for (const auto& [id, held] : started) generations += held.rows > 0;
            return generations == 1;
          }());
  }
  // No deadlock: once everything started ends, every request still waiting starts, in order.
  for (const auto& [id, held] : started) admission.release(id);
  while (!queued.empty()) {
    auto next = admission.start_head();
    check(next && next->id == queued.front());
    admission.release(next->id);
    queued.pop_front();
  }
  check(admission.blocks().used() == 0 && admission.batch_rows() == 0 && admission.running() == 0);
  return 0;
}
