// The fiber scheduler of the emulator: one ucontext fiber per CUDA thread, the threads of a block
// run cooperatively on one host thread and switch only at __syncthreads and warp collectives.
// Any disagreement that would hang or be undefined on a GPU aborts with the call sites named.
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "simt.h"
#include "simt_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

namespace simt {

thread_local ThreadCtx *tls_thread;
thread_local uint3 tls_block_idx;
thread_local dim3 tls_block_dim;
thread_local dim3 tls_grid_dim;

namespace {

// ASan wants bigger frames and keeps fake stacks; 64 KiB is plenty for the kernels otherwise.
constexpr size_t kStackBytes = SIMT_ASAN ? (96u << 10) : (64u << 10);
enum class State { runnable, barrier, warp, done };

struct Fiber {
  ucontext_t uc;
  char *stack = nullptr;  // kStackBytes above a PROT_NONE guard page
  State state = State::done;
  ThreadCtx ctx{};
  Op op = Op::sync;  // the pending collective, when state == warp
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int param = 0, width = 32, line = 0;
  const char *file = "";
  void *fake_stack = nullptr;
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<uint32_t> order;
  uint32_t num_threads = 0, live = 0, at_barrier = 0, round = 0;
  const char *bar_file = "";
  int bar_line = 0;
  Fiber *current = nullptr;
  ucontext_t sched;
  const void *sched_stack = nullptr;
  size_t sched_stack_bytes = 0;
  void (*body)(void *) = nullptr;
  void *arg = nullptr;
};

thread_local Block tls_blk;
uint64_t g_seed = 1;
int g_order = 0;  // 0 forward, 1 reverse, 2 random

std::string where(const Fiber &f) {
  char buf[160];
  snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", tls_block_idx.x, tls_block_idx.y,
           tls_block_idx.z, f.ctx.tid.x, f.ctx.tid.y, f.ctx.tid.z);
  return buf;
}

const char *op_name(Op op) {
  static const char *names[] = {"__shfl_sync",      "__shfl_xor_sync", "__shfl_up_sync",
                                "__shfl_down_sync", "__syncwarp",      "__ballot_sync",
                                "__any_sync",       "__all_sync",      "mma.sync"};
  return names[int(op)];
}

void switch_to_fiber(Block &b, Fiber &f) {
  b.current = &f;
  tls_thread = &f.ctx;
#if SIMT_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
  swapcontext(&b.sched, &f.uc);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  swapcontext(&b.sched, &f.uc);
#endif
}

// Called on the fiber: back to the scheduler until the fiber is runnable again.
void yield_fiber(Block &b, Fiber &f) {
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, b.sched_stack, b.sched_stack_bytes);
  swapcontext(&f.uc, &b.sched);
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#else
  swapcontext(&f.uc, &b.sched);
#endif
}

void fiber_main() {
  Block &b = tls_blk;
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.sched_stack, &b.sched_stack_bytes);
#endif
  b.body(b.arg);
  Fiber &f = *b.current;
  f.state = State::done;
  b.live--;
  if (b.at_barrier > 0)
    die("%s exited while %u threads wait at __syncthreads at %s:%d", where(f).c_str(), b.at_barrier,
        b.bar_file, b.bar_line);
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, b.sched_stack, b.sched_stack_bytes);
#endif
  setcontext(&b.sched);
}

char *new_stack() {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  void *p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("cannot map a fiber stack");
  mprotect(p, page, PROT_NONE);  // stacks grow down: an overflow hits the guard
  return static_cast<char *>(p) + page;
}

void init_fibers(Block &b, dim3 block) {
  b.num_threads = block.x * block.y * block.z;
  if (b.fibers.size() < b.num_threads) b.fibers.resize(b.num_threads);
  for (uint32_t i = 0; i < b.num_threads; ++i) {
    Fiber &f = b.fibers[i];
    if (!f.stack) f.stack = new_stack();
#if SIMT_ASAN
    __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
    f.state = State::runnable;
    f.ctx.tid = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    f.ctx.linear = i;
    f.ctx.lane = i % 32;
    f.ctx.warp = i / 32;
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = kStackBytes;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, fiber_main, 0);
  }
  b.live = b.num_threads;
  b.at_barrier = 0;
  b.round = 0;
}

void make_order(Block &b) {
  b.order.resize(b.num_threads);
  for (uint32_t i = 0; i < b.num_threads; ++i)
    b.order[i] = g_order == 1 ? b.num_threads - 1 - i : i;
  if (g_order != 2) return;
  uint64_t s = g_seed * 0x9E3779B97F4A7C15ull + (uint64_t(tls_block_idx.x) << 20) +
               (uint64_t(tls_block_idx.y) << 40) + tls_block_idx.z +
               b.round * 0x2545F4914F6CDD1Dull;
  for (uint32_t i = b.num_threads; i > 1; --i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::swap(b.order[i - 1], b.order[s % i]);
  }
}

