// The GLib recipe of the DocC article "Serving the main queue from your own event loop",
// compiled against the real GLib headers.
import CGLib
import MainOnce

func serveMainQueueFromGLib() {  // on the main thread, before the GLib loop runs
  // The source's functions, kept for the life of the process, as the source is.
  let functions = UnsafeMutablePointer<GSourceFuncs>.allocate(capacity: 1)
  functions.initialize(
    to: GSourceFuncs(
      prepare: { _, timeout in
        // Wait no longer than until RunLoop.main's next timer is due; run nothing here.
        let milliseconds = MainQueueDriver.timeoutMilliseconds
        timeout?.pointee = milliseconds
        return gboolean(milliseconds == 0 ? 1 : 0)
      },
      check: { source in
        let readable = g_source_query_unix_fd(source, descriptorTag(of: source)).rawValue != 0
        return gboolean(readable || MainQueueDriver.timeoutMilliseconds == 0 ? 1 : 0)
      },
      dispatch: { _, _, _ in
        MainQueueDriver.drain()  // the main queue's work, then a pass of RunLoop.main
        // G_SOURCE_CONTINUE is a macro Swift cannot import; gboolean is an Int32, so 1 (TRUE).
        return gboolean(1)
      },
      finalize: nil, closure_callback: nil, closure_marshal: nil))
  // A GSource with room after it for the descriptor's tag, which `check` needs.
  let size = MemoryLayout<GSource>.size + MemoryLayout<gpointer?>.size
  let source = g_source_new(functions, guint(size))
  let tag = g_source_add_unix_fd(source, MainQueueDriver.fileDescriptor, G_IO_IN)
  UnsafeMutableRawPointer(source!).storeBytes(
    of: tag, toByteOffset: MemoryLayout<GSource>.size, as: gpointer?.self)
  g_source_attach(source, nil)
}

/// The tag `g_source_add_unix_fd` gave for the driver's descriptor, stored after the GSource.
func descriptorTag(of source: UnsafeMutablePointer<GSource>?) -> gpointer? {
  UnsafeMutableRawPointer(source!).load(
    fromByteOffset: MemoryLayout<GSource>.size, as: gpointer?.self)
}
