// A small pool of sleeping helper threads for parallel_chunks (see graphtier/work_split.h).
//
// One loop runs at a time: its Job is shared with the helpers through a shared_ptr, so a
// helper that wakes after the loop has ended finds every chunk claimed and lets go without
// touching the caller's (gone) body. A child forked from a process that had a pool starts its
// own: the parent's helper threads do not exist there and its mutexes may be held.
#include "graphtier/work_split.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace graphtier {
namespace {

constexpr int kMaxHelpers = 63;
// Checks of the done counter before the caller sleeps: about a microsecond, enough for a
// chunk that a running helper is about to finish, short enough never to steal a core.
constexpr int kSpinChecks = 256;

struct Job {
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t n = 0;
  int64_t grain = 1;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};  // next chunk to claim
  std::atomic<int64_t> done{0};  // chunks finished (or skipped after a failure)
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first failure; written once, under `failed`
  std::mutex mutex;
  std::condition_variable finished;

  // Claims and runs chunks until none is left; true when this thread finished the last one.
  bool work() {
    bool last = false;
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      if (!failed.load(std::memory_order_relaxed)) {
        const int64_t begin = c * grain;
        try {
          (*body)(begin, std::min(n, begin + grain));
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
      last = done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks;
    }
    return last;
  }
};

class Pool {
 public:
  // The pool of this process: a forked child gets a new one (the parent's is left alone).
  static Pool& instance() {
    static std::atomic<Pool*> current{nullptr};
    Pool* pool = current.load(std::memory_order_acquire);
    if (pool == nullptr || pool->pid_ != getpid()) {
      static std::mutex create;
      std::lock_guard<std::mutex> lock(create);
      pool = current.load(std::memory_order_acquire);
      if (pool == nullptr || pool->pid_ != getpid()) {
        pool = new Pool();  // never freed: helpers outlive static destruction safely
        current.store(pool, std::memory_order_release);
      }
    }
    return *pool;
  }

  // Runs `job` with up to `helpers` helpers; false (nothing run) when another loop holds the pool.
  bool run(const std::shared_ptr<Job>& job, int helpers) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    helpers = std::min(helpers, kMaxHelpers);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < helpers) {
        threads_.emplace_back([this] { serve(); });
        threads_.back().detach();
      }
      job_ = job;
      wanted_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    bool last = job->work();
    if (!last) {
      for (int i = 0; i < kSpinChecks && job->done.load(std::memory_order_acquire) < job->chunks; ++i) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      std::unique_lock<std::mutex> lock(job->mutex);
      job->finished.wait(lock, [&] { return job->done.load(std::memory_order_acquire) == job->chunks; });
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_.reset();
    }
    return true;
  }

 private:
  Pool() : pid_(getpid()) {}

  void serve() {
    uint64_t seen = 0;
    int index = -1;  // this helper's place in the pool: helpers beyond `wanted_` stay asleep
    {
      std::lock_guard<std::mutex> lock(mutex_);
      index = joined_++;
      seen = generation_ - 1;  // the loop that started this helper is still to be served
    }
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (index < wanted_) job = job_;
      }
      if (job && job->work()) {
        std::lock_guard<std::mutex> lock(job->mutex);
        job->finished.notify_one();
      }
    }
  }

  const pid_t pid_;
  std::mutex busy_;   // held by the caller whose loop is running
  std::mutex mutex_;  // guards the fields below
  std::condition_variable wake_;
  std::vector<std::thread> threads_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
  int wanted_ = 0;
  int joined_ = 0;
};

}  // namespace

void parallel_chunks(int64_t n, int64_t grain, int threads,
                     const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  const int helpers = static_cast<int>(std::min<int64_t>(threads, chunks)) - 1;
  if (helpers > 0) {
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->n = n;
    job->grain = grain;
    job->chunks = chunks;
    if (Pool::instance().run(job, helpers)) {
      if (job->failed.load()) std::rethrow_exception(job->error);
      return;
    }
  }
  body(0, n);
}

}  // namespace graphtier