[[noreturn]] void deadlock(Block &b) {
  fprintf(stderr, "simt: deadlock in block (%u,%u,%u): no thread can run\n", tls_block_idx.x,
          tls_block_idx.y, tls_block_idx.z);
  for (uint32_t i = 0; i < b.num_threads; ++i) {
    const Fiber &f = b.fibers[i];
    if (f.state == State::barrier)
      fprintf(stderr, "  %s waits at __syncthreads at %s:%d\n", where(f).c_str(), b.bar_file,
              b.bar_line);
    else if (f.state == State::warp)
      fprintf(stderr, "  %s waits in %s (mask 0x%08x) at %s:%d\n", where(f).c_str(), op_name(f.op),
              f.mask, f.file, f.line);
    else if (f.state == State::done)
      fprintf(stderr, "  %s has exited\n", where(f).c_str());
  }
  die("deadlock (a divergent barrier or a warp collective missing lanes)");
}

void run_block(Block &b) {
  while (b.live > 0) {
    make_order(b);
    b.round++;
    bool progress = false;
    for (uint32_t i : b.order) {
      Fiber &f = b.fibers[i];
      if (f.state != State::runnable) continue;
      switch_to_fiber(b, f);
      progress = true;
    }
    if (!progress) deadlock(b);
  }
}

}  // namespace

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "simt: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  abort();
}

void sync_threads(const char *file, int line) {
  Block &b = tls_blk;
  Fiber &f = *b.current;
  if (b.at_barrier > 0 && (b.bar_line != line || strcmp(b.bar_file, file) != 0))
    die("divergent __syncthreads: %s waits at %s:%d while %u threads wait at %s:%d",
        where(f).c_str(), file, line, b.at_barrier, b.bar_file, b.bar_line);
  if (b.live < b.num_threads)
    die("%s waits at __syncthreads at %s:%d but %u threads of the block have exited",
        where(f).c_str(), file, line, b.num_threads - b.live);
  b.bar_file = file;
  b.bar_line = line;
  f.state = State::barrier;
  if (++b.at_barrier == b.num_threads) {
    for (uint32_t i = 0; i < b.num_threads; ++i) b.fibers[i].state = State::runnable;
    b.at_barrier = 0;
  }
  yield_fiber(b, f);
}

namespace {

bool same_collective(const Fiber &a, const Fiber &b) {
  return a.op == b.op && a.mask == b.mask && a.line == b.line && strcmp(a.file, b.file) == 0;
}

uint32_t source_lane(const Fiber &f, uint32_t lane) {
  uint32_t w = uint32_t(f.width), base = lane & ~(w - 1), p = uint32_t(f.param);
  switch (f.op) {
    case Op::shfl_idx:
      return base + (p & (w - 1));
    case Op::shfl_xor:
      return ((lane ^ p) & ~(w - 1)) == base ? lane ^ p : lane;
    case Op::shfl_up:
      return lane >= base + p ? lane - p : lane;
    case Op::shfl_down:
      return lane + p < base + w ? lane + p : lane;
    default:
      return lane;
  }
}

// The last lane of the mask to arrive computes every lane's result and wakes them.
void complete_collective(Block &b, uint32_t warp_base, unsigned mask) {
  if (b.current->op == Op::mma) {  // the last lane to arrive
    uint64_t lanes[32];            // mma.sync's mask is the whole warp
    for (uint32_t l = 0; l < 32; ++l) lanes[l] = b.fibers[warp_base + l].value;
    mma_complete(lanes);
    for (uint32_t l = 0; l < 32; ++l) b.fibers[warp_base + l].state = State::runnable;
    return;
  }
  uint64_t votes = 0;
  bool any = false, all = true;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!(mask >> l & 1)) continue;
    bool v = b.fibers[warp_base + l].value != 0;
    votes |= uint64_t(v) << l;
    any = any || v;
    all = all && v;
  }
  for (uint32_t l = 0; l < 32; ++l) {
    if (!(mask >> l & 1)) continue;
    Fiber &f = b.fibers[warp_base + l];
    switch (f.op) {
      case Op::ballot:
        f.result = votes;
        break;
      case Op::any:
        f.result = any;
        break;
      case Op::all:
        f.result = all;
        break;
      case Op::sync:
        f.result = 0;
        break;
      default: {
        uint32_t src = source_lane(f, l);
        if (!(mask >> src & 1))
          die("%s: %s at %s:%d reads lane %u, which is not in mask 0x%08x", where(f).c_str(),
              op_name(f.op), f.file, f.line, src, mask);
        f.result = b.fibers[warp_base + src].value;
      }
    }
    f.state = State::runnable;
  }
}

}  // namespace

