// GTK 4, and with it GLib: the main loop and its sources (g_source_new, g_source_add_unix_fd).
#include <gtk/gtk.h>
