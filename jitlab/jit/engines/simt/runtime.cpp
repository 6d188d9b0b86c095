// runtime.cpp: the CPU emulator's scheduler. Blocks over OS threads, a block's threads as fibers.
//
// A launch hands out blocks to `workers` OS threads (the caller is one). A worker runs one block
// at a time: each GPU thread is a fiber with its own stack, started in thread order and run until it
// reaches a barrier, a warp collective or its end; then the next one runs. Only those points switch, so
// a block of 256 threads with 9 barriers costs about 256 x 10 context switches of a few ns (saved callee
// registers and a stack pointer: no system call, unlike ucontext's swapcontext).
//
//   __syncthreads: the fiber counts itself in (the barrier's line, its predicate) and switches straight to
//       the next thread in order when that one can run, else to the scheduler. When every live thread of
//       the block waits, the barrier opens (a generation count: no pass over the threads). When some
//       thread has returned instead, the launch fails naming the line (a GPU would hang or silently
//       misbehave).
//   warp collectives: a lane deposits its value and yields. When every lane its mask names has
//       arrived (the closure of their masks), the collective is computed for all of them at once.
//       A mask naming a lane that has returned, or that the block does not have, fails the launch
//       at the line; so does a deadlock (lanes waiting for one that waits at a barrier).
//
// A fault (assert, __trap, an out-of-bounds index on a shared array caught by -fsanitize=bounds, a
// bad address caught as SIGSEGV, a race the access hooks found) stops the launch: the faulting fiber
// is switched out for good, and every worker leaves its current block and takes no new one.
//
// Sections: the context switch; the scheduler (Worker); barriers and warp collectives; faults; the C
// entry points; the race detector (GCC's -fsanitize=thread hooks, answered here).
#include "jitlab_simt.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <cstdarg>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// ---- context switch: callee-saved registers on the old stack, then the other stack's -------------
extern "C" void jitlab_simt_switch(void** save_sp, void* load_sp);
#if defined(__x86_64__)
asm(R"(
.text
.globl jitlab_simt_switch
.hidden jitlab_simt_switch
.type jitlab_simt_switch,@function
jitlab_simt_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size jitlab_simt_switch,.-jitlab_simt_switch
)");
constexpr size_t kSavedWords = 6;  // r15 r14 r13 r12 rbx rbp, then the return address
#elif defined(__aarch64__)
asm(R"(
.text
.globl jitlab_simt_switch
.hidden jitlab_simt_switch
.type jitlab_simt_switch,%function
jitlab_simt_switch:
    sub sp, sp, #160
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x2, sp
    str x2, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #160
    ret
.size jitlab_simt_switch,.-jitlab_simt_switch
)");
#else
#error "jitlab's CPU emulator switches fibers on x86_64 and aarch64 only"
#endif

namespace jitlab_simt {
namespace {

enum class State : uint8_t { Ready, Yielded, AtBarrier, AtWarp, Done, Faulted };
struct Worker;
[[noreturn]] void fiber_main();

/// One GPU thread, in its fiber's slot where self() finds it (ThreadVars first).
struct Thread {
    ThreadVars vars;
    // What an access hook lets through without a call (memory_checks.inc's fast_access), copied from its
    // worker: the shared arrays and dynamic shared memory (plain runs; empty spans in checked ones) and the stacks;
    // the launch's first tensors are in vars (ThreadVars::tensor_lo, read by the snippet's inline tests too).
    uintptr_t fast_lo, fast_span, dyn_lo, dyn_span, stack_lo, stack_span;
    void* sp;
    Worker* worker;
    State state;
    unsigned linear, lane, warp;
    unsigned barriers, warp_syncs;  // barriers and warp collectives passed: what orders two accesses
    const char* file;  // where it waits
    int line;
    // a barrier
    BarrierOp barrier_op;
    int predicate;
    uint32_t barrier_gen;  // the worker's barrier_gen when it arrived: it may go on once that barrier opened
    // a warp collective
    WarpOp op;
    unsigned mask;
    int arg, width;
    uint64_t value, result;
    uint32_t yield_pc;  // where it last gave way (a volatile read, a failed compare-and-swap): a time limit's line
    // A write that overwrote another thread's unordered write (memory_checks.inc): judged when the thread next
    // touches memory or stops, a race only if the value changed.
    uint8_t pending_bytes;
    uintptr_t pending_address;
    uint64_t pending_old, pending_other;
    uint32_t pending_pc, pending_other_pc;
};
static_assert(sizeof(Thread) + 64 * 64 <= kStackBytes - kRecordOffset, "a thread's record fits in its slot");

struct Warp {
    unsigned exists, done, waiting;  // lane masks
};

/// What a checked run knows of one shared-memory granule or output element: the last write and two reads
/// (packed keys: memory_checks.inc's key_of) and where in the code each was (offsets in the snippet's library).
struct Cell {
    uint64_t w = 0, r0 = 0, r1 = 0;
    uint32_t wpc = 0, r0pc = 0, r1pc = 0;
    uint8_t wmask = 15, r0mask = 15, r1mask = 15;  // the bytes of a shared granule each access touched
};
/// A tensor of the launch, from Python (memory_checks.inc checks accesses against it).
struct Region {
    uintptr_t start, end;
    size_t item;
    bool writable;
    std::string name;
    std::unique_ptr<Cell[]> cells;  // checked runs, writable tensors: one per element
};
std::vector<Region> next_regions;              // the next launch's tensors (set by Python before it)
constexpr size_t kMaxCells = size_t(1) << 24;  // elements of one output watched for races

/// A region of fiber slots, each kStackBytes and aligned to it: a guard page, the stack, the record.
struct Stacks {
    char* base = nullptr;
    size_t count = 0;
    void* mapping = nullptr;
    size_t mapped = 0;
};

/// One kernel launch, shared by its workers.
struct Launch {
    dim3 grid, block;
    size_t shared_bytes;
    void (*body)(void*);
    void* closure;
    const char* kernel;
    uint64_t blocks;
    bool check;              // the race detector on (jitlab.check)
    bool in_turn;            // its threads only end: run one after the other (Worker::run_in_turn)
    int (*steps)(void*);     // its lock-step twin, to run a block in one call (Worker::run_steps), or null
    void* steps_closure;
    uint32_t first_serial;   // block b runs as serial first_serial + b (keys tell blocks and launches apart)
    double timeout;          // seconds, 0: none
    std::vector<Region> regions;                // its tensors (memory_checks.inc)
    Stacks stacks;                              // every worker's fiber slots, in one mapping
    std::atomic<int> stop{0};                   // 1: past the time limit, 2: Ctrl-C
    std::atomic<bool> synchronising{false};     // a fence, flag or atomic was used: accesses between blocks trusted
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex lock;
    std::string error, error_name;

