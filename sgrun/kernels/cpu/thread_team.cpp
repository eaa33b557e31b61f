// A persistent team of spinning worker threads for the decode-size kernels (the matmul ops), in
// place of OpenMP's: torch-free, compiled first in the matmul unit (matmul.py's SOURCES).
//
// Why not at::parallel_for (OpenMP): a batch-1 step runs ~120 matmuls of 20-100 us each, so the
// cost of waking a worker per call decides the step time. libgomp's workers spin between parallel
// regions only while the process's OpenMP threads fit the CPUs (`gomp_managed_threads <=
// gomp_available_cpus`); past that they spin 100 times and sleep. The engine runs its steps on its
// own thread, and the main thread has a pool of its own from loading the model, so in the engine
// every region woke a sleeping worker: the same int4 matmul took 103-115 us on the engine thread
// against 39-41 us on the main thread (`OMP_WAIT_POLICY=ACTIVE` does not lift the throttle), and
// the batch-1 forward 19-20 ms against 9.4 (docs/cpu_kernels.md). This team's workers spin for
// `SGRUN_SPIN_US` (default 2,000 us) after their last job, then sleep on a condition variable.
//
// Work is split into chunks claimed through one atomic ticket (generation << 32 | next chunk), so
// a worker the OS has descheduled only means the caller does more chunks itself: no call ever
// waits for a late worker to start, only for chunks already claimed to finish. A worker that wakes
// after its job's generation has passed fails its claim and touches nothing. One job runs at a
// time; a second thread calling meanwhile runs its job inline. After fork() the child starts a
// fresh team (the parent's threads do not exist there).
//
// Idle work (`post_idle`): pieces a spinning worker runs while no job is posted, one at a time,
// checking for a job between pieces (a piece is a few microseconds), so a job never waits for more
// than one piece; a posting wakes a worker that has gone to sleep. decode_block.cpp posts the next
// decode step's first weights to be read into the cache while the engine thread runs Python between
// steps (the worker would only spin then).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <type_traits>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SG_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define SG_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define SG_CPU_RELAX() ((void)0)
#endif

namespace team {

using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
using PieceFn = bool (*)(void* ctx, int64_t piece);   // runs piece `piece`; false: there is no such piece

inline int64_t spin_us_from_env() {
  const char* v = std::getenv("SGRUN_SPIN_US");
  if (v == nullptr || *v == '\0') return 2000;
  const long long us = std::atoll(v);
  return us < 0 ? 0 : us;
}

class Team {
 public:
  Team() : spin_us_(spin_us_from_env()) {}

  // f(begin, end) over [0, n) in `chunks` contiguous chunks, on up to `threads` threads (the
  // caller among them). Returns when every chunk is done.
  void run(int threads, int64_t n, int64_t chunks, ChunkFn fn, void* ctx) {
    std::unique_lock<std::mutex> busy(run_mutex_, std::try_to_lock);
    if (!busy.owns_lock() || threads <= 1 || chunks <= 1) {   // another job is running: inline
      fn(ctx, 0, n);
      return;
    }
    grow(threads - 1);
    n_.store(n, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (ticket_.load(std::memory_order_relaxed) >> 32) + 1;
    ticket_.store(gen << 32, std::memory_order_seq_cst);   // publishes the fields above
    if (sleeping_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    work(gen);
    while (finished_.load(std::memory_order_acquire) < chunks) SG_CPU_RELAX();
    // Close the generation before the next job's fields are written: a worker that read this
    // generation's ticket with chunks left, then stalled while the caller finished them, compares
    // its chunk index with chunks_ again, and the next job's larger count would let its claim
    // succeed with the next job's fields (that chunk ran twice, and its extra count let the
    // caller return while a chunk still ran on the caller's stack: segfaults in for_each_tile,
    // fixed 7 December 2026). Its claim now fails, as the ticket moved on; no chunk index reaches kClosed.
    ticket_.store((gen << 32) | kClosed, std::memory_order_seq_cst);
  }

  // From now on, idle workers run fn(ctx, 0), fn(ctx, 1), ... until one returns false or the next
  // post_idle (fn null: none). When this returns no worker runs an earlier posting's piece, so its
  // ctx may be freed.
  void post_idle(PieceFn fn, void* ctx) {
    {
      std::lock_guard<std::mutex> lock(idle_mutex_);
      idle_fn_ = fn;
      idle_ctx_ = ctx;
      idle_next_ = 0;
      idle_posted_.store(fn != nullptr, std::memory_order_seq_cst);
    }
    // A worker past its spin sleeps until a job: wake it for the posting too (else a worker that
    // fell asleep while the caller finished a long job alone would never read it).
    if (fn != nullptr && sleeping_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
  }

 private:
  // One idle piece, if one is posted and no other worker holds the posting. Returns whether it ran.
  bool run_idle_piece() {
    if (!idle_posted_.load(std::memory_order_acquire)) return false;
    std::unique_lock<std::mutex> lock(idle_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || idle_fn_ == nullptr) return false;
    if (!idle_fn_(idle_ctx_, idle_next_++)) {
      idle_fn_ = nullptr;
      idle_posted_.store(false, std::memory_order_release);
    }
    return true;
  }

  // Claims and runs chunks of generation `gen` until none is left or the generation has passed.
  void work(uint64_t gen) {
    for (;;) {
      uint64_t t = ticket_.load(std::memory_order_acquire);
      int64_t c;
      do {
        if ((t >> 32) != gen) return;
        c = static_cast<int64_t>(t & 0xffffffffu);
        if (c >= chunks_.load(std::memory_order_relaxed)) return;
      } while (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire));
      // The claim succeeded while `gen` was current, so its fields stay as they are until this
      // chunk counts as finished.
      const int64_t n = n_.load(std::memory_order_relaxed), chunks = chunks_.load(std::memory_order_relaxed);
      fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), n * c / chunks, n * (c + 1) / chunks);
      finished_.fetch_add(1, std::memory_order_release);
    }
  }

