// What a weak reference costs the object it refers to: a strong retain and release through the
// runtime's own entry points (a call the optimizer cannot pair away), and the size of the side
// table the first weak reference allocates. Reads Swift's reference-count layout on 64-bit
// Linux (stdlib/public/SwiftShims/swift/shims/RefCount.h), for measuring only.
#define _GNU_SOURCE
#include "CBenchmarkSupport.h"

#include <malloc.h>

extern void *swift_retain(void *object);
extern void swift_release(void *object);

long bench_retain_release(void *object, long count) {
  for (long index = 0; index < count; index++) {
    swift_retain(object);
    swift_release(object);
  }
  return count;
}

uintptr_t bench_side_table(const void *object) {
  uint64_t bits = __atomic_load_n((const uint64_t *)((const char *)object + 8), __ATOMIC_ACQUIRE);
  const uint64_t marks = (UINT64_C(1) << 63) | (UINT64_C(1) << 62);
  if ((bits & marks) != marks) return 0;
  return (uintptr_t)((bits & ((UINT64_C(1) << 62) - 1)) << 3);
}

long bench_side_table_usable_size(const void *object) {
  uintptr_t side_table = bench_side_table(object);
  return side_table == 0 ? 0 : (long)malloc_usable_size((void *)side_table);
}
