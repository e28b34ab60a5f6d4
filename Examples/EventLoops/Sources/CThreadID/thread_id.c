#define _GNU_SOURCE
#include "CThreadID.h"

#include <sys/syscall.h>
#include <unistd.h>

int example_thread_id(void) { return (int)syscall(SYS_gettid); }
