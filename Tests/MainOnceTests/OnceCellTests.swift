import Dispatch
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
    // The owner borrows the storage, so the gate is published as it finishes; each handler
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
    let me = ThreadRecord.current.id
    MainQueueEngine.transition { held -> (Void, Gate?, GateEffects<WaiterQueue>) in
      guard case .pending(let gate) = storage.cell.phase(holding: held) else {
        return ((), nil, GateEffects())
      }
      // What the arrivals ask for (a timer) is not what this test is about: left undone.
      _ = gate.arrive(owner, on: me, inMainContext: true, holding: held)
      for handler in handlers {
        _ = gate.arrive(handler, on: nil, inMainContext: false, holding: held)
      }
      let (_, effects) = gate.settle(owner, with: .success(0), on: me, holding: held)
      return ((), gate, effects)
    }
    let publishedAtEnd = storage.word.isPublished
    #expect(publishedAtHandler.recorded == [false, false, false])
    #expect(publishedAtEnd)
  }

  @Test("a cell finished while no caller borrowed it is published by the next caller that asks")
  func finishedCellIsPublishedByTheNextCaller() {
    let storage = CellStorage()
    let handler = Waiter(
      site: cellSite, label: cellLabel, kind: .handler { _ in }, attempt: nil, storage: nil)
    let me = ThreadRecord.current.id
    let gate = OnceCell.withLock { held -> Gate? in
      guard case .pending(let gate) = storage.cell.phase(holding: held) else { return nil }
      // The hop it asks for is not sent: the test plays it.
      _ = gate.arrive(handler, on: nil, inMainContext: false, holding: held)
      _ = gate.mainQueueReached(on: me, isHop: true, holding: held)
      return gate
    }
    MainQueueEngine.transition { held -> (Void, Gate?, GateEffects<WaiterQueue>) in
      let (_, effects) = gate!.settle(handler, with: .success(0), on: me, holding: held)
      return ((), gate, effects)
    }
    let published = OnceCell.withLock { held -> [Bool] in
      let whenFinished = storage.word.isPublished
      guard case .done = storage.cell.phase(holding: held) else { return [whenFinished] }
      return [whenFinished, storage.word.isPublished]
    }
    // Finished, then done: from then on every call takes the fast path.
    #expect(published == [false, true])
  }

  @Test("a caller whose attempt failed has ended its wait for the detector before it wakes")
  func failedCallerHasEndedBeforeItWakes() {
    let storage = CellStorage()
    let parker = Parker()
    let me = ThreadRecord.current.id
    let failed = Waiter(
      site: cellSite, label: cellLabel, kind: .thread(ParkedThread(parker: parker, id: me)),
      attempt: nil,
      storage: storage.word.address)
    let next = Waiter(
      site: cellSite, label: cellLabel, kind: .thread(ParkedThread(parker: parker, id: me)),
      attempt: nil,
      storage: storage.word.address)
    var shell: Gate?
    let (ended, effects) = OnceCell.withLock { held -> ([Bool], GateEffects<WaiterQueue>?) in
      guard case .pending(let gate) = storage.cell.phase(holding: held) else { return ([], nil) }
      _ = gate.arrive(failed, on: me, inMainContext: true, holding: held)
      _ = gate.arrive(next, on: nil, inMainContext: false, holding: held)
      shell = gate
      let (runsNext, effects) = gate.settle(
        failed, with: .failure(AttemptFailed()), on: me, holding: held)
      effects.performUnderLock(in: &shell!, holding: held)
      // The runner goes on with `next`: the failed caller's wait still names it as its blocker,
      // so only its end mark, set under the lock before any wake, keeps the deadlock detector
      // from counting it.
      return ([runsNext === next, failed.isOver, next.isOver], effects)
    }
    #expect(ended == [true, true, false])
    effects?.performAfterLock(in: &shell!)
    #expect(parker.park(until: .now()))
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
