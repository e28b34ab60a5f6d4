#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Whether this test process runs under ThreadSanitizer or AddressSanitizer: their runtimes
/// define these symbols, which a process without them does not have.
enum Sanitizers {
  static let areActive: Bool = ["__tsan_init", "__asan_init"].contains { symbol in
    symbol.withCString { dlsym(UnsafeMutableRawPointer(bitPattern: 0), $0) } != nil
  }
}
