// A real GLib main loop for the run-loop group, loaded with dlopen so that the benchmarks build
// where GLib's headers are not installed (the older toolchains' chroots). Only the few GLib
// types it needs are declared here, as GLib's ABI has them on 64-bit Linux.
#include "CBenchmarkSupport.h"

#include <dlfcn.h>
#include <stddef.h>

typedef int gboolean;
typedef struct GSource GSource;
typedef gboolean (*GSourceFunc)(void *data);
typedef struct {
  gboolean (*prepare)(GSource *source, int *timeout);
  gboolean (*check)(GSource *source);
  gboolean (*dispatch)(GSource *source, GSourceFunc callback, void *data);
  void (*finalize)(GSource *source);
  GSourceFunc closure_callback;
  void *closure_marshal;
} GSourceFuncs;

enum { G_IO_IN = 1, G_SOURCE_CONTINUE = 1 };

static struct {
  void *(*main_loop_new)(void *context, gboolean is_running);
  void (*main_loop_run)(void *loop);
  GSource *(*source_new)(GSourceFuncs *functions, unsigned size);
  void *(*source_add_unix_fd)(GSource *source, int fd, unsigned events);
  unsigned (*source_query_unix_fd)(GSource *source, void *tag);
  unsigned (*source_attach)(GSource *source, void *context);
  unsigned (*timeout_add)(unsigned interval, GSourceFunc function, void *data);
} glib;

bool bench_glib_load(void) {
  void *library = dlopen("libglib-2.0.so.0", RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) return false;
  glib.main_loop_new = dlsym(library, "g_main_loop_new");
  glib.main_loop_run = dlsym(library, "g_main_loop_run");
  glib.source_new = dlsym(library, "g_source_new");
  glib.source_add_unix_fd = dlsym(library, "g_source_add_unix_fd");
  glib.source_query_unix_fd = dlsym(library, "g_source_query_unix_fd");
  glib.source_attach = dlsym(library, "g_source_attach");
  glib.timeout_add = dlsym(library, "g_timeout_add");
  return glib.main_loop_new && glib.main_loop_run && glib.source_new &&
         glib.source_add_unix_fd && glib.source_query_unix_fd && glib.source_attach &&
         glib.timeout_add;
}

// The one source of `bench_glib_run_with_source`: main thread only, like the loop.
static struct {
  int (*timeout)(void);
  void (*drain)(void);
  void *tag;
} served;

static gboolean prepare(GSource *source, int *timeout) {
  (void)source;
  *timeout = served.timeout();
  return *timeout == 0;  // ready without polling: a timer is due
}

static gboolean check(GSource *source) {
  return (glib.source_query_unix_fd(source, served.tag) & G_IO_IN) != 0 || served.timeout() == 0;
}

static gboolean dispatch(GSource *source, GSourceFunc callback, void *data) {
  (void)source, (void)callback, (void)data;
  served.drain();
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs functions = {prepare, check, dispatch, NULL, NULL, NULL};

void bench_glib_run_with_source(int fd, int (*timeout)(void), void (*drain)(void)) {
  served.timeout = timeout;
  served.drain = drain;
  // More than sizeof(GSource), which is 96 bytes on 64-bit Linux.
  GSource *source = glib.source_new(&functions, 256);
  served.tag = glib.source_add_unix_fd(source, fd, G_IO_IN);
  glib.source_attach(source, NULL);
  glib.main_loop_run(glib.main_loop_new(NULL, 0));
}

static void (*tick)(void);

static gboolean on_tick(void *data) {
  (void)data;
  tick();
  return G_SOURCE_CONTINUE;
}

void bench_glib_run_with_tickler(unsigned interval_ms, void (*function)(void)) {
  tick = function;
  glib.timeout_add(interval_ms, on_tick, NULL);
  glib.main_loop_run(glib.main_loop_new(NULL, 0));
}
