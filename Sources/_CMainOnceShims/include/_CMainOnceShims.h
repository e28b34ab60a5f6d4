// Platform facts for MainOnce, bound at link time so that they hold in dynamic,
// --static-swift-stdlib and fully static binaries alike (dlsym finds none of them in the
// static ones). Every name starts with mainonce_, so nothing clashes with Dispatch or
// Foundation in a module that imports both.
#ifndef C_MAIN_ONCE_SHIMS_H
#define C_MAIN_ONCE_SHIMS_H

#include <stdbool.h>
#include <stdint.h>

#pragma clang assume_nonnull begin

/// The calling thread's kernel thread id (Linux), as /proc/self/task and libdispatch's queue
/// locks name it; 0 where there is none.
int32_t mainonce_thread_id(void);

/// libdispatch's main queue object, by link-time reference; NULL where MainOnce does not know
/// libdispatch's queue layout (anything but 64-bit Linux).
const void *_Nullable mainonce_main_queue(void);

/// Checks, by reading the static main queue only, that its layout is the one MainOnce reads:
/// its label field holds the very pointer dispatch_queue_get_label returns, and its serial
/// number and width are 1. Returns 0 when every check passes, otherwise the number of the first
/// check that failed (1 to 4); -1 where MainOnce does not know the layout.
int32_t mainonce_main_queue_layout_check(void);

/// Checks what reading other queues relies on, on private queues this function creates: the
/// label field and width of a serial queue, its owner field reading nobody outside
/// dispatch_sync_f and the calling thread inside it, and the target field of a queue set to
/// target it, and the bits that say whether a queue's target can change (an initially inactive
/// queue reads inactive until activated; a queue made by dispatch_queue_create reads
/// retargetable, one made by dispatch_queue_create_with_target does not). Returns 0 when every
/// check passes, otherwise the number of the first check that failed (5 to 17); -1 where MainOnce
/// does not know the layout.
int32_t mainonce_queue_layout_self_test(void);

/// The kernel thread id in the low bits of `queue`'s lock word: the thread that drains it or
/// runs sync on it, or the thread the main queue is bound to; 0 for nobody. In a forked child,
/// the thread that forked is named by its real id, though libdispatch names it by its id in the
/// parent. `queue` must be a live queue and the layout verified.
int32_t mainonce_queue_owner(const void *queue);

/// Whether this process was forked since the last call: the first caller after a fork gets true,
/// and forgets the parent's threads. The handler that notes a fork is registered at load.
bool mainonce_take_fork_reset(void);

/// Whether this process was forked from one in which libdispatch had started worker threads:
/// they do not exist here, and work submitted to a global queue never runs.
bool mainonce_fork_inherits_dead_pool(void);

/// The label of `queue`, as dispatch_queue_get_label returns it. Same conditions as
/// mainonce_queue_owner.
const char *_Nullable mainonce_queue_label(const void *queue);

/// The queue `queue` targets: the next queue up its target chain, NULL past a root queue. Same
/// conditions as mainonce_queue_owner.
const void *_Nullable mainonce_queue_target(const void *queue);

/// Whether `queue` is serial (width 1). Same conditions as mainonce_queue_owner.
bool mainonce_queue_is_serial(const void *queue);

/// Whether `queue`'s target can change, as libdispatch's own checks decide it: 0, it cannot (the
/// queue is active and was not made retargetable: libdispatch traps on any retargeting, and the
/// queue keeps its target alive for as long as it lives); 1, the queue is inactive (its target
/// changes freely until it is activated); 2, the queue was created retargetable (through
/// dispatch_queue_create, whose queues may be retargeted at any time, and the old target is then
/// released). Read only where this returns 0 may mainonce_queue_target's result be read in
/// turn. Same conditions as mainonce_queue_owner.
int32_t mainonce_queue_target_mutability(const void *queue);

/// Whether the main queue is bound to the main thread: true until dispatchMain() is called.
/// Same conditions as mainonce_queue_owner.
bool mainonce_main_queue_is_thread_bound(void);

/// The queue the calling thread runs, for pointer comparison only.
const void *_Nullable mainonce_current_queue(void);

/// The file descriptor that becomes readable when the main queue has work, as libdispatch
/// hands it to CoreFoundation's run loop; -1 once the main queue is no longer bound to the
/// main thread.
int32_t mainonce_main_queue_handle(void);

/// Submits `work(context)` to the main queue: dispatch_async_f, with no block to copy.
void mainonce_main_queue_async(void *context, void (*work)(void *_Nullable context));

/// The wait board's protocol (see Engine/WaitBoard.swift), as the tag that a wait published now
/// carries in the low bit of its slot: 0, the barrier protocol, while the process is registered
/// for private expedited `membarrier` (it registers when it is loaded) and no heavy barrier has
/// failed since; 1, the sequentially consistent protocol. It changes at most once, from 0 to 1,
/// at the first heavy barrier that fails. A relaxed atomic load: the protocol a slot is
/// withdrawn under is its own tag, so no ordering rests on this load.
extern uintptr_t mainonce_wait_board_tag_slot;

static inline uintptr_t mainonce_wait_board_tag(void) {
  return __atomic_load_n(&mainonce_wait_board_tag_slot, __ATOMIC_RELAXED);
}

