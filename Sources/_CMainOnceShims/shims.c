#if defined(__linux__)
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_CMainOnceShims.h"

#if defined(__linux__) && defined(__LP64__)
#define MAINONCE_KNOWS_QUEUE_LAYOUT 1
#else
#define MAINONCE_KNOWS_QUEUE_LAYOUT 0
#endif

#if MAINONCE_KNOWS_QUEUE_LAYOUT
// libdispatch's C entry points, declared here: a package's C target cannot find
// <dispatch/dispatch.h>, which the toolchain keeps beside the Swift overlay. The declarations
// match the ABI (dispatch_object_t is a transparent union of pointers).
struct dispatch_queue_s;
extern struct dispatch_queue_s _dispatch_main_q;
extern struct dispatch_queue_s *_Nullable dispatch_queue_create(const char *_Nullable label,
                                                                void *_Nullable attributes);
extern struct dispatch_queue_s *_Nullable dispatch_queue_create_with_target(
    const char *_Nullable label, void *_Nullable attributes,
    struct dispatch_queue_s *_Nullable target);
extern void *dispatch_queue_attr_make_initially_inactive(void *_Nullable attributes);
extern void dispatch_activate(void *object);
extern void dispatch_sync_f(struct dispatch_queue_s *queue, void *_Nullable context,
                            void (*work)(void *_Nullable));
extern const char *_Nullable dispatch_queue_get_label(struct dispatch_queue_s *_Nullable queue);
extern struct dispatch_queue_s *_Nullable dispatch_get_current_queue(void);
extern void dispatch_release(void *object);
extern void dispatch_set_target_queue(void *object, struct dispatch_queue_s *_Nullable queue);
extern struct dispatch_queue_s *dispatch_get_global_queue(long identifier, unsigned long flags);
extern uint64_t dispatch_time(uint64_t when, int64_t delta);
extern void dispatch_after_f(uint64_t when, struct dispatch_queue_s *queue, void *_Nullable context,
                             void (*work)(void *_Nullable));
extern int _dispatch_get_main_queue_handle_4CF(void);
extern void _dispatch_main_queue_callback_4CF(void *_Nullable message);

// Fields of struct dispatch_queue_s (dispatch_lane_s) on 64-bit platforms.
enum {
  TargetOffset = 24,        // struct dispatch_queue_s *do_targetq
  StateOffset = 56,         // uint64_t dq_state: the owner's thread id in the low 30 bits
  SerialNumberOffset = 64,  // uint64_t dq_serialnum: 1 for the main queue
  LabelOffset = 72,         // const char *dq_label
  FlagsOffset = 80,         // uint32_t dq_atomic_flags: dq_width in the low 16 bits
};
static const uint64_t OwnerMask = 0x3fffffff;
static const uint64_t InactiveBit = 0x0100000000000000ull;  // DISPATCH_QUEUE_INACTIVE in dq_state
static const uint32_t ThreadBoundFlag = 0x00040000;         // DQF_THREAD_BOUND
static const uint32_t MutableFlag = 0x00400000;  // DQF_MUTABLE: made by dispatch_queue_create

static const char *label_field(const void *queue) {
  return *(const char *const *)((const char *)queue + LabelOffset);
}

static const void *target_field(const void *queue) {
  return *(const void *const *)((const char *)queue + TargetOffset);
}

static uint32_t flags_field(const void *queue) {
  return __atomic_load_n((const uint32_t *)((const char *)queue + FlagsOffset), __ATOMIC_RELAXED);
}

struct sync_probe {
  struct dispatch_queue_s *queue;
  int32_t owner;
  int32_t thread;
  const void *current;
};

static void record_inside_sync(void *context) {
  struct sync_probe *probe = context;
  probe->owner = mainonce_queue_owner(probe->queue);
  probe->thread = mainonce_thread_id();
  probe->current = dispatch_get_current_queue();
}
#endif

__thread void *mainonce_thread_record_slot __attribute__((tls_model("initial-exec")));
__thread void *mainonce_object_cells_slot __attribute__((tls_model("initial-exec")));
__thread uint32_t mainonce_held_lock_ranks_slot __attribute__((tls_model("initial-exec")));

int32_t mainonce_thread_id(void) {
#if defined(__linux__)
  return (int32_t)syscall(SYS_gettid);
#else
  return 0;
#endif
}

const void *mainonce_main_queue(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return &_dispatch_main_q;
#else
  return NULL;
#endif
}