uint64_t warp_op(Op op, unsigned mask, uint64_t value, int param, int width, const char *file,
                 int line) {
  Block &b = tls_blk;
  Fiber &f = *b.current;
  uint32_t lane = f.ctx.lane, warp_base = f.ctx.warp * 32;
  if (!(mask >> lane & 1))
    die("%s calls %s at %s:%d with mask 0x%08x, which leaves it out", where(f).c_str(), op_name(op),
        file, line, mask);
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    die("%s: %s at %s:%d with width %d", where(f).c_str(), op_name(op), file, line, width);
  f.op = op, f.mask = mask, f.value = value, f.param = param, f.width = width;
  f.file = file, f.line = line;
  f.state = State::warp;
  bool complete = true;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!(mask >> l & 1)) continue;
    if (warp_base + l >= b.num_threads)
      die("%s: %s at %s:%d names lane %u, beyond the block", where(f).c_str(), op_name(op), file,
          line, l);
    const Fiber &o = b.fibers[warp_base + l];
    if (o.state == State::done)
      die("%s waits in %s at %s:%d (mask 0x%08x) but lane %u has exited", where(f).c_str(),
          op_name(op), file, line, mask, l);
    if (o.state != State::warp) {
      complete = false;
    } else if (!same_collective(o, f)) {
      if (o.mask >> lane & 1)  // o waits for us elsewhere: neither can go on
        die("%s is in %s at %s:%d (mask 0x%08x) while lane %u is in %s at %s:%d (mask 0x%08x)",
            where(f).c_str(), op_name(op), file, line, mask, l, op_name(o.op), o.file, o.line,
            o.mask);
      complete = false;
    }
  }
  if (complete) complete_collective(b, warp_base, mask);
  yield_fiber(b, f);
  return f.result;
}

namespace {

struct Grid {
  const LaunchConfig *cfg;
  void (*body)(void *);
  void *arg;
  std::atomic<uint64_t> next{0};
  uint64_t num_blocks;
};

void worker(Grid &g) {
  Block &b = tls_blk;
  b.body = g.body;
  b.arg = g.arg;
  tls_grid_dim = g.cfg->grid;
  tls_block_dim = g.cfg->block;
  const dim3 gd = g.cfg->grid;
  for (uint64_t i; (i = g.next.fetch_add(1)) < g.num_blocks;) {
    tls_block_idx =
        uint3{uint32_t(i % gd.x), uint32_t(i / gd.x % gd.y), uint32_t(i / (uint64_t(gd.x) * gd.y))};
    prepare_dynamic_smem(g.cfg->smem);
    init_fibers(b, g.cfg->block);
    run_block(b);
  }
  tls_thread = nullptr;
}

unsigned env_threads() {
  static const unsigned n = [] {
    const char *o = getenv("SIMT_ORDER"), *s = getenv("SIMT_SEED"), *t = getenv("SIMT_THREADS");
    if (o && strcmp(o, "reverse") == 0)
      g_order = 1;
    else if (o && strcmp(o, "random") == 0)
      g_order = 2;
    else if (o && strcmp(o, "forward") != 0)
      die("SIMT_ORDER=%s: use forward|reverse|random", o);
    if (s) g_seed = strtoull(s, nullptr, 10);
    return t ? unsigned(atoi(t) > 0 ? atoi(t) : 1) : 1u;
  }();
  return n;
}

}  // namespace

bool launch_config_ok(const LaunchConfig &cfg, const void *kernel_id) {
  const dim3 g = cfg.grid, bl = cfg.block;
  uint64_t threads = uint64_t(bl.x) * bl.y * bl.z;
  return !(g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535 || threads == 0 ||
           threads > 1024 || bl.z > 64 || cfg.smem > max_dynamic_smem(kernel_id));
}

void run_grid(const LaunchConfig &cfg, const void *kernel_id, void (*body)(void *), void *arg) {
  unsigned workers = env_threads();
  const dim3 g = cfg.grid;
  if (!launch_config_ok(cfg, kernel_id)) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  Grid grid{&cfg, body, arg, {0}, uint64_t(g.x) * g.y * g.z};
  if (workers <= 1 || grid.num_blocks == 1) {
    worker(grid);
    return;
  }
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < workers; ++i) pool.emplace_back([&grid] { worker(grid); });
  for (auto &t : pool) t.join();
}

}  // namespace simt