    void fail(const char* name, const std::string& what) {
        std::lock_guard<std::mutex> g(lock);
        if (!failed.exchange(true)) {
            error_name = name;
            error = what;
        }
    }
};

// Each launch maps its fiber stacks and unmaps them at its end. A guard page per stack splits the mapping
// into two areas per stack, and every snippet's library has its own copy of this runtime, so stacks kept
// for later launches (a pool per library) reached the kernel's limit on a process's memory areas
// (vm.max_map_count, 65530) after ~30 snippets with 1024-thread blocks: then no thread could start.
// Mapping 1024 stacks costs about a millisecond a launch.
Stacks take_stacks(size_t count) {
    Stacks s;
    s.count = count;
    s.mapped = (count + 1) * kStackBytes;
    s.mapping = mmap(nullptr, s.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s.mapping == MAP_FAILED) return Stacks{};
    s.base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(s.mapping) + kStackBytes - 1) & ~(kStackBytes - 1));
    const long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < count; ++i) mprotect(s.base + i * kStackBytes, (size_t)page, PROT_NONE);
    return s;
}

void give_back(Stacks s) {
    if (s.mapping) munmap(s.mapping, s.mapped);
}

/// One OS thread running blocks.
struct Worker {
    Launch* launch;
    Stacks stacks;
    std::vector<Warp> warps;
    std::vector<unsigned char> shared;  // this block's dynamic shared memory
    void* scheduler_sp = nullptr;
    Thread* current = nullptr;
    unsigned threads = 0, live = 0, at_barrier = 0;
    unsigned turns = 0;  // threads run_in_turn's fiber has run
    bool single = false;  // the block runs in one fiber (run_in_turn, run_steps): no other slot was started
    bool steps_declined = false;  // the twin found the block too large for its slots: fibers for this launch
    // The barrier being reached (barrier() counts each arrival in) and the last one opened (what its
    // __syncthreads_count/and/or return).
    uint32_t barrier_gen = 0;
    const char* barrier_file = nullptr;
    int barrier_line = 0;
    bool barrier_mixed = false;  // threads wait at different __syncthreads(): open_barrier says which
    int arrived_count = 0, arrived_all = 1, arrived_any = 0, opened_count = 0, opened_all = 1, opened_any = 0;
    uint3 block_index{0, 0, 0};
    uint32_t serial = 0;
    bool epoch_sync = false;  // a fence, flag or atomic in this barrier interval (memory_checks.inc)
    // What an access may touch (memory_checks.inc): the fiber stacks, the snippet's TLS block (static
    // __shared__ arrays), the plain run's fast span within it, dynamic shared memory, the snippet's globals.
    uintptr_t stack_lo = 0, stack_span = 0, tls_lo = 0, tls_span = 0, fast_lo = 0, fast_span = 0;
    uintptr_t dyn_lo = 0, dyn_bytes = 0, module_lo = 0, module_hi = 0;
    bool dyn_used = false;  // the kernel asked for its extern __shared__ memory (dynamic_shared) in this launch
    std::vector<Cell> tls_cells, dyn_cells;
    std::vector<std::string> unwritten_reads;  // the interval's first read of unwritten shared memory, if any
    bool no_interrupt = false;  // in printf: a time limit's signal waits

    Thread* thread(unsigned i) {
        uintptr_t slot = reinterpret_cast<uintptr_t>(stacks.base) + i * kStackBytes;
        return reinterpret_cast<Thread*>(slot + kRecordOffset + colour(slot));
    }
    void run(unsigned index);
    bool run_block(uint64_t b);
    void start(Thread* t, void (*entry)());
    void identify(Thread* t, unsigned i);  // slot t's record says it is thread i of this block
    void begin(Thread* t, unsigned i, void (*entry)() = &fiber_main);  // thread i, ready to run from slot t
    bool run_single(void (*entry)(), const char* judged);
    bool run_in_turn();
    int run_steps();
    bool ended();
    bool resume(Thread* t, unsigned* last);
    bool runnable(const Thread* t) const {
        return t->state == State::Ready || t->state == State::Yielded ||
               (t->state == State::AtBarrier && t->barrier_gen != barrier_gen);
    }
    bool open_barrier();
    bool try_warp(Thread* t);
    bool resolve_activemask();
    void deadlock();
    void stopped(const Thread* t);
    void map_memory();
    uintptr_t dynamic_base() const {  // this block's extern __shared__ array: 16-byte aligned, as on a GPU
        return (reinterpret_cast<uintptr_t>(shared.data()) + 15) & ~uintptr_t(15);
    }
    std::string where(const Thread* t) const;
    std::string where_index(unsigned i) const;  // thread i of this block, as where() says it
};

// The runtime's hooks read it where the stack pointer does not say (outside a fiber, or a launch that does not
// own the fiber range): x86_64 builds use TLS descriptors (-mtls-dialect=gnu2), no __tls_get_addr call.
thread_local Worker* this_worker = nullptr;
// The fiber slots of the launch running now (all its workers'), for the access hooks: a stack pointer in them is
// a GPU thread's, whose record its slot holds (memory_checks.inc's fast_access).
std::atomic<bool> fibers_claimed{false};
std::atomic<uintptr_t> fibers_lo{0}, fibers_span{0};
std::string settled(Worker* w, Thread* t);
std::string code_candidates(uintptr_t pc, uintptr_t sp, const Worker* w, uint32_t also);
std::string stop_message(const Launch* l, bool interrupted, const std::string& at);

[[noreturn]] void fiber_main() {
    Thread* t = reinterpret_cast<Thread*>(self());
    Launch* l = t->worker->launch;
    l->body(l->closure);
    t->state = State::Done;
    jitlab_simt_switch(&t->sp, t->worker->scheduler_sp);
    __builtin_unreachable();
}

// Worker::run_in_turn's fiber: the block's threads one after the other in the one record, no switch between them;
// it stops early when the launch is stopped or failed (Worker::turns says how many ran).
[[noreturn]] void fiber_turns();
// Worker::run_steps's fiber: the kernel's lock-step twin, once for the whole block.
[[noreturn]] void fiber_steps();
std::string returned_message(const Worker* w, const char* barrier, const char* file, int line, unsigned reached,
                             const std::string& gone);