// After fork(), libdispatch keeps the parent's thread id for the forking thread (it caches the id
// per thread and registers no fork handler on Linux): the main queue's lock word, and every queue
// that thread locks in the child, name the thread by an id it no longer has. MainOnce's own fork
// handlers (registered at load, so that a fork before MainOnce's first use is seen too) record
// that id, and the owner read below names the thread by its real id again.
//
// Written by the child handler while the forking thread is the child's only thread, and read
// afterwards: thread creation orders the writes before every other thread's reads.
static int32_t fork_stale_id;    // the forking thread's id as libdispatch names it; 0: none
static int32_t fork_thread_id;   // its real id in the child
static bool fork_reset_pending;  // the child has not yet forgotten the parent's threads
static bool fork_inherits_dead_pool;
static bool fork_lost_main_queue;  // also read before this process forks: its children inherit it
// The id libdispatch names this thread by, where it differs from the real one (a thread that
// forked, in the child). The forking thread notes, before the fork, what its child inherits.
static __thread int32_t dispatch_id_alias;
static __thread int32_t dispatch_id_for_child;
static __thread bool dead_pool_for_child;
static __thread bool lost_main_queue_for_child;

#if MAINONCE_KNOWS_QUEUE_LAYOUT
extern bool _dispatch_is_multithreaded(void);
#endif

static void before_fork(void) {
  int32_t me = mainonce_thread_id();
  dispatch_id_for_child = dispatch_id_alias != 0 ? dispatch_id_alias : me;
  // libdispatch binds the main queue to the main thread when it is loaded, and nothing rebinds
  // it: a child forked by any other thread (or by the only thread of such a child, whose id is
  // its pid) has no thread to run main-queue work, neither dispatchMain() nor RunLoop.main.
  lost_main_queue_for_child =
      __atomic_load_n(&fork_lost_main_queue, __ATOMIC_RELAXED) || me != (int32_t)getpid();
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  // libdispatch's worker threads do not exist in the child, but its pool still counts them:
  // timers and work submitted to a global queue never run there (measured with this
  // toolchain).
  dead_pool_for_child = _dispatch_is_multithreaded();
#endif
}

static void in_child(void) {
  int32_t me = mainonce_thread_id();
  dispatch_id_alias = dispatch_id_for_child == me ? 0 : dispatch_id_for_child;
  __atomic_store_n(&fork_stale_id, dispatch_id_alias, __ATOMIC_RELAXED);
  __atomic_store_n(&fork_thread_id, me, __ATOMIC_RELAXED);
  __atomic_store_n(&fork_reset_pending, true, __ATOMIC_RELAXED);
  __atomic_store_n(&fork_inherits_dead_pool, dead_pool_for_child, __ATOMIC_RELAXED);
  __atomic_store_n(&fork_lost_main_queue, lost_main_queue_for_child, __ATOMIC_RELAXED);
  // The forking thread's record was made in the parent and names its parent id: the next slow
  // path makes a fresh one.
  mainonce_thread_record_slot = NULL;
  mainonce_object_cells_slot = NULL;
}

__attribute__((constructor)) static void watch_forks(void) {
  // Two plain functions that touch only this file's variables, ask the kernel for the thread and
  // process ids and read one libdispatch flag: nothing that could wait for a lock another thread
  // held at the fork.
  int status = pthread_atfork(before_fork, NULL, in_child);
  if (status != 0) {
    fprintf(stderr, "MainOnce: pthread_atfork failed (%d); forked children may misjudge the main "
                    "queue's owner\n", status);
  }
}

bool mainonce_take_fork_reset(void) {
  return __atomic_exchange_n(&fork_reset_pending, false, __ATOMIC_RELAXED);
}

bool mainonce_fork_inherits_dead_pool(void) {
  return __atomic_load_n(&fork_inherits_dead_pool, __ATOMIC_RELAXED);
}

bool mainonce_fork_lost_main_queue(void) {
  return __atomic_load_n(&fork_lost_main_queue, __ATOMIC_RELAXED);
}

int32_t mainonce_queue_owner(const void *queue) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  const uint64_t *state = (const uint64_t *)((const char *)queue + StateOffset);
  int32_t owner = (int32_t)(__atomic_load_n(state, __ATOMIC_RELAXED) & OwnerMask);
  int32_t stale = __atomic_load_n(&fork_stale_id, __ATOMIC_RELAXED);
  if (stale != 0 && owner == stale) return __atomic_load_n(&fork_thread_id, __ATOMIC_RELAXED);
  return owner;
