// The GLib recipe of the DocC article "Serving the main queue from your own event loop",
// compiled against the real GLib headers.
import CGLib
import MainOnce

func serveMainQueueFromGLib() {  // on the main thread, before the GLib loop runs
  let drain: GUnixFDSourceFunc = { _, _, _ in
    MainQueueDriver.drain()
    // G_SOURCE_CONTINUE is a macro Swift cannot import; gboolean is an Int32, so 1 (TRUE).
    return gboolean(1)
  }
  _ = g_unix_fd_add(MainQueueDriver.fileDescriptor, G_IO_IN, drain, nil)
}