std::string format(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

std::string lanes(unsigned m) {
    std::string s;
    for (unsigned i = 0; i < 32; ++i) {
        if (m >> i & 1u) s += (s.empty() ? "" : ", ") + std::to_string(i);
    }
    return s;
}

const char* op_name(WarpOp op) {
    static const char* names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync", "__ballot_sync", "__any_sync", "__all_sync", "__activemask",
                                  "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                                  "__match_any_sync", "__match_all_sync"};
    return names[(int)op];
}

const char* barrier_name(BarrierOp op) {
    static const char* names[] = {"__syncthreads()", "__syncthreads_count()", "__syncthreads_and()",
                                  "__syncthreads_or()"};
    return names[(int)op];
}

std::string Worker::where(const Thread* t) const {
    return format("thread (%u, %u, %u) of block (%u, %u, %u)", t->vars.thread_idx.x, t->vars.thread_idx.y,
                  t->vars.thread_idx.z, block_index.x, block_index.y, block_index.z);
}

std::string Worker::where_index(unsigned i) const {
    const dim3 k = launch->block;
    return format("thread (%u, %u, %u) of block (%u, %u, %u)", i % k.x, i / k.x % k.y, i / k.x / k.y, block_index.x,
                  block_index.y, block_index.z);
}

void Worker::start(Thread* t, void (*entry)()) {
    // The first switch into the fiber "returns" into its entry with the ABI's stack alignment.
    void** sp = reinterpret_cast<void**>(reinterpret_cast<char*>(t) - 2 * colour(reinterpret_cast<uintptr_t>(t)) - 64);
#if defined(__x86_64__)
    *--sp = nullptr;  // the entry's return address: it never returns
    *--sp = reinterpret_cast<void*>(entry);
    for (size_t i = 0; i < kSavedWords; ++i) *--sp = nullptr;
#else
    sp -= 20;  // 160 bytes: x19..x30 and d8..d15, x30 (the return address) at [sp, #88]
    for (int i = 0; i < 20; ++i) sp[i] = nullptr;
    sp[11] = reinterpret_cast<void*>(entry);
#endif
    t->sp = sp;
}

// Run `t` (and the threads it hands over to at barriers) until one switches back here: that one's index in *last.
bool Worker::resume(Thread* t, unsigned* last) {
    current = t;
    t->state = State::Ready;
    jitlab_simt_switch(&scheduler_sp, t->sp);
    t = current;
    *last = t->linear;
    current = nullptr;
    if (t->pending_bytes && t->state != State::Faulted) {
        std::string why = settled(this, t);
        if (!why.empty()) {
            launch->fail("Race", why);
            return false;
        }
    }
    Warp& w = warps[t->warp];
    switch (t->state) {
        case State::Done:  // lanes waiting at a collective may name this one: check them now
            --live;
            w.done |= 1u << t->lane;
            return w.waiting ? try_warp(thread(t->warp * 32 + (unsigned)__builtin_ctz(w.waiting))) : true;
        case State::AtWarp:
            return try_warp(t);
        case State::Faulted:
            return false;
        default:
            return true;
    }
}

bool Worker::open_barrier() {
    if (barrier_mixed) {  // name the first thread in order and the first that waits elsewhere
        const Thread* first = nullptr;
        for (unsigned i = 0; i < threads; ++i) {
            Thread* t = thread(i);
            if (t->state != State::AtBarrier) continue;
            if (!first) {
                first = t;
            } else if (t->line != first->line || t->file != first->file) {
                launch->fail("BarrierDivergence",
                             format("the threads of block (%u, %u, %u) wait at different barriers: %s at %s:%d (%s) "
                                    "and %s at %s:%d (%s); on a GPU each __syncthreads() is its own barrier, so they "
                                    "would hang or pass out of step: every thread must reach the same "
                                    "__syncthreads() (move it out of the branch)",
                                    block_index.x, block_index.y, block_index.z, barrier_name(first->barrier_op),
                                    first->file, first->line, where(first).c_str(), barrier_name(t->barrier_op),
                                    t->file, t->line, where(t).c_str()));
                return false;
            }
        }
    }
    if (!unwritten_reads.empty()) {  // read before any write, and no thread wrote it since: uninitialised
        launch->fail("Uninitialised", unwritten_reads.front());
        return false;
    }
    epoch_sync = false;
    opened_count = arrived_count, opened_all = arrived_all, opened_any = arrived_any;
    ++barrier_gen;  // every thread waiting at it may go on (runnable)
    at_barrier = 0;
    return true;
}

// A lane arrived at a warp collective: compute it if every lane its group names has arrived.
bool Worker::try_warp(Thread* t) {
    if (t->op == WarpOp::Activemask) return true;  // resolved when nothing else can run
    Warp& w = warps[t->warp];
    const unsigned me = 1u << t->lane;
    w.waiting |= me;
    auto absent = [&](unsigned missing) {  // a mask naming lanes this warp does not have
        launch->fail("WarpMaskError",
                     format("%s at %s:%d: its mask 0x%08x names lanes %s, which this warp does not have (the "
                            "block has %u threads, so warp %u has lanes %s only); pass a mask of the lanes that "
                            "exist, e.g. __activemask() or __ballot_sync(0xffffffff, 1) taken before (%s)",
                            op_name(t->op), t->file, t->line, t->mask, lanes(missing).c_str(), threads, t->warp,
                            lanes(w.exists).c_str(), where(t).c_str()));
        return false;
    };
    if (!(t->mask & me)) {
        launch->fail("WarpMaskError",
                     format("%s at %s:%d: its mask 0x%08x does not include the calling lane %u (%s); a lane "
                            "passes a mask that names itself, e.g. 0xffffffff or __activemask()",
                            op_name(t->op), t->file, t->line, t->mask, t->lane, where(t).c_str()));
        return false;
    }
    if (t->mask & ~w.exists & ~w.done) {  // checked on the caller's own mask first: O(1) per arrival
        return absent(t->mask & ~w.exists);
    }
    if (t->mask & ~w.waiting & ~w.done) return true;  // lanes it names are still on their way
    unsigned group = t->mask, seen = 0;
    while (unsigned todo = group & w.waiting & ~seen) {  // the closure of the arrived lanes' masks
        for (unsigned i = 0; i < 32; ++i) {
            if (todo >> i & 1u) group |= thread(t->warp * 32 + i)->mask;
        }
        seen |= todo;
    }
    if (unsigned missing = group & ~w.exists) return absent(missing);
    if (unsigned gone = group & w.done) {
        launch->fail("WarpMaskError",
                     format("%s at %s:%d: its mask 0x%08x names lanes %s, which have already returned (%s); a "
                            "lane that left the kernel early (`if (i >= n) return;`) cannot take part: keep every "
                            "lane the mask names alive until the collective, or build the mask with "
                            "__ballot_sync(0xffffffff, i < n) before any lane returns",
                            op_name(t->op), t->file, t->line, t->mask, lanes(gone).c_str(), where(t).c_str()));
        return false;
    }
    if (group & ~w.waiting) return true;  // not all here yet
    Thread* lane[32];
    for (unsigned i = 0; i < 32; ++i) lane[i] = (group >> i & 1u) ? thread(t->warp * 32 + i) : nullptr;
    for (unsigned i = 0; i < 32; ++i) {
        if (lane[i] && lane[i]->op != t->op) {
            launch->fail("WarpDivergence",
                         format("lanes of warp %u meet at different warp collectives: %s at %s:%d (lane %u) and "
                                "%s at %s:%d (lane %u); lanes that a mask names must all call the same one",
                                t->warp, op_name(t->op), t->file, t->line, t->lane, op_name(lane[i]->op),
                                lane[i]->file, lane[i]->line, i));
            return false;
        }
    }
    uint64_t ballot = 0, sum = 0, band = ~0ull, bor = 0, bxor = 0;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (unsigned i = 0; i < 32; ++i) {
        if (!lane[i]) continue;
        uint64_t v = lane[i]->value;
        ballot |= (uint64_t)(v != 0) << i;
        sum += v, band &= v, bor |= v, bxor ^= v;
        lo = std::min(lo, (int64_t)v), hi = std::max(hi, (int64_t)v);
    }
    for (unsigned i = 0; i < 32; ++i) {
        Thread* x = lane[i];
        if (!x) continue;
        const unsigned width = (unsigned)x->width;
        const unsigned seg = i & ~(width - 1u);
        unsigned src = i;
        switch (x->op) {
            case WarpOp::Idx: src = seg + ((unsigned)x->arg & (width - 1u)); break;
            case WarpOp::Up: src = i >= seg + (unsigned)x->arg ? i - (unsigned)x->arg : i; break;
            case WarpOp::Down: src = i + (unsigned)x->arg < seg + width ? i + (unsigned)x->arg : i; break;
            case WarpOp::Xor: src = (i ^ (unsigned)x->arg) < seg + width ? i ^ (unsigned)x->arg : i; break;
            default: break;
        }
        switch (x->op) {
            case WarpOp::Idx: case WarpOp::Up: case WarpOp::Down: case WarpOp::Xor:
                // a lane outside the mask: undefined on a GPU (a kernel that ignores it is correct); its own value here
                x->result = src < 32 && lane[src] ? lane[src]->value : x->value;
                break;
            case WarpOp::MatchAny: {
                uint64_t peers = 0;
                for (unsigned j = 0; j < 32; ++j) peers |= (uint64_t)(lane[j] && lane[j]->value == x->value) << j;
                x->result = peers;
                break;
            }
            case WarpOp::MatchAll: {
                bool same = true;
                for (unsigned j = 0; j < 32; ++j) same &= !lane[j] || lane[j]->value == x->value;
                x->result = same ? group : 0;
                break;
            }
            case WarpOp::Ballot: x->result = ballot; break;
            case WarpOp::Any: x->result = ballot != 0; break;
            case WarpOp::All: x->result = (ballot & group) == group; break;
            case WarpOp::Add: x->result = (uint32_t)sum; break;
            case WarpOp::Min: x->result = (uint64_t)lo; break;
            case WarpOp::Max: x->result = (uint64_t)hi; break;
            case WarpOp::And: x->result = (uint32_t)band; break;
            case WarpOp::Or: x->result = (uint32_t)bor; break;
            case WarpOp::Xor_: x->result = (uint32_t)bxor; break;
            default: x->result = 0; break;
        }
        x->state = State::Ready;
    }
    w.waiting &= ~group;
    return true;
}

// Every live lane is waiting: lanes at __activemask() learn which lanes reached the same call.
bool Worker::resolve_activemask() {
    bool any = false;
    for (unsigned i = 0; i < threads; ++i) {
        Thread* t = thread(i);
        if (t->state != State::AtWarp || t->op != WarpOp::Activemask) continue;
        unsigned group = 0;
        for (unsigned j = t->warp * 32; j < std::min(threads, t->warp * 32 + 32); ++j) {
            Thread* o = thread(j);
            if (o->state == State::AtWarp && o->op == WarpOp::Activemask && o->line == t->line && o->file == t->file)
                group |= 1u << o->lane;
        }
        t->result = group;
        any = true;
    }
    for (unsigned i = 0; i < threads; ++i) {
        Thread* t = thread(i);
        if (t->state == State::AtWarp && t->op == WarpOp::Activemask) {
            t->state = State::Ready;
            warps[t->warp].waiting &= ~(1u << t->lane);
        }
    }
    return any;
}

// Nothing can run: say who waits for whom.
void Worker::deadlock() {
    const Thread* barrier = nullptr;
    for (unsigned i = 0; i < threads && !barrier; ++i) {
        if (thread(i)->state == State::AtBarrier) barrier = thread(i);
    }
    for (unsigned i = 0; i < threads; ++i) {
        Thread* t = thread(i);
        if (t->state != State::AtWarp) continue;
        const Warp& w = warps[t->warp];
        unsigned missing = t->mask & ~w.waiting;
        for (unsigned l = 0; l < 32; ++l) {
            if (!(missing >> l & 1u)) continue;
            Thread* o = thread(t->warp * 32 + l);
            std::string at = o->state == State::AtBarrier
                                 ? format("waits at %s at %s:%d", barrier_name(o->barrier_op), o->file, o->line)
                             : o->state == State::Done ? std::string("has already returned")
                                                       : std::string("waits at another warp collective");
            launch->fail("Deadlock",
                         format("%s at %s:%d waits for lane %u, which %s (%s): the two wait for each other for ever; "
                                "a warp collective's mask names only lanes that reach that same call",
                                op_name(t->op), t->file, t->line, l, at.c_str(), where(t).c_str()));
            return;
        }
    }
    launch->fail("Deadlock", format("the threads of block (%u, %u, %u) wait for each other (%s)", block_index.x,
                                    block_index.y, block_index.z,
                                    barrier ? format("one at %s:%d", barrier->file, barrier->line).c_str() : "?"));
}

std::string returned_message(const Worker* w, const char* barrier, const char* file, int line, unsigned reached,
                             const std::string& gone) {
    return format("%s at %s:%d is reached by %u of the %u threads of block (%u, %u, %u): %s had already returned, so "
                  "on a GPU the others would wait for it (a hang, or undefined behaviour); every thread of a block "
                  "must reach each __syncthreads(): guard the work with `if (i < n)` instead of returning early",
                  barrier, file, line, reached, w->threads, w->block_index.x, w->block_index.y, w->block_index.z,
                  gone.c_str());
}

void Worker::identify(Thread* t, unsigned i) {
    const dim3 k = launch->block;
    t->vars.thread_idx = {i % k.x, i / k.x % k.y, i / k.x / k.y};  // field by field: map_memory set the tensors
    t->vars.block_idx = block_index, t->vars.block_dim = k, t->vars.grid_dim = launch->grid;
    t->vars.plain = launch->check ? 0u : 1u;
    t->linear = i, t->lane = i % 32, t->warp = i / 32;
}

void Worker::begin(Thread* t, unsigned i, void (*entry)()) {
    identify(t, i);
    t->worker = this;
    t->state = State::Ready;
    t->mask = 0;
    t->barriers = t->warp_syncs = 0;
    t->yield_pc = 0, t->pending_bytes = 0;
    start(t, entry);
}

void fiber_turns() {
    Thread* t = reinterpret_cast<Thread*>(self());
    Worker* w = t->worker;
    Launch* l = w->launch;
    for (w->turns = 0;;) {
        l->body(l->closure);
        if (++w->turns == w->threads || l->stop.load(std::memory_order_relaxed) ||
            l->failed.load(std::memory_order_relaxed)) {
            break;
        }
        w->identify(t, w->turns);
    }
    t->state = State::Done;
    jitlab_simt_switch(&t->sp, w->scheduler_sp);
    __builtin_unreachable();
}

// The block in one fiber from the first slot (run_in_turn, run_steps), resumed while a compare-and-swap another
// worker's block won gives way (nothing else of this block can run): true when the fiber ended; false when the launch
// failed or stopped, or the fiber waited where jitlab judged it could not (`judged` says what was judged).
bool Worker::run_single(void (*entry)(), const char* judged) {
    Thread* t = thread(0);
    single = true;
    begin(t, 0, entry);
    if (launch->stop.load(std::memory_order_relaxed)) {
        stopped(t);
        return false;
    }
    unsigned last;
    do {
        if (!resume(t, &last) || launch->failed.load(std::memory_order_relaxed)) return false;
    } while (t->state == State::Yielded && !launch->stop.load(std::memory_order_relaxed));
    if (t->state == State::Yielded) {
        stopped(t);
        return false;
    }
    if (t->state != State::Done) {  // say so rather than hang
        launch->fail("KernelFault", format("%s of kernel %s waits, %s; please report this kernel", where(t).c_str(),
                                           launch->kernel, judged));
        return false;
    }
    single = false;
    return true;
}

// The block ran to its end: true, unless a read of shared memory no thread wrote is left to report.
bool Worker::ended() {
    if (unwritten_reads.empty()) return true;
    launch->fail("Uninitialised", unwritten_reads.front());
    return false;
}

// A kernel that can only end (no barrier, warp collective or spin-wait in its library): its threads run one after
// the other, in thread order as the fibers would, inside one fiber call from the first slot (fiber_turns). A block
// then touches one record and one stack instead of 256, which all missed the cache, and switches twice instead of
// twice a thread: a vector add's thread costs 35 ns instead of 150 (with the unhooked shim and reads).
bool Worker::run_in_turn() {
    if (!run_single(&fiber_turns, "in a library jitlab judged unable to wait (no barrier, warp collective or "
                                  "spin-wait in its unit)")) {
        return false;
    }
    if (turns < threads) {  // stopped between two threads
        stopped(thread(0));
        return false;
    }
    return ended();
}

void fiber_steps() {
    Thread* t = reinterpret_cast<Thread*>(self());
    Worker* w = t->worker;
    Launch* l = w->launch;
    w->turns = l->steps(l->steps_closure) ? w->threads : 0;
    t->state = State::Done;
    jitlab_simt_switch(&t->sp, w->scheduler_sp);
    __builtin_unreachable();
}

// A kernel with a lock-step twin (jit/engines/lockstep.py), in a plain run: the twin runs the block's threads one after
// the other through each stretch between two barriers, in one fiber, the order the fibers would take, without their
// switches. 1: the block ran; 0: it failed or stopped; -1: the twin declined, having run nothing (the block is too
// large for its slots), so the fibers run it.
int Worker::run_steps() {
    if (!run_single(&fiber_steps, "at a barrier or warp collective in its lock-step run, which jitlab judged it has "
                                  "none of")) {
        return 0;
    }
    if (turns == 0) {  // declined: the block starts again as fibers
        live = threads;
        warps[0].done = 0;
        return -1;
    }
    return ended() ? 1 : 0;
}

bool Worker::run_block(uint64_t b) {
    const dim3 g = launch->grid, k = launch->block;
    block_index = {(unsigned)(b % g.x), (unsigned)(b / g.x % g.y), (unsigned)(b / g.x / g.y)};
    serial = launch->first_serial + (uint32_t)b;
    epoch_sync = false;
    unwritten_reads.clear();
    threads = k.x * k.y * k.z;
    live = threads;
    at_barrier = 0;
    barrier_mixed = false;
    warps.assign((threads + 31) / 32, Warp{0, 0, 0});
    for (unsigned i = 0; i < threads; ++i) warps[i / 32].exists |= 1u << (i % 32);
    if (launch->in_turn) return run_in_turn();
    if (launch->steps && !steps_declined) {
        const int ran = run_steps();
        if (ran >= 0) return ran == 1;
        steps_declined = true;
    }
    single = false;
    for (unsigned i = 0; i < threads; ++i) begin(thread(i), i);
    for (;;) {
        bool ran = false;
        for (unsigned n = 0; n < threads; ++n) {
            Thread* t = thread(n);
            if (!runnable(t)) continue;
            ran = true;
            if (launch->stop.load(std::memory_order_relaxed)) {
                stopped(t);
                return false;
            }
            if (!resume(t, &n) || launch->failed.load(std::memory_order_relaxed)) return false;
        }
        if (live == 0) return ended();
        // Every live thread waits at a barrier: open it now (a pass more would run nothing).
        if (ran && at_barrier != live) continue;
        if (at_barrier == live) {
            if (live < threads) {
                const Thread *waiting = nullptr, *gone = nullptr;
                for (unsigned i = 0; i < threads; ++i) {
                    Thread* t = thread(i);
                    if (!waiting && t->state == State::AtBarrier) waiting = t;
                    if (!gone && t->state == State::Done) gone = t;
                }
                launch->fail("BarrierDivergence", returned_message(this, barrier_name(waiting->barrier_op),
                                                                   waiting->file, waiting->line, live, where(gone)));
                return false;
            }
            if (!open_barrier()) return false;
            continue;
        }
        if (resolve_activemask()) continue;
        deadlock();
        return false;
    }
}

void Worker::run(unsigned index) {
    this_worker = this;
    stacks.count = launch->block.x * launch->block.y * launch->block.z;
    stacks.base = launch->stacks.base + index * stacks.count * kStackBytes;
    shared.assign(launch->shared_bytes + 16, 0);
    map_memory();
    // The fault handler runs on its own stack: a fiber that overflowed its stack has none left.
    std::vector<char> alt(64 * 1024);
    stack_t mine{}, before{};
    mine.ss_sp = alt.data(), mine.ss_size = alt.size();
    sigaltstack(&mine, &before);
    for (;;) {
        if (launch->failed.load(std::memory_order_relaxed)) break;
        if (launch->stop.load(std::memory_order_relaxed)) {
            stopped(nullptr);
            break;
        }
        uint64_t b = launch->next.fetch_add(1, std::memory_order_relaxed);
        if (b >= launch->blocks) break;
        if (!run_block(b)) break;
    }
    sigaltstack(&before, nullptr);
    this_worker = nullptr;
}

// The watchdog asked the launch to stop (its time limit, or Ctrl-C) and no fiber was caught running: name
// the thread about to run, where it waits (the barrier it passes) or last gave way (a spin-wait's line).
void Worker::stopped(const Thread* t) {
    const bool interrupted = launch->stop.load() == 2;
    const std::string at = t && t->state == State::AtBarrier ? format(" at %s:%d (%s)", t->file, t->line, where(t).c_str())
         : t && t->yield_pc ? " at " + format("@[+0x%lx]", (unsigned long)t->yield_pc) + " (" + where(t) + ")"
         : t ? " (" + where(t) + ")" : std::string();
    launch->fail(interrupted ? "Interrupted" : "TimeLimit", stop_message(launch, interrupted, at));
}

int configured_workers = 0;
bool checking = false;
bool quiet = false;
bool library_in_turn = false;  // no thread of this library's kernels can wait (jitlab_simt_in_turn)
double time_limit = 0;
uint32_t next_serial = 1;  // blocks are numbered across launches (memory_checks.inc's keys)
std::atomic<int> interrupted{0};
std::string failure, failure_name;  // the last failed launch: what and its name

unsigned default_workers() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return (unsigned)std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

Thread* current_thread(const char* what) {
    Worker* w = this_worker;
    if (!w || !w->current) {
        fprintf(stderr, "jitlab: %s called outside a kernel launch\n", what);
        abort();
    }
    return w->current;
}

// A bad address in a kernel (a tensor's guard page, an overflowed fiber stack, a wild pointer): the
// thread stops and the launch fails with the address and the code offset; Python names the tensor
// and the line (emulate.py). The handler runs on the fiber's stack and switches away for good, so it
// is installed with SA_NODEFER (a later fault is not blocked). Outside a fiber it hands over.
struct sigaction previous_segv, previous_bus, previous_stop, previous_int;
constexpr int kStopSignal = SIGUSR2;  // the watchdog's: stop the fiber running on this OS thread
uintptr_t module_base_address() {
    Dl_info i{};
    dladdr(reinterpret_cast<void*>(&module_base_address), &i);
    return reinterpret_cast<uintptr_t>(i.dli_fbase);
}

std::string stop_message(const Launch* l, bool interrupted, const std::string& at) {
    if (interrupted) return "interrupted (Ctrl-C)" + at;
    return format("the launch ran past the CPU emulator's time limit of %g s%s: an endless loop, a wait for a flag "
                  "no thread sets, or a launch too large to emulate (the limit is JITLAB_EMULATOR_TIMEOUT=SECONDS, "
                  "0 for none; or launch fewer blocks)", l->timeout, at.c_str());
}

// Where a signal interrupted the fiber: its program counter and stack pointer.
void interrupted_at(void* context, uintptr_t* pc, uintptr_t* sp) {
    const ucontext_t* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
    *pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    *sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#else
    *pc = (uintptr_t)uc->uc_mcontext.pc;
    *sp = (uintptr_t)uc->uc_mcontext.sp;
#endif
}

// The watchdog's signal: the fiber running here stops for good, at the line it was on. It stops too when another
// worker's fiber was caught first (the launch has failed, with that one's report): a block that runs in one fiber
// (run_steps, run_in_turn) would not return to the scheduler before its end.
void on_stop(int, siginfo_t*, void* context) {
    Worker* w = this_worker;
    if (!w || !w->current || w->no_interrupt) return;
    Thread* t = w->current;
    uintptr_t pc, sp;
    interrupted_at(context, &pc, &sp);
    // Between choosing the next thread and switching to it (the scheduler, a barrier's hand-over) the code runs on
    // another stack: the watchdog signals again in 20 ms.
    if ((sp & ~(kStackBytes - 1)) != (reinterpret_cast<uintptr_t>(t) & ~(kStackBytes - 1))) return;
    const bool ctrl_c = w->launch->stop.load() == 2;
    if (!w->launch->failed.load()) {
        w->launch->fail(ctrl_c ? "Interrupted" : "TimeLimit",
                        stop_message(w->launch, ctrl_c, " at " + code_candidates(pc, sp, w, t->yield_pc) + " (" +
                                                            w->where(t) + ")"));
    }
    t->state = State::Faulted;
    jitlab_simt_switch(&t->sp, w->scheduler_sp);
}

void on_fault(int sig, siginfo_t* info, void* context) {
    Worker* w = this_worker;
    if (!w || !w->current) {
        sigaction(sig, sig == SIGSEGV ? &previous_segv : &previous_bus, nullptr);
        return;  // the fault happens again, under the handler that was there before
    }
    Thread* t = w->current;
    uintptr_t pc, sp;
    interrupted_at(context, &pc, &sp);
    const uintptr_t a = (uintptr_t)info->si_addr;
    const std::string code = code_candidates(pc, sp, w, 0);
    if (a - w->stack_lo < w->stack_span && (a - w->stack_lo) % kStackBytes < 2 * (uintptr_t)sysconf(_SC_PAGESIZE)) {
        w->launch->fail("StackOverflow", format(
            "a stack overflow at %s (%s): each GPU thread has a %lu KiB stack on the CPU emulator (a GPU's is "
            "smaller still): deep recursion or a large local array; make the recursion a loop, or keep large "
            "arrays in global or shared memory", code.c_str(), w->where(t).c_str(),
            (unsigned long)((kRecordOffset - 4096) >> 10)));
    } else {
        w->launch->fail("BadAddress", format("a bad address %p at %s (%s): %s", info->si_addr,
                                             code.c_str(), w->where(t).c_str(),
                                             a < 4096 ? "a null pointer" : "a wild pointer or one past freed memory"));
    }
    t->state = State::Faulted;
    jitlab_simt_switch(&t->sp, w->scheduler_sp);
}

struct FaultHandler {  // installed for the length of one launch
    FaultHandler() {
        struct sigaction a{};
        a.sa_sigaction = on_fault;
        a.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&a.sa_mask);
        sigaction(SIGSEGV, &a, &previous_segv);
        sigaction(SIGBUS, &a, &previous_bus);
        struct sigaction stop{};
        stop.sa_sigaction = on_stop;
        stop.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
        sigemptyset(&stop.sa_mask);
        sigaction(kStopSignal, &stop, &previous_stop);
        struct sigaction ctrl_c{};
        ctrl_c.sa_handler = [](int) { interrupted.store(1); };
        ctrl_c.sa_flags = SA_RESTART;
        sigemptyset(&ctrl_c.sa_mask);
        sigaction(SIGINT, &ctrl_c, &previous_int);
    }
    ~FaultHandler() {
        sigaction(SIGSEGV, &previous_segv, nullptr);
        sigaction(SIGBUS, &previous_bus, nullptr);
        sigaction(kStopSignal, &previous_stop, nullptr);
        sigaction(SIGINT, &previous_int, nullptr);
        if (interrupted.exchange(0)) raise(SIGINT);  // Python's own handler: KeyboardInterrupt after the call
    }
};

}  // namespace

