// CPU affinity for the benchmark's driver processes. cpu_set_t and its macros do not import
// into Swift.
#define _GNU_SOURCE
#include "CBenchmarkSupport.h"

#include <sched.h>

int bench_stay_on_this_cpu(void) {
  int cpu = sched_getcpu();
  if (cpu < 0) return -1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
}