  void grow(int workers) {
    while (static_cast<int>(started_) < workers) {
      std::thread([this] { worker(); }).detach();
      ++started_;
    }
  }

  void worker() {
    uint64_t seen = ticket_.load(std::memory_order_acquire) >> 32;
    for (;;) {
      uint64_t gen = wait_for_job(seen);
      seen = gen;
      work(gen);
    }
  }

  // Spins until a generation after `seen` is published, running idle pieces meanwhile; sleeps once
  // spin_us_ has passed, until a job or an idle posting (then spins again).
  uint64_t wait_for_job(uint64_t seen) {
    using clock = std::chrono::steady_clock;
    for (;;) {
      const auto deadline = clock::now() + std::chrono::microseconds(spin_us_);
      for (uint32_t i = 1;; ++i) {
        const uint64_t gen = ticket_.load(std::memory_order_acquire) >> 32;
        if (gen != seen) return gen;
        if (run_idle_piece()) continue;
        SG_CPU_RELAX();
        if ((i & 255) == 0 && clock::now() >= deadline) break;
      }
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      uint64_t gen = seen;
      wake_.wait(lock, [&] {
        gen = ticket_.load(std::memory_order_seq_cst) >> 32;
        return gen != seen || idle_posted_.load(std::memory_order_seq_cst);
      });
      sleeping_.fetch_sub(1, std::memory_order_seq_cst);
      if (gen != seen) return gen;
    }
  }

  static constexpr uint64_t kClosed = 0xffffffffu;   // a finished generation's ticket: nothing left to claim
  const int64_t spin_us_;
  std::mutex run_mutex_;
  int started_ = 0;                               // guarded by run_mutex_
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> n_{0}, chunks_{0}, finished_{0};
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleeping_{0};
  std::mutex idle_mutex_;                          // held while a piece runs, and by post_idle
  PieceFn idle_fn_ = nullptr;                      // guarded by idle_mutex_
  void* idle_ctx_ = nullptr;
  int64_t idle_next_ = 0;
  std::atomic<bool> idle_posted_{false};
};

// One team per process, never destroyed: its detached workers may still be spinning while static
// destructors run at exit. A forked child gets a new one (the old one's threads did not fork).
inline std::atomic<Team*>& current() {
  static std::atomic<Team*> team{nullptr};
  return team;
}

inline void reset_after_fork() { current().store(nullptr); }

inline Team& get() {
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, reset_after_fork); });
  Team* t = current().load(std::memory_order_acquire);
  if (t == nullptr) {
    static std::mutex creating;
    std::lock_guard<std::mutex> lock(creating);
    t = current().load(std::memory_order_acquire);
    if (t == nullptr) {
      t = new Team();
      current().store(t, std::memory_order_release);
    }
  }
  return *t;
}

// f(begin, end) over [0, n) split for `threads` threads: chunks of at least `grain`, up to four
// per thread (so a late worker costs a quarter of its share, not all of it).
template <class F>
void parallel_for(int threads, int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int64_t by_grain = (n + grain - 1) / (grain > 0 ? grain : 1);
  const int64_t chunks = std::min<int64_t>(std::min<int64_t>(by_grain, int64_t(threads) * 4), 0x7fffffff);
  if (threads <= 1 || chunks <= 1) {
    f(int64_t(0), n);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  get().run(threads, n, chunks, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
            const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace team
