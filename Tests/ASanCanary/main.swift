// Deliberately reads freed memory: CI runs it under AddressSanitizer and requires a report, to
// prove that ASan is live in the step that runs the tests under it.
let value = UnsafeMutablePointer<Int>.allocate(capacity: 1)
value.initialize(to: 42)
value.deallocate()
print("read after free: \(value.pointee)")