// ---- what the header calls ------------------------------------------------------------------------
int barrier(BarrierOp op, int predicate, const char* file, int line) {
    Thread* t = reinterpret_cast<Thread*>(self());
    Worker* w = t->worker;
    t->state = State::AtBarrier;
    t->barrier_op = op, t->predicate = predicate, t->file = file, t->line = line;
    t->barrier_gen = w->barrier_gen;
    if (w->at_barrier++ == 0) {
        w->barrier_file = file, w->barrier_line = line, w->barrier_mixed = false;
        w->arrived_count = 0, w->arrived_all = 1, w->arrived_any = 0;
    } else if (line != w->barrier_line || file != w->barrier_file) {
        w->barrier_mixed = true;
    }
    w->arrived_count += predicate, w->arrived_all &= predicate, w->arrived_any |= predicate;
    // The scheduler would run the next thread in order now: switch to it directly when it may run and there is
    // nothing for the scheduler to do (a write to judge, a failed or stopped launch).
    Thread* next = !w->single && t->linear + 1 < w->threads ? w->thread(t->linear + 1) : nullptr;
    if (next && w->runnable(next) && !t->pending_bytes && !w->launch->stop.load(std::memory_order_relaxed) &&
        !w->launch->failed.load(std::memory_order_relaxed)) {
        w->current = next;
        next->state = State::Ready;
        jitlab_simt_switch(&t->sp, next->sp);
    } else {
        jitlab_simt_switch(&t->sp, w->scheduler_sp);
    }
    ++t->barriers;
    return op == BarrierOp::Count ? w->opened_count : op == BarrierOp::And ? w->opened_all
         : op == BarrierOp::Or    ? w->opened_any : 0;
}

