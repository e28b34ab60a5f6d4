internal import Synchronization
internal import _CMainOnceShims

/// Tells whether an object is the one a per-object cell was made for, alive and not being
/// deinitialized, without touching its reference counts.
///
/// A cell holds its object weakly, and a weak load proves the object alive: but it retains and
/// releases the object through its side table, two atomic writes on a cache line that another
/// object's side table may share (one pair in four of objects weakly referenced one after the
/// other). Measured side by side (`MainOnceBenchmarks objects` built for tests, the weak load on
/// cells made with `ObjectLifetimes.usesWeakLoads`; the figures are in Benchmarks/README.md):
/// a weak load costs several times the side-table read, and two threads on two objects whose side
/// tables share a line slow each other down, where the side-table read does not. Instead, a cell
/// keeps the address of its object's side table, which its weak reference keeps allocated: an
/// object at the same address in a later lifetime cannot have that side table, and the side table's
/// bits say whether the object is deinitializing.
/// Both are plain reads (see `mainonce_side_table` in the C shim for the layout).
///
/// The layout is the Swift runtime's own. At first use MainOnce checks it on objects of its
/// own (a side table that points back to its object; alive, then deinitializing in its
/// `deinit`; no match for another object); if a check fails, cells fall back to the weak load.
enum ObjectLifetimes {
  /// Whether side tables read as expected in this process: decided once.
  static let areReadable: Bool = selfTest()

  #if DEBUG || MAINONCE_INSTRUMENTATION
    /// Whether cells made from now on tell their object's lifetime with a weak load, as where
    /// the layout fails its self-test, instead of reading the side table; cells made before keep
    /// their way. A switch for MainOnce's own tests and benchmarks, which set it through
    /// `ForTests/Instrumentation.swift`, only in debug builds and release builds for tests: it
    /// runs the fallback, which this toolchain never takes by itself, on MainOnce's own code
    /// path. It costs a relaxed load a cell made, off the fast path.
    static var usesWeakLoads: Bool {
      get { weakLoadSwitch.load(ordering: .relaxed) }
      set { weakLoadSwitch.store(newValue, ordering: .relaxed) }
    }
    private static let weakLoadSwitch = Atomic(false)
  #else
    /// Cells read the side table wherever the layout allows: a constant, so that
    /// `ObjectCell.init` compiles as if there were no switch.
    @inline(__always) static var usesWeakLoads: Bool { false }
  #endif

  /// The side table of `object`, which has one once a weak reference to it exists; 0 where the
  /// layout is not readable.
  static func sideTable(of object: AnyObject) -> UInt {
    guard areReadable else { return 0 }
    return withExtendedLifetime(object) { UInt(mainonce_side_table(address(of: object))) }
  }

  /// Whether `object` is the live object whose side table is `sideTable`.
  @inline(__always)
  static func isLive(_ object: AnyObject, withSideTable sideTable: UInt) -> Bool {
    mainonce_is_live_with_side_table(address(of: object), UInt(sideTable))
  }

  private static func address(of object: AnyObject) -> UnsafeRawPointer {
    UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque())
  }

  private final class Probe {
    var onDeinit: (() -> Void)?
    deinit { onDeinit?() }
  }

  private static func selfTest() -> Bool {
    var probe: Probe? = Probe()
    let other = Probe()
    guard WeakReference(probe).object != nil, WeakReference(other).object != nil else {
      return false
    }
    let side = UInt(mainonce_side_table(address(of: probe!)))
    let otherSide = UInt(mainonce_side_table(address(of: other)))
    guard side != 0, otherSide != 0, side != otherSide,
      mainonce_side_table_object(side) == address(of: probe!),
      isLive(probe!, withSideTable: side), !isLive(other, withSideTable: side)
    else { return false }
    // This is safe because the closure runs in the probe's own deinit, while the object is
    // still allocated, and reads it only through its raw address: it holds no reference to the
    // object, so it neither retains a deinitializing object nor keeps one alive.
    let deinitializing = Locked<Bool?>(nil)
    let probeAddress = address(of: probe!)
    probe!.onDeinit = {
      deinitializing.withLock { $0 = !mainonce_is_live_with_side_table(probeAddress, side) }
    }
    probe = nil
    return withExtendedLifetime(other) { deinitializing.withLock { $0 } == true }
  }
}

/// A weak reference as a value, for a local one: `weak let` needs Swift 6.2, and from 6.2 on a
/// local `weak var` that is never assigned again draws a warning.
struct WeakReference<Object: AnyObject> {
  weak var object: Object?

  init(_ object: Object?) {
    self.object = object
  }
}

extension WeakReference: Sendable where Object: Sendable {}
