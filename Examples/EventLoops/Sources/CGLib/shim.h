// GLib: the main loop and its sources (g_source_new, g_source_add_unix_fd).
#include <glib.h>