uint64_t warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
    Thread* t = reinterpret_cast<Thread*>(self());
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        trap(format("%s: width %d is not a power of two from 1 to 32", op_name(op), width).c_str(), file, line);
    }
    t->state = State::AtWarp;
    t->op = op, t->mask = op == WarpOp::Activemask ? ~0u : mask, t->value = value, t->arg = arg, t->width = width;
    t->file = file, t->line = line;
    jitlab_simt_switch(&t->sp, t->worker->scheduler_sp);
    ++t->warp_syncs;
    return t->result;
}

void* dynamic_shared() {
    Worker* w = this_worker;
    if (!w) return nullptr;
    w->dyn_used = true;
    return reinterpret_cast<void*>(w->dynamic_base());
}

namespace {
// The launch fails with `name: what` and the running thread's fiber stops for good (a report from inside a kernel:
// trap, the twins' reports, memory_checks.inc's).
[[noreturn]] void stop_thread(Worker* w, Thread* t, const char* name, const std::string& what) {
    w->launch->fail(name, what);
    t->state = State::Faulted;
    jitlab_simt_switch(&t->sp, w->scheduler_sp);
    __builtin_unreachable();
}
[[noreturn]] void stop_running(const char* name, const std::string& what) {
    Thread* t = current_thread(name);
    stop_thread(t->worker, t, name, what);
}
}  // namespace

