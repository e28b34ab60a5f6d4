import Testing

@testable import MainOnce

/// The once-cell's transitions, made directly under its lock by one caller at a time: what the
/// engine's callers are told at each step, without threads or the main queue.
@Suite("Each transition of a once-cell tells its callers the right thing")
struct OnceCellTests {
  @Test("a successful attempt publishes the word only after every waiting caller is resolved")
  func publishesAfterResolvingEveryWaiter() {
    let storage = CellStorage()
    let publishedAtHandler = Recorder<Bool>()
    // The owner borrows the storage, so the flight is published as it finishes; each handler
    // is submitted while it is resolved, and sees whether a caller on the fast path could
    // already have gone ahead of it.
    let owner = Waiter(
      site: cellSite, label: cellLabel, kind: .inPlace, attempt: nil, storage: storage.word.address)
    let handlers = (0..<3).map { _ in
      Waiter(
        site: cellSite, label: cellLabel,
        kind: .handler { _ in publishedAtHandler.record(storage.word.isPublished) },
        attempt: nil, storage: nil)
    }
    var wakes = Wakes()
    OnceCell.withLock { held in
      guard case .inFlight(let flight) = storage.cell.phase(holding: held) else { return }
      _ = flight.arrive(owner, on: ThreadRecord.current.id, inMainContext: true, holding: held)
      for handler in handlers {
        _ = flight.arrive(handler, on: nil, inMainContext: false, holding: held)
      }
      flight.finish(owner, with: .success(0), into: &wakes, holding: held)
    }
    wakes.deliver()
    let publishedAtEnd = storage.word.isPublished
    #expect(publishedAtHandler.recorded == [false, false, false])
    #expect(publishedAtEnd)
  }

  @Test("a cell finished while no caller borrowed it is published by the next caller that asks")
  func finishedCellIsPublishedByTheNextCaller() {
    let storage = CellStorage()
    let handler = Waiter(
      site: cellSite, label: cellLabel, kind: .handler { _ in }, attempt: nil, storage: nil)
    var wakes = Wakes()
    let published = OnceCell.withLock { held -> [Bool] in
      guard case .inFlight(let flight) = storage.cell.phase(holding: held) else { return [] }
      _ = flight.arrive(handler, on: nil, inMainContext: false, holding: held)
      _ = flight.mainQueueReached(on: ThreadRecord.current.id, isHop: true, holding: held)
      flight.finish(handler, with: .success(0), into: &wakes, holding: held)
      let whenFinished = storage.word.isPublished
      guard case .done = storage.cell.phase(holding: held) else { return [whenFinished] }
      return [whenFinished, storage.word.isPublished]
    }
    wakes.deliver()
    // Finished, then done: from then on every call takes the fast path.
    #expect(published == [false, true])
  }

  @Test("a caller whose attempt failed has ended its wait for the detector before it wakes")
  func failedCallerHasEndedBeforeItWakes() {
    let storage = CellStorage()
    let parking = Parking()
    let me = ThreadRecord.current.id
    let failed = Waiter(
      site: cellSite, label: cellLabel, kind: .thread(parking, me), attempt: nil,
      storage: storage.word.address)
    let next = Waiter(
      site: cellSite, label: cellLabel, kind: .thread(parking, me), attempt: nil,
      storage: storage.word.address)
    var wakes = Wakes()
    let ended = OnceCell.withLock { held -> [Bool] in
      guard case .inFlight(let flight) = storage.cell.phase(holding: held) else { return [] }
      _ = flight.arrive(failed, on: me, inMainContext: true, holding: held)
      _ = flight.arrive(next, on: nil, inMainContext: false, holding: held)
      flight.finish(failed, with: .failure(AttemptFailed()), into: &wakes, holding: held)
      // The runner goes on with `next`: the failed caller's wait still names it as its blocker,
      // so only its end mark keeps the deadlock detector from counting it.
      let marks = [failed.isOver, next.isOver]
      _ = flight.startNextAttempt(on: me, holding: held)
      flight.finish(next, with: .success(0), into: &wakes, holding: held)
      return marks
    }
    #expect(ended == [true, false])
    wakes.deliver()
  }
}

private struct AttemptFailed: Error {}

private let cellSite = CallSite(file: #fileID, line: #line)
private let cellLabel = CellLabel.token(
  name: nil, declaration: DeclarationSite(file: #fileID, line: #line))

/// A once-cell's storage: a class keeps the word in place for as long as the test uses it.
private final class CellStorage: Sendable {
  let word = _OnceWord()

  /// The cell, to use while the storage is alive.
  var cell: OnceCell {
    OnceCell(
      word: word.address,
      label: .token(name: nil, declaration: DeclarationSite(file: #fileID, line: #line)))
  }
}
