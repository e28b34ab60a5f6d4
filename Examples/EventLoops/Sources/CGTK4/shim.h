// GTK 4, with GLib's Unix-specific API (g_unix_fd_add), which <gtk/gtk.h> does not include.
#include <gtk/gtk.h>
#include <glib-unix.h>