[[noreturn]] void trap(const char* what, const char* file, int line) {
    Thread* t = current_thread(what);
    stop_thread(t->worker, t, "KernelFault", format("%s at %s:%d (%s)", what, file, line, t->worker->where(t).c_str()));
}

void steps_parted(unsigned first, unsigned other, int again, const char* what, const char* file, int line,
                  int barrier_line) {
    const Worker* w = current_thread("steps_parted")->worker;
    const bool loop = std::strcmp(what, "loop") == 0;
    const char* goes = loop ? "goes round again" : "takes it";
    const char* stays = loop ? "leaves it" : "does not";
    stop_running("BarrierDivergence",
               format("the threads of block (%u, %u, %u) part at the %s at %s:%d, which holds the __syncthreads() "
                      "at %s:%d: %s %s and %s %s, so they would wait at different barriers (on a GPU a hang, or "
                      "undefined behaviour); every thread of a block must reach each __syncthreads(): make the %s's "
                      "condition the same for the whole block",
                      w->block_index.x, w->block_index.y, w->block_index.z, what, file, line, file, barrier_line,
                      w->where_index(first).c_str(), again ? goes : stays, w->where_index(other).c_str(),
                      again ? stays : goes, what));
}

void steps_returned(unsigned reached, unsigned gone, const char* file, int line) {
    const Worker* w = current_thread("steps_returned")->worker;
    stop_running("BarrierDivergence", returned_message(w, "__syncthreads()", file, line, reached, w->where_index(gone)));
}

