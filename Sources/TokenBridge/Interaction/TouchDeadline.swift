import Dispatch
import FoundationEssentials
import Synchronization
import TokenDevices

/// Bounds the wait for a touch by the interaction timeout (a key ends its own wait only after ~30 s, some
/// never): past `seconds` the key is told to stop (CTAP cancel, as Ctrl-C does, repeated until the body ends, so
/// a second touch in the same body is stopped too) and the operation ends as `.touchTimeout` — exit 14,
/// nothing written locally.
enum TouchDeadline {
  final class Watchdog: Sendable {
    let state = Mutex<(done: Bool, fired: Bool)>((false, false))
    let canceller: FIDO2Canceller

    init(_ canceller: FIDO2Canceller) { self.canceller = canceller }

    func fire() {
      let stop = state.withLock { s -> Bool in
        if !s.done { s.fired = true }
        return s.done
      }
      guard !stop else { return }
      canceller.cancel()
      DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { [self] in fire() }
    }

    var fired: Bool { state.withLock { $0.fired } }
    func finish() { state.withLock { $0.done = true } }
  }

  static func run<T>(_ canceller: FIDO2Canceller, seconds: Double, _ body: () throws(TokenError) -> T)
    throws(TokenError) -> T
  {
    let dog = Watchdog(canceller)
    DispatchQueue.global().asyncAfter(deadline: .now() + max(seconds, 0)) { dog.fire() }
    defer { dog.finish() }
    do { return try body() } catch .cancelled where dog.fired { throw .touchTimeout }
  }
}
