// GLib, and its Unix-specific API (g_unix_fd_add), which <glib.h> does not include.
#include <glib.h>
#include <glib-unix.h>
