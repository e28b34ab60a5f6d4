// System calls the fixture processes make and Swift cannot: `prctl` and `syscall` are variadic.
// Test-only: the MainOnce library never links this.
#ifndef C_FIXTURE_SHIMS_H
#define C_FIXTURE_SHIMS_H

#include <stdint.h>

/// Installs, on every thread of the process (`SECCOMP_FILTER_FLAG_TSYNC`), after setting
/// `PR_SET_NO_NEW_PRIVS`, a seccomp filter under which `membarrier` fails with `ENOSYS` and every
/// other system call is allowed. Returns 0, or the errno of the call that failed (-1 where the
/// filter is not known for this architecture; a positive thread id if TSYNC could not
/// synchronize that thread).
int32_t fixture_deny_membarrier(void);

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: 0, or the errno it failed with.
int32_t fixture_membarrier(void);

/// `membarrier(MEMBARRIER_CMD_QUERY)`: the commands the kernel supports, as a bit mask, or the
/// errno it failed with, negated (`ENOSYS` where there is no `membarrier`, as under some
/// emulators).
int32_t fixture_membarrier_query(void);

#endif
