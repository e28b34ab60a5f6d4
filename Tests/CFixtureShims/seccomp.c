#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/membarrier.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "CFixtureShims.h"

#if defined(__x86_64__)
#define FIXTURE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define FIXTURE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

int32_t fixture_deny_membarrier(void) {
#ifdef FIXTURE_AUDIT_ARCH
  struct sock_filter program[] = {
      // Another architecture's system call numbers mean other calls: allow them all.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FIXTURE_AUDIT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog filter = {
      .len = (unsigned short)(sizeof program / sizeof program[0]),
      .filter = program,
  };
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  long status = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &filter);
  if (status < 0) return errno;
  return (int32_t)status;
#else
  return -1;
#endif
}

int32_t fixture_membarrier(void) {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0 ? 0 : errno;
}

int32_t fixture_membarrier_query(void) {
  long commands = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return commands >= 0 ? (int32_t)commands : -errno;
}