#else
  (void)queue;
  return 0;
#endif
}

bool mainonce_queue_is_serial(const void *queue) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return (flags_field(queue) & 0xffff) == 1;
#else
  (void)queue;
  return false;
#endif
}

int32_t mainonce_queue_target_mutability(const void *queue) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  // Acquiring: activation clears the inactive bit after the target is set, and a target read
  // after seeing it clear is the one the queue runs with. Both transitions go one way only
  // (active stays active; libdispatch never sets DQF_MUTABLE after creation), so a queue read
  // active and not retargetable stays so.
  const uint64_t *state = (const uint64_t *)((const char *)queue + StateOffset);
  if ((__atomic_load_n(state, __ATOMIC_ACQUIRE) & InactiveBit) != 0) return 1;
  const uint32_t *flags = (const uint32_t *)((const char *)queue + FlagsOffset);
  if ((__atomic_load_n(flags, __ATOMIC_ACQUIRE) & MutableFlag) != 0) return 2;
  return 0;
#else
  (void)queue;
  return 1;
#endif
}

const char *mainonce_queue_label(const void *queue) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return label_field(queue);
#else
  (void)queue;
  return NULL;
#endif
}

const void *mainonce_queue_target(const void *queue) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return target_field(queue);
#else
  (void)queue;
  return NULL;
#endif
}

bool mainonce_main_queue_is_thread_bound(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return (flags_field(&_dispatch_main_q) & ThreadBoundFlag) != 0;
#else
  return false;
#endif
}

const void *mainonce_current_queue(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return dispatch_get_current_queue();
#else
  return NULL;
#endif
}

int32_t mainonce_main_queue_layout_check(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  struct dispatch_queue_s *main = &_dispatch_main_q;
  // Pointers compared before the label is read.
  if (label_field(main) != dispatch_queue_get_label(main)) return 1;
  if (strcmp(label_field(main), "com.apple.main-thread") != 0) return 2;
  if (*(const uint64_t *)((const char *)main + SerialNumberOffset) != 1) return 3;
  if (!mainonce_queue_is_serial(main)) return 4;
  return 0;
#else
  return -1;
#endif
}

int32_t mainonce_queue_layout_self_test(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  struct dispatch_queue_s *main = &_dispatch_main_q;
  // A private serial queue, alive for the whole test.
  struct dispatch_queue_s *queue = dispatch_queue_create("mainonce.layout-self-test", NULL);
  if (queue == NULL) return 5;
  int32_t failed = 0;
  struct sync_probe probe = {.queue = queue};
  if (label_field(queue) != dispatch_queue_get_label(queue)) {
    failed = 6;
  } else if (!mainonce_queue_is_serial(queue)) {
    failed = 7;
  } else if (mainonce_queue_owner(queue) != 0) {
    failed = 8;
  } else {
    dispatch_sync_f(queue, &probe, record_inside_sync);
    if (probe.current != queue) {
      failed = 9;
    } else if (probe.owner == 0 || probe.owner != probe.thread) {
      failed = 10;
    } else if (mainonce_queue_owner(queue) != 0) {
      failed = 11;
    }
  }
  // A second queue that targets the first: its target field holds the first.
  if (failed == 0) {
    struct dispatch_queue_s *inner = dispatch_queue_create("mainonce.layout-self-test.inner", NULL);
    if (inner == NULL) {
      failed = 12;
    } else {
      if (target_field(queue) == NULL || target_field(main) == NULL) {
        failed = 12;
      } else {
        dispatch_set_target_queue(inner, queue);
        if (target_field(inner) != queue) failed = 13;
      }
      dispatch_release(inner);
    }
  }
  // Whether a target can change: queues made by dispatch_queue_create are retargetable; one made
  // with its target is not, and one made inactive reads inactive until it is activated.
  if (failed == 0 && mainonce_queue_target_mutability(queue) != 2) failed = 14;
  if (failed == 0 && mainonce_queue_target_mutability(main) != 0) failed = 15;
  if (failed == 0) {
    struct dispatch_queue_s *fixed =
        dispatch_queue_create_with_target("mainonce.layout-self-test.fixed", NULL, queue);
    if (fixed == NULL || mainonce_queue_target_mutability(fixed) != 0 ||
        target_field(fixed) != queue) {
      failed = 16;
    }
    if (fixed != NULL) dispatch_release(fixed);
  }
  if (failed == 0) {
    struct dispatch_queue_s *inactive = dispatch_queue_create_with_target(
        "mainonce.layout-self-test.inactive", dispatch_queue_attr_make_initially_inactive(NULL),
        queue);
    if (inactive == NULL) {
      failed = 17;
    } else {
      // Activated before it is released, whatever it read: releasing an inactive queue traps.
      bool readInactive = mainonce_queue_target_mutability(inactive) == 1;
      dispatch_activate(inactive);
      if (!readInactive || mainonce_queue_target_mutability(inactive) != 0) failed = 17;
      dispatch_release(inactive);
    }
  }
  dispatch_release(queue);
  return failed;
#else
  return -1;
#endif
}