/// One launch's watchdog: past the time limit, or on Ctrl-C, it signals the launch's OS threads until a
/// running fiber is caught (stopped at its line) or every worker has left; a launch that ends first never
/// notices it.
struct Watchdog {
    Launch* launch;
    std::vector<pthread_t> ids;
    std::mutex lock;
    std::condition_variable wake;
    bool done = false;
    std::thread thread;

    Watchdog(Launch* l, std::vector<pthread_t> threads) : launch(l), ids(std::move(threads)) {
        thread = std::thread([this] { watch(); });
    }
    void watch() {
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        std::unique_lock<std::mutex> g(lock);
        while (!done) {
            wake.wait_for(g, std::chrono::milliseconds(20));
            if (done) break;
            const double seconds = std::chrono::duration<double>(clock::now() - start).count();
            if (interrupted.load()) launch->stop.store(2);
            else if (launch->timeout > 0 && seconds > launch->timeout) launch->stop.store(1);
            if (!launch->stop.load()) continue;
            for (pthread_t id : ids) pthread_kill(id, kStopSignal);
        }
    }
    void finish() {
        {
            std::lock_guard<std::mutex> g(lock);
            done = true;
        }
        wake.notify_all();
        thread.join();
    }
};

}  // namespace jitlab_simt

using namespace jitlab_simt;

