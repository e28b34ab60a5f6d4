// Counts heap allocations by interposing the allocator entry points. Every definition here
// replaces glibc's for the whole process and forwards to glibc's own implementation.
#define _GNU_SOURCE
#include "CBenchmarkSupport.h"

#include <stddef.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static __thread int counting;
static __thread long count;

static inline void note(void) {
  if (counting) count += 1;
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
