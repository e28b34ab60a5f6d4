// Counts main-queue work items by interposing libdispatch's `dispatch_async_f`: MainOnce sends
// every hop with it (`mainonce_main_queue_async`), with no block. The definition here replaces
// libdispatch's for the whole process (this executable links MainOnce in) and forwards to
// libdispatch's own, found with dlsym: a dynamically linked build only, as the benchmarks are.
//
// MainOnce keeps no counters of its own in a release build, as a dependent package builds it;
// the benchmarks measure what it sends from outside, as they count allocations.
#define _GNU_SOURCE
#include "CBenchmarkSupport.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

// As MainOnce's shim declares them: the main queue is the object libdispatch exports as
// _dispatch_main_q.
struct dispatch_queue_s;
extern struct dispatch_queue_s _dispatch_main_q;
typedef void (*work_function)(void *context);
typedef void (*async_function)(struct dispatch_queue_s *queue, void *context, work_function work);

static _Atomic(async_function) libdispatch_async_f;
static atomic_long main_queue_work_items;

static async_function resolve(void) {
  async_function function = atomic_load_explicit(&libdispatch_async_f, memory_order_relaxed);
  if (function) return function;
  function = (async_function)dlsym(RTLD_NEXT, "dispatch_async_f");
  if (!function) {
    fprintf(stderr, "MainOnceBenchmarks: libdispatch's dispatch_async_f not found (%s)\n",
            dlerror());
    abort();
  }
  atomic_store_explicit(&libdispatch_async_f, function, memory_order_relaxed);
  return function;
}

void dispatch_async_f(struct dispatch_queue_s *queue, void *context, work_function work) {
  if (queue == &_dispatch_main_q) {
    atomic_fetch_add_explicit(&main_queue_work_items, 1, memory_order_relaxed);
  }
  resolve()(queue, context, work);
}

long bench_main_queue_work_items(void) {
  return atomic_load_explicit(&main_queue_work_items, memory_order_relaxed);
}
