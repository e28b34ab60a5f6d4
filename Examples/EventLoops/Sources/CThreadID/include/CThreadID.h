#ifndef CTHREADID_H
#define CTHREADID_H

/// The calling thread's kernel thread id; on the main thread it equals getpid().
int example_thread_id(void);

#endif