// ---- the C entry points: the generated launch shims and Python ------------------------------------
extern "C" {

/// Launch `body(closure)` on every thread of `grid` x `block`: cudaSuccess, or cudaErrorLaunchFailure with
/// jitlab_simt_error() saying why.
__attribute__((visibility("default"))) int jitlab_simt_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                              unsigned by, unsigned bz, size_t shared_bytes,
                                                              void (*body)(void*), void* closure, const char* kernel) {
    return jitlab_simt_launch_steps(gx, gy, gz, bx, by, bz, shared_bytes, body, closure, nullptr, nullptr, kernel);
}

/// The same for a kernel with a lock-step twin (`steps`, jit/engines/lockstep.py), which plain runs take.
__attribute__((visibility("default"))) int jitlab_simt_launch_steps(unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                                    unsigned by, unsigned bz, size_t shared_bytes,
                                                                    void (*body)(void*), void* closure,
                                                                    int (*steps)(void*), void* steps_closure,
                                                                    const char* kernel) {
    if ((uint64_t)gx * gy * gz == 0 || (uint64_t)bx * by * bz == 0 || (uint64_t)bx * by * bz > 1024) {
        return cudaErrorInvalidConfiguration;  // as a GPU: an empty grid or block, or more than 1024 threads
    }
    Launch l;
    l.grid = dim3(gx, gy, gz), l.block = dim3(bx, by, bz), l.shared_bytes = shared_bytes;
    l.body = body, l.closure = closure, l.kernel = kernel, l.check = checking, l.timeout = time_limit;
    l.steps = checking ? nullptr : steps, l.steps_closure = steps_closure;
    l.in_turn = !checking && library_in_turn && !l.steps;
    l.blocks = (uint64_t)gx * gy * gz;
    l.first_serial = next_serial;
    next_serial += (uint32_t)std::min<uint64_t>(l.blocks, 1u << 30);
    l.regions.swap(next_regions);
    if (l.check) {
        for (Region& r : l.regions) {
            const size_t n = (r.end - r.start) / r.item;
            if (r.writable && n <= kMaxCells) r.cells.reset(new Cell[n + 1]());
        }
    }
    unsigned n = configured_workers > 0 ? (unsigned)configured_workers : default_workers();
    n = (unsigned)std::min<uint64_t>(n, l.blocks);
    l.stacks = take_stacks((size_t)n * bx * by * bz);
    if (!l.stacks.base) {
        failure_name = "OutOfMemory";
        failure = "could not map the fiber stacks of a block";
        return cudaErrorLaunchFailure;
    }
    // The access hooks find a fiber's thread from its stack pointer while this launch owns the fiber range
    // (another launch of this library running at the same time, from another Python thread, takes the slow path).
    const bool owns_fibers = !fibers_claimed.exchange(true);
    if (owns_fibers) {
        fibers_lo.store(reinterpret_cast<uintptr_t>(l.stacks.base), std::memory_order_relaxed);
        fibers_span.store(l.stacks.count * kStackBytes, std::memory_order_relaxed);
    }
    FaultHandler handler;
    std::vector<Worker> workers(n);
    std::vector<std::thread> os;
    std::vector<pthread_t> ids{pthread_self()};
    for (unsigned i = 0; i < n; ++i) workers[i].launch = &l;
    for (unsigned i = 1; i < n; ++i) {
        os.emplace_back([&workers, i] { workers[i].run(i); });
        ids.push_back(os.back().native_handle());
    }
    Watchdog dog(&l, ids);
    workers[0].run(0);
    for (auto& t : os) t.join();
    dog.finish();
    if (owns_fibers) {
        fibers_span.store(0, std::memory_order_relaxed);
        fibers_lo.store(0, std::memory_order_relaxed);
        fibers_claimed.store(false);
    }
    give_back(l.stacks);
    fflush(stdout);
    if (!l.failed) return 0;
    failure_name = l.error_name;
    failure = l.error;
    return cudaErrorLaunchFailure;
}

/// printf for the snippet's own library (hidden: Python's and torch's printf stay the C library's).
__attribute__((visibility("hidden"))) int printf(const char* fmt, ...) {
    if (quiet) return 0;
    Worker* w = this_worker;
    if (w) w->no_interrupt = true;  // never stopped holding stdout's lock
    va_list ap;
    va_start(ap, fmt);
    int n = vprintf(fmt, ap);
    va_end(ap);
    if (w) w->no_interrupt = false;
    return n;
}

/// Whether this library's kernels may run their threads one after the other (Worker::run_in_turn): Python says so
/// when the snippet's unit calls no barrier, warp collective, volatile read, atomic load or compare-and-swap.
__attribute__((visibility("default"))) void jitlab_simt_in_turn(int yes) { library_in_turn = yes != 0; }

/// How the next launches run: `workers` OS threads (0: one per CPU), the race detector on (`check`), printf
/// silent (`silent`), each stopped after `timeout` seconds (0: never).
__attribute__((visibility("default"))) void jitlab_simt_configure(int workers, int check, int silent, double timeout) {
    configured_workers = workers, checking = check != 0, quiet = silent != 0, time_limit = timeout;
}
__attribute__((visibility("default"))) const char* jitlab_simt_error() { return failure.c_str(); }
__attribute__((visibility("default"))) const char* jitlab_simt_error_name() { return failure_name.c_str(); }

// -fsanitize=bounds calls this (the abort variant: we never return) for an index past a fixed-size
// array: a __shared__ array or a local one. Its data starts with the user's file, line and column.
struct JitlabUbsanLocation { const char* file; uint32_t line, column; };
__attribute__((visibility("hidden"))) void __ubsan_handle_out_of_bounds_abort(void* data, void* index) {
    const auto* at = static_cast<const JitlabUbsanLocation*>(data);
    const char* type_name = reinterpret_cast<const char*>(*reinterpret_cast<void* const*>(at + 1)) + 4;
    trap(format("index %lld is out of bounds for `%s`", (long long)(intptr_t)index, type_name).c_str(), at->file,
         (int)at->line);
}
__attribute__((visibility("hidden"))) void __ubsan_handle_out_of_bounds(void* data, void* index) {
    __ubsan_handle_out_of_bounds_abort(data, index);
}

// assert() in a kernel: glibc's assert calls this. A GPU stops the kernel; so do we.
__attribute__((visibility("hidden"))) void __assert_fail(const char* expr, const char* file, unsigned line,
                                                         const char*) noexcept {
    if (!this_worker || !this_worker->current) {
        fprintf(stderr, "%s:%u: assertion `%s' failed\n", file, line, expr);
        abort();
    }
    trap(format("assertion `%s` failed", expr).c_str(), file, (int)line);
}
}

// ---- memory checks: GCC's -fsanitize=thread hooks, answered here (no libtsan) ----------------------------
namespace jitlab_simt {
namespace {
#include "memory_checks.inc"
