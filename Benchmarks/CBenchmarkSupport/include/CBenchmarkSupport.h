// C baselines and an allocation counter for MainOnceBenchmarks.
#ifndef C_BENCHMARK_SUPPORT_H
#define C_BENCHMARK_SUPPORT_H

#include <stdbool.h>
#include <stdint.h>

/// Does nothing and returns 1: the cost of an opaque call, for comparison.
long bench_empty_probe(void);

/// One call of libdispatch's `dispatch_once_f` on a done predicate, through the header's inline
/// fast path. Returns a checksum.
long bench_dispatch_once_probe(void);

/// One call of `pthread_once` on a done control. Returns a checksum.
long bench_pthread_once_probe(void);

/// `dispatch_once_f` through the inline fast path, for a literal port of the Khan Academy
/// helper. `predicate` must start out zero.
void bench_dispatch_once(long *predicate, void *context, void (*function)(void *));

/// Counts `malloc`, `calloc`, `realloc` and aligned allocations made by the calling thread
/// between `bench_allocations_begin()` and `bench_allocations_end()`, which returns the count.
void bench_allocations_begin(void);
long bench_allocations_end(void);

/// Counts the allocations every thread of the process makes between
/// `bench_process_allocations_begin()` and `bench_process_allocations_end()`, which returns the
/// count.
void bench_process_allocations_begin(void);
long bench_process_allocations_end(void);

/// How many work items `dispatch_async_f` has sent to the main queue in this process: what
/// MainOnce sends a hop with. Counted by interposing `dispatch_async_f`, which blocks sent with
/// `dispatch_async` (`DispatchQueue.main.async`) do not go through.
long bench_main_queue_work_items(void);

/// Bytes of heap in use, in every arena and in mmapped chunks (`mallinfo2`'s `uordblks` and
/// `hblkhd`), chunk headers included: what the process pays for its live allocations.
long bench_heap_in_use(void);

/// Binds the calling thread, and every thread it creates afterwards, to the CPU it runs on now.
/// Returns that CPU, or -1 with errno set.
int bench_stay_on_this_cpu(void);

/// `count` strong retains of `object`, each followed by its release, through `swift_retain`
/// and `swift_release`. Returns `count`.
long bench_retain_release(void *object, long count);

/// The address of `object`'s side table, from its reference-count word (64-bit Linux layout);
/// 0 if it has none (no weak reference to it was ever formed).
uintptr_t bench_side_table(const void *object);

/// `malloc_usable_size` of `object`'s side table; 0 if it has none.
long bench_side_table_usable_size(const void *object);

/// Loads GLib (`libglib-2.0.so.0`) with `dlopen`; false if it cannot be loaded here.
bool bench_glib_load(void);

/// Runs a GLib main loop on this thread for ever, served by one source that watches `fd`:
/// its `prepare` sets the loop's timeout to `timeout()` and runs nothing, its `check` says
/// whether `fd` is readable or `timeout()` is 0, its `dispatch` calls `drain`. After
/// `bench_glib_load`.
void bench_glib_run_with_source(int fd, int (*timeout)(void), void (*drain)(void));

/// Runs a GLib main loop on this thread for ever, calling `tick` every `interval_ms`
/// (`g_timeout_add`). After `bench_glib_load`.
void bench_glib_run_with_tickler(unsigned interval_ms, void (*tick)(void));

#endif
