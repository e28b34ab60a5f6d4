// The dispatch_once_f baseline, without a header search path: its one public declaration and
// the inline fast path of <dispatch/once.h>, restated. On x86_64 and arm64 the header checks
// the predicate with a plain load and only calls into libdispatch while it is not done.
#include "CBenchmarkSupport.h"

#include <pthread.h>

typedef long bench_dispatch_once_t;
extern void dispatch_once_f(
    bench_dispatch_once_t *predicate, void *context, void (*function)(void *));

static inline void once_inline(
    bench_dispatch_once_t *predicate, void *context, void (*function)(void *)) {
  if (__builtin_expect(*predicate, ~0l) != ~0l) {
    dispatch_once_f(predicate, context, function);
  } else {
    __asm__ __volatile__("" ::: "memory");  // dispatch_compiler_barrier()
  }
}

void bench_dispatch_once(long *predicate, void *context, void (*function)(void *)) {
  once_inline(predicate, context, function);
}

long bench_empty_probe(void) { return 1; }

static bench_dispatch_once_t done_predicate;
static long initializations;

static void initialize(void *context) {
  (void)context;
  initializations += 1;
}

long bench_dispatch_once_probe(void) {
  once_inline(&done_predicate, 0, initialize);
  return 1;
}

static pthread_once_t done_control = PTHREAD_ONCE_INIT;

static void initialize_pthread(void) { initializations += 1; }

long bench_pthread_once_probe(void) {
  pthread_once(&done_control, initialize_pthread);
  return 1;
}