/// A compiler barrier: no instruction, but no memory access moves across it.
static inline void mainonce_light_barrier(void) { __asm__ __volatile__("" ::: "memory"); }

/// Orders a reader of the wait board against the threads that withdraw their waits. Under the
/// barrier protocol, a full memory barrier on every running thread of the process
/// (`membarrier`); returns 0 if it worked: slots tagged 0 may then be read. Otherwise a full
/// fence on the calling thread only, and only slots tagged 1 may be read: returns -1, or, from
/// the one call whose failed `membarrier` switched the board to the sequentially consistent
/// protocol, the errno it failed with (a positive number).
int32_t mainonce_heavy_barrier(void);

/// Whether this process was forked by a thread other than the main thread (tid == pid) of the
/// process it was forked from, or descends from such a fork: libdispatch's main queue stays
/// bound to a main thread that does not exist here, and no main-queue work ever runs.
bool mainonce_fork_lost_main_queue(void);

/// Runs `work(context)` on MainOnce's own concurrent queue, which targets libdispatch's
/// default-priority overcommit global queue: that starts a thread for it if every worker is
/// busy (or blocked). `delay` nanoseconds from now (0: now).
void mainonce_async_overcommit(uint64_t delay, void *context,
                               void (*work)(void *_Nullable context));

/// Whether the calling thread is running work libdispatch gave it: a block or function of a
/// queue (the main queue's too), a source's handler, a task of Swift concurrency's global
/// executor, an iteration of `concurrentPerform`, or a `sync` the thread itself runs. False on
/// a thread of the program's own outside all of these: such a thread runs only the program's
/// code, one thing after another. libdispatch's pool threads pass from one job to the next, so
/// a thread captured in one job may run another later.
bool mainonce_runs_dispatch_work(void);

/// Runs the main queue's pending work on the calling thread, as CoreFoundation's run loop
/// does. Legal only on the main thread while the main queue is bound to it.
void mainonce_main_queue_drain(void);

/// The side table of a Swift object that has one (a weak reference to it was formed), read
/// from the object's reference-count word; 0 if it has none, or where MainOnce does not know
/// the layout. `object` must be alive.
uintptr_t mainonce_side_table(const void *object);

/// The object a side table belongs to, as the side table records it.
const void *_Nullable mainonce_side_table_object(uintptr_t side_table);

/// Whether `object` is the object whose side table is `side_table`, and is not being
/// deinitialized: plain loads of two words, no reference-count write. `object` must be alive
/// (the caller holds it) and `side_table` kept alive (by a weak reference).
bool mainonce_is_live_with_side_table(const void *object, uintptr_t side_table);

/// Whether CoreFoundation is linked into the program and the main thread's run loop is
/// running in some mode right now. CoreFoundation is referenced weakly: MainOnce does not make
/// a program link Foundation.
bool mainonce_main_run_loop_is_running(void);

/// Runs one pass of the main thread's run loop in its default mode, waiting for nothing: the
/// timers that are due, the blocks given to `perform`, and the sources that are ready. Returns
/// false, having done nothing, where CoreFoundation is not linked. Main thread only.
bool mainonce_main_run_loop_pass(void);

/// Seconds until the main run loop's next timer in its default mode is due: 0 or less when one
/// is due now, and -1 when none is scheduled or CoreFoundation is not linked.
double mainonce_main_run_loop_next_timer(void);

/// The calling thread's MainOnce record, or NULL before the thread first takes a slow path, and
/// its cache of object cells, or NULL before its first per-object call: thread-local variables, initial-exec, so that reading one is
/// a single load. Written only by their own thread.
extern __thread void *_Nullable mainonce_thread_record_slot
    __attribute__((tls_model("initial-exec")));
extern __thread void *_Nullable mainonce_object_cells_slot
    __attribute__((tls_model("initial-exec")));

/// The ranks of the locks the calling thread holds, one bit a rank: debug builds check the
/// order in which a thread takes MainOnce's locks against it. Written only by its own thread.
extern __thread uint32_t mainonce_held_lock_ranks_slot __attribute__((tls_model("initial-exec")));

static inline uint32_t mainonce_held_lock_ranks(void) { return mainonce_held_lock_ranks_slot; }

static inline void mainonce_set_held_lock_ranks(uint32_t ranks) {
  mainonce_held_lock_ranks_slot = ranks;
}

static inline void *_Nullable mainonce_thread_record(void) { return mainonce_thread_record_slot; }

static inline void *_Nullable mainonce_object_cells(void) { return mainonce_object_cells_slot; }

static inline void mainonce_set_thread_record(void *_Nullable record) {
  mainonce_thread_record_slot = record;
}

static inline void mainonce_set_object_cells(void *_Nullable cells) {
  mainonce_object_cells_slot = cells;
}

/// Forgets the calling thread's record and every thread-local variable that points into what
/// the record keeps alive (its cache of object cells): for the destructor that releases the
/// record when the thread exits.
static inline void mainonce_forget_thread_record(void) {
  mainonce_thread_record_slot = 0;
  mainonce_object_cells_slot = 0;
}

#pragma clang assume_nonnull end

#endif
