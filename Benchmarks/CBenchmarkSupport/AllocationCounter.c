// Counts heap allocations by interposing the allocator entry points. Every definition here
// replaces glibc's for the whole process and forwards to glibc's own implementation.
#define _GNU_SOURCE
#include "CBenchmarkSupport.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static __thread int counting;
static __thread long count;
// Process-wide counting, for work split between threads (a caller and the main queue).
static atomic_int counting_everywhere;
static atomic_long count_everywhere;

static inline void note(void) {
  if (counting) count += 1;
  if (atomic_load_explicit(&counting_everywhere, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&count_everywhere, 1, memory_order_relaxed);
  }
}

void *malloc(size_t size) {
  note();
  return __libc_malloc(size);
}

void *calloc(size_t number, size_t size) {
  note();
  return __libc_calloc(number, size);
}

void *realloc(void *pointer, size_t size) {
  note();
  return __libc_realloc(pointer, size);
}

void *memalign(size_t alignment, size_t size) {
  note();
  return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
  note();
  return __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
  note();
  void *pointer = __libc_memalign(alignment, size);
  if (!pointer) return 12;  // ENOMEM
  *result = pointer;
  return 0;
}

void bench_allocations_begin(void) {
  count = 0;
  counting = 1;
}

long bench_allocations_end(void) {
  counting = 0;
  return count;
}

void bench_process_allocations_begin(void) {
  atomic_store(&count_everywhere, 0);
  atomic_store(&counting_everywhere, 1);
}

long bench_process_allocations_end(void) {
  atomic_store(&counting_everywhere, 0);
  return atomic_load(&count_everywhere);
}

long bench_heap_in_use(void) {
  struct mallinfo2 info = mallinfo2();
  return (long)(info.uordblks + info.hblkhd);
}
