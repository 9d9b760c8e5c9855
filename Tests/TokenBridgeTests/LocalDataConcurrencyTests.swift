import Foundation
import Synchronization
import Testing

@testable import TokenBridge

/// A real child process, to own pending registrations: running (`sleep`) or already reaped.
final class ChildProcess {
  let process = Process()
  let owner: ProcessOwner

  init() throws {
    process.executableURL = URL(fileURLWithPath: "/bin/sleep")
    process.arguments = ["600"]
    try process.run()
    let pid = process.processIdentifier
    owner = ProcessOwner(pid: pid, start: try #require(ProcessOwner.status(of: pid)).start)
  }

  /// As kill -9 (SIGKILL: the child may inherit a mask that blocks SIGTERM).
  func end() {
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }

  deinit { if process.isRunning { end() } }

  /// The owner of a process that ran and is gone (reaped).
  static func exited() throws -> ProcessOwner {
    let child = try ChildProcess()
    child.end()
    return child.owner
  }
}

/// Several connections (as several runs) on one local data file, with owners that live or are gone.
@Suite struct LocalDataConcurrencyTests {
  let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tb-conc-\(UUID().uuidString)")

  func record(_ keyID: String) -> AuthenticatorRecord {
    AuthenticatorRecord(
      keyID: keyID, aaid: "7B1D#0001", username: "u-\(keyID)", server: "https://rp.example",
      appID: "https://rp.example", tokenID: "piv-1", slot: -1, publicKey: Data(), signCounter: 0, state: .pending,
      createdAt: Date(), credentialID: nil, hmacSalt: nil)
  }

  @Test func pendingRegistrationOfALiveRunSurvivesRepair() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let child = try ChildProcess()
    let running = try LocalData(directory: dir, owner: child.owner)
    #expect(try running.reserveSlot(candidates: [0x82], record: record("live")) == 0x82)
    let other = try LocalData(directory: dir)  // a second connection: another command run meanwhile
    #expect(try other.repairInterrupted().isEmpty)
    #expect(try other.authenticators(includeAll: true).map(\.keyID) == ["live"])
    // The slot is not handed out while its registration runs.
    #expect(try other.reserveSlot(candidates: [0x82], record: record("second")) == nil)
    try running.confirmRegistration("live")  // the run ends well: the server accepted it
    #expect(try other.authenticators().map(\.keyID) == ["live"])
    child.end()
  }

  @Test func pendingRegistrationOfAGoneRunIsRepaired() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let child = try ChildProcess()
    let running = try LocalData(directory: dir, owner: child.owner)
    _ = try running.reserveSlot(candidates: [0x82], record: record("killed"))
    let other = try LocalData(directory: dir)
    #expect(try other.repairInterrupted().isEmpty)
    child.end()  // as kill -9: the owner is gone
    #expect(try other.repairInterrupted().map(\.keyID) == ["killed"])
    #expect(try other.slotAssignments(tokenID: "piv-1") == [0x82: SlotAssignment(tokenID: "piv-1", slot: 0x82)])
    #expect(try other.reserveSlot(candidates: [0x82], record: record("next")) == 0x82)
  }

  /// The record a repair abandoned stays findable (`provision` asks the server whether it took it), whichever
  /// process repaired it; adopting it writes it back as registered, in its slot, and it is no longer listed.
  @Test func anInterruptedRegistrationOutlivesTheProcessThatRepairedIt() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let child = try ChildProcess()
    let running = try LocalData(directory: dir, owner: child.owner)
    _ = try running.reserveSlot(candidates: [0x82], record: record("killed"))
    try running.setPublicKey("killed", [4, 1, 2])
    child.end()
    #expect(try LocalData(directory: dir).repairInterrupted().map(\.keyID) == ["killed"])  // another command
    let rerun = try LocalData(directory: dir)
    #expect(try rerun.repairInterrupted().isEmpty)
    let left = try rerun.interruptedRegistrations(tokenID: "piv-1")
    #expect(left.map(\.keyID) == ["killed"] && left.first?.slot == 0x82 && left.first?.username == "u-killed")
    #expect(left.first?.publicKey == Data([4, 1, 2]))
    #expect(try rerun.interruptedRegistrations(tokenID: "piv-2").isEmpty)
    #expect(try rerun.adopt(left[0]))
    #expect(try rerun.authenticators().map { [$0.keyID, $0.state.rawValue] } == [["killed", "registered"]])
    #expect(try rerun.slotAssignments(tokenID: "piv-1")[0x82]?.keyID == "killed")
    #expect(try rerun.interruptedRegistrations(tokenID: "piv-1").isEmpty)
  }

  @Test func aReusedPidIsNotTheOwner() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let me = ProcessOwner.current
    #expect(me.start > 0 && me.isAlive)
    // Same pid, another start time: the process that wrote the row is gone, the pid now someone else's.
    let earlier = try LocalData(directory: dir, owner: ProcessOwner(pid: me.pid, start: me.start - 1))
    _ = try earlier.reserveSlot(candidates: [0x82], record: record("old"))
    _ = try LocalData(directory: dir).reserveSlot(candidates: [0x83], record: record("mine"))
    #expect(try LocalData(directory: dir).repairInterrupted().map(\.keyID) == ["old"])
    #expect(try LocalData(directory: dir).authenticators(includeAll: true).map(\.keyID) == ["mine", ""])
  }

  @Test func noSlotIsGivenTwiceUnderContention() throws {
    defer { try? FileManager.default.removeItem(at: dir) }
    let slots = Array(0x82...0x95)
    let writers = 6
    let connections = try (0..<writers).map { _ in try LocalData(directory: dir) }
    let results = Results()
    DispatchQueue.concurrentPerform(iterations: writers) { w in
      var n = 0
      while true {
        do {
          guard
            let s = try connections[w].reserveSlot(candidates: slots, record: record("w\(w)-\(n)"))
          else { return }
          // Half of them are given up at once (a failed registration): the slot is free again for another.
          if n % 2 == 1 { try connections[w].abandon("w\(w)-\(n)") } else { results.add(s, "w\(w)-\(n)") }
          n += 1
        } catch {
          results.fail(error)
          return
        }
      }
    }
    #expect(results.errors.isEmpty)  // a concurrent writer waits, it does not fail with "database is locked"
    #expect(results.slots.map(\.0).sorted() == slots)  // each slot once
    let table = try LocalData(directory: dir).slotAssignments(tokenID: "piv-1")
    #expect(table.count == slots.count)
    for (slot, keyID) in results.slots { #expect(table[slot]?.keyID == keyID) }
  }
}

final class Results: Sendable {
  let state = Mutex<(slots: [(Int, String)], errors: [String])>(([], []))
  var slots: [(Int, String)] { state.withLock { $0.slots } }
  var errors: [String] { state.withLock { $0.errors } }
  func add(_ slot: Int, _ keyID: String) { state.withLock { $0.slots.append((slot, keyID)) } }
  func fail(_ error: Error) { state.withLock { $0.errors.append("\(error)") } }
}