int32_t mainonce_main_queue_handle(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  return _dispatch_get_main_queue_handle_4CF();
#else
  return -1;
#endif
}

// The main queue is the object libdispatch exports as _dispatch_main_q, on every platform.
struct dispatch_queue_s;
extern struct dispatch_queue_s _dispatch_main_q;
extern void dispatch_async_f(struct dispatch_queue_s *queue, void *_Nullable context,
                             void (*work)(void *_Nullable));

void mainonce_main_queue_async(void *context, void (*work)(void *_Nullable context)) {
  dispatch_async_f(&_dispatch_main_q, context, work);
}

// Registered once, before main: a process that later reads another thread's published wait
// may then order itself against that thread's plain stores with a heavy barrier. Until then, and
// for good once a heavy barrier fails, waits are published under the sequentially consistent
// protocol (tag 1).
uintptr_t mainonce_wait_board_tag_slot = 1;

__attribute__((constructor)) static void register_heavy_barrier(void) {
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
    __atomic_store_n(&mainonce_wait_board_tag_slot, 0, __ATOMIC_RELAXED);
  }
}

int32_t mainonce_heavy_barrier(void) {
  if (mainonce_wait_board_tag() == 0) {
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return 0;
    // It worked at load and fails now (a seccomp filter installed since, say): this barrier
    // ordered nothing, and no later one is tried. The first to switch the board says so.
    int error = errno > 0 ? errno : ENOSYS;
    uintptr_t barrier = 0;
    if (__atomic_compare_exchange_n(&mainonce_wait_board_tag_slot, &barrier, 1, false,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      return error;
    }
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return -1;
}

// DISPATCH_QUEUE_OVERCOMMIT, libdispatch's private flag for the overcommit root queues.
static const unsigned long OvercommitFlag = 0x2ul;

// dispatch_get_current_queue() returns the queue whose work the calling thread runs, and on a
// thread that runs none, the default-priority overcommit root queue (the same in every
// libdispatch since Swift 5: `_dispatch_queue_get_current_or_default`). Work is never run on
// that root queue itself but by MainOnce (which uses a queue of its own, below) or by C code
// that passes libdispatch's private overcommit flag: those alone read as a thread of the
// program's own.
bool mainonce_runs_dispatch_work(void) {
  return dispatch_get_current_queue() != dispatch_get_global_queue(0, OvercommitFlag);
}

extern struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent;
static struct dispatch_queue_s *own_queue;

static void make_own_queue(void) {
  own_queue = dispatch_queue_create("MainOnce", &_dispatch_queue_attr_concurrent);
  dispatch_set_target_queue(own_queue, dispatch_get_global_queue(0, OvercommitFlag));
}

void mainonce_async_overcommit(uint64_t delay, void *context,
                               void (*work)(void *_Nullable context)) {
  // A queue of MainOnce's own, so that its handlers and timers read as dispatch work
  // (mainonce_runs_dispatch_work), not as a thread of the program's.
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  int status = pthread_once(&once, make_own_queue);
  if (status != 0 || own_queue == NULL) {
    fprintf(stderr, "MainOnce: internal inconsistency: no queue of its own (%d)\n", status);
    abort();
  }
  struct dispatch_queue_s *queue = own_queue;
  if (delay == 0) {
    dispatch_async_f(queue, context, work);
  } else {
    dispatch_after_f(dispatch_time(0, (int64_t)delay), queue, context, work);
  }
}

void mainonce_main_queue_drain(void) {
#if MAINONCE_KNOWS_QUEUE_LAYOUT
  _dispatch_main_queue_callback_4CF(NULL);
#endif
}

// Swift's reference counts, as the runtime lays them out on 64-bit platforms without
// Objective-C interoperation (stdlib/public/SwiftShims/swift/shims/RefCount.h): the word after
// an object's metadata pointer holds, once the object has a side table, the side table's
// address shifted right by 3, with the two top bits set; the side table holds the object's
// address, then (at offset 16: they are a 12-byte atomic, aligned to 16) its reference-count
// bits, whose bit 32 says that the object is deinitializing.
// MainOnce verifies this at first use (ObjectLifetimes) and reads nothing if it does not hold.
#if defined(__linux__) && defined(__LP64__)
uintptr_t mainonce_side_table(const void *object) {
  uint64_t bits = __atomic_load_n((const uint64_t *)((const char *)object + 8), __ATOMIC_ACQUIRE);
  const uint64_t marks = (UINT64_C(1) << 63) | (UINT64_C(1) << 62);
  if ((bits & marks) != marks) return 0;
  return (uintptr_t)((bits & ((UINT64_C(1) << 62) - 1)) << 3);
}

const void *mainonce_side_table_object(uintptr_t side_table) {
  return __atomic_load_n((const void *const *)side_table, __ATOMIC_ACQUIRE);
}

bool mainonce_is_live_with_side_table(const void *object, uintptr_t side_table) {
  if (mainonce_side_table(object) != side_table) return false;
  uint64_t bits = __atomic_load_n((const uint64_t *)(side_table + 16), __ATOMIC_ACQUIRE);
  return (bits & (UINT64_C(1) << 32)) == 0;
}
#else
uintptr_t mainonce_side_table(const void *object) {
  (void)object;
  return 0;
}

const void *mainonce_side_table_object(uintptr_t side_table) {
  (void)side_table;
  return NULL;
}

bool mainonce_is_live_with_side_table(const void *object, uintptr_t side_table) {
  (void)object;
  (void)side_table;
  return false;
}
#endif

// CoreFoundation, referenced weakly: these resolve where the program links CoreFoundation
// (Foundation's shared library, or its static archive in a static build) and are NULL
// otherwise. They are declared only here, so Swift never sees them through this module.
extern void *_Nullable CFRunLoopGetMain(void) __attribute__((weak));
extern void *_Nullable CFRunLoopCopyCurrentMode(void *_Nullable runLoop) __attribute__((weak));
extern void CFRelease(const void *object) __attribute__((weak));
// `kCFRunLoopDefaultMode` is a variable (a CFStringRef); CoreFoundation's `Boolean` is C's `bool`
// on Linux, `CFTimeInterval` and `CFAbsoluteTime` are doubles, `CFRunLoopRunResult` an int32.
extern const void *const kCFRunLoopDefaultMode __attribute__((weak));
extern int32_t CFRunLoopRunInMode(const void *mode, double seconds, bool returnAfterSourceHandled)
    __attribute__((weak));
extern double CFRunLoopGetNextTimerFireDate(void *_Nullable runLoop, const void *mode)
    __attribute__((weak));
extern double CFAbsoluteTimeGetCurrent(void) __attribute__((weak));

bool mainonce_main_run_loop_is_running(void) {
  if (CFRunLoopGetMain == NULL || CFRunLoopCopyCurrentMode == NULL || CFRelease == NULL) {
    return false;
  }
  void *mode = CFRunLoopCopyCurrentMode(CFRunLoopGetMain());
  if (mode == NULL) return false;
  CFRelease(mode);
  return true;
}

bool mainonce_main_run_loop_pass(void) {
  if (&kCFRunLoopDefaultMode == NULL || CFRunLoopRunInMode == NULL) return false;
  (void)CFRunLoopRunInMode(kCFRunLoopDefaultMode, 0, false);
  return true;
}

double mainonce_main_run_loop_next_timer(void) {
  if (&kCFRunLoopDefaultMode == NULL || CFRunLoopGetMain == NULL ||
      CFRunLoopGetNextTimerFireDate == NULL || CFAbsoluteTimeGetCurrent == NULL) {
    return -1;
  }
  // 0 when the mode has no timer; otherwise an absolute time (seconds since 2001, wall clock).
  double fireDate = CFRunLoopGetNextTimerFireDate(CFRunLoopGetMain(), kCFRunLoopDefaultMode);
  if (fireDate == 0) return -1;
  double interval = fireDate - CFAbsoluteTimeGetCurrent();
  return interval > 0 ? interval : 0;
}
