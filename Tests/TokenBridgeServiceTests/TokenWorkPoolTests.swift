import Glibc
import Synchronization
import Testing

@testable import TokenBridgeService

/// The service's pool of token work: a fixed number of workers, callers served in turn, a bound per caller.
@Suite struct TokenWorkPoolTests {
  final class Gate: Sendable {
    let open = Mutex(false)
    func wait() { while !open.withLock({ $0 }) { usleep(1000) } }
    func release() { open.withLock { $0 = true } }
  }

  final class Log: Sendable {
    let entries = Mutex<[String]>([])
    let running = Mutex((now: 0, most: 0))
    func add(_ s: String) { entries.withLock { $0.append(s) } }
    var all: [String] { entries.withLock { $0 } }
  }

  /// Waits (at most about 10 s) until `done` holds.
  func eventually(_ done: () -> Bool) -> Bool {
    for _ in 0..<10_000 {
      if done() { return true }
      usleep(1000)
    }
    return false
  }

  @Test func aCallerAtItsBoundIsRefusedAndTheOthersAreNot() {
    let pool = TokenWorkPool(limits: .init(workers: 1, perCaller: 3, total: 5))
    let gate = Gate()
    #expect(pool.submit(caller: "a") { gate.wait() })
    #expect(pool.submit(caller: "a") {})
    #expect(pool.submit(caller: "a") {})
    #expect(!pool.submit(caller: "a") {})
    #expect(pool.inFlight("a") == 3)
    #expect(pool.submit(caller: "b") {})
    #expect(pool.submit(caller: "c") {})
    // The pool as a whole is full.
    #expect(!pool.submit(caller: "d") {})
    gate.release()
    #expect(eventually { pool.inFlight("a") == 0 && pool.inFlight("b") == 0 && pool.inFlight("c") == 0 })
    #expect(pool.submit(caller: "a") {})
  }

  @Test func callersAreServedInTurn() {
    let pool = TokenWorkPool(limits: .init(workers: 1, perCaller: 10, total: 100))
    let gate = Gate()
    let log = Log()
    #expect(
      pool.submit(caller: "a") {
        gate.wait()
        log.add("a1")
      })
    #expect(eventually { pool.running == 1 })
    for n in 2...4 { #expect(pool.submit(caller: "a") { log.add("a\(n)") }) }
    #expect(pool.submit(caller: "b") { log.add("b1") })
    gate.release()
    #expect(eventually { log.all.count == 5 })
    #expect(log.all == ["a1", "a2", "b1", "a3", "a4"])
  }

  @Test func noMoreJobsRunAtOnceThanWorkers() {
    let pool = TokenWorkPool(limits: .init(workers: 2, perCaller: 50, total: 100))
    let log = Log()
    for n in 0..<40 {
      #expect(
        pool.submit(caller: "c\(n % 3)") {
          log.running.withLock {
            $0.now += 1
            $0.most = max($0.most, $0.now)
          }
          usleep(2000)
          log.running.withLock { $0.now -= 1 }
          log.add("\(n)")
        })
    }
    #expect(eventually { log.all.count == 40 })
    #expect(log.running.withLock { $0.most } <= 2)
  }
}
