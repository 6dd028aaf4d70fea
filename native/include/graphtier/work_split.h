// Parallel loops that keep their speed when the cores are shared (work_split.cpp).
//
// OpenMP's parallel regions need every thread of the team: libgomp's idle threads spin between
// regions (unless OMP_WAIT_POLICY=PASSIVE was set before torch loaded it) and the region ends
// at a barrier that waits for the slowest thread. Beside a busy trainer a helper thread is often
// off its core, so each region waited for the scheduler to bring it back (or a spinning helper
// ate the timeslice the calling thread needed): a 5 ms sample took 50-120 ms. Here the calling
// thread claims chunks itself and helpers join when they get a core; a helper that never runs
// holds nothing up, idle helpers sleep in the kernel, and the caller waits only for chunks a
// helper has already started.
#pragma once

#include <cstdint>
#include <functional>

namespace graphtier {

// Runs body(begin, end) over [0, n) in chunks of at most `grain` items, on the calling thread
// and up to `threads - 1` helper threads of a process-wide pool (started on first use, again
// in a forked child). Chunks are disjoint and each runs once; the call returns when all have
// run. `threads <= 1`, n <= grain, or a pool busy with another caller's loop: the caller runs
// it all. An exception thrown by `body` is rethrown here once every started chunk has ended.
void parallel_chunks(int64_t n, int64_t grain, int threads,
                     const std::function<void(int64_t, int64_t)>& body);

}  // namespace graphtier
