import ArgumentParser
import Dispatch
import Foundation
import VirtualTokens

#if canImport(Glibc)
  import Glibc
#endif

@main
struct VirtualToken: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "virtual-token",
    abstract: "Simulated hardware tokens for tests and demos.",
    subcommands: [PIV.self, FIDO2.self, USBIP.self])
}

func log(_ s: String) {
  FileHandle.standardError.write(Data("virtual-token: \(s)\n".utf8))
}

/// Turns signals into actions, run one at a time on a thread of their own that waits for them (sigwait), and writes
/// the pid file. The signals are blocked in this thread before the waiter starts, and so in the waiter (pthread_create
/// hands on the mask; Foundation's Thread does not) and in every thread started after: none can take one past the
/// waiter. (Dispatch signal sources lost them: a SIGTERM caught by a thread that did not block it went to
/// libdispatch's handler and never reached the source, and a card the tests stopped kept running.)
func handleSignals(_ actions: [(Int32, @Sendable () -> Void)], pidFile: String?) -> SignalWaiter {
  let waiter = SignalWaiter(actions)
  var blocked = waiter.set
  pthread_sigmask(SIG_BLOCK, &blocked, nil)
  var thread = pthread_t()
  let context = Unmanaged.passRetained(waiter).toOpaque()
  let rc = pthread_create(
    &thread, nil,
    { context in
      let waiter = Unmanaged<SignalWaiter>.fromOpaque(context!).takeRetainedValue()
      var set = waiter.set
      while true {
        var sig: Int32 = 0
        guard sigwait(&set, &sig) == 0 else { continue }
        waiter.actions[sig]?()
      }
    }, context)
  precondition(rc == 0, "virtual-token: no thread for the signals (\(rc))")
  pthread_detach(thread)
  if let pidFile { try? "\(getpid())\n".write(toFile: pidFile, atomically: true, encoding: .utf8) }
  return waiter
}

/// The signals `handleSignals` waits for and what each does.
final class SignalWaiter: Sendable {
  let actions: [Int32: @Sendable () -> Void]
  let set: sigset_t
  init(_ actions: [(Int32, @Sendable () -> Void)]) {
    self.actions = Dictionary(actions, uniquingKeysWith: { first, _ in first })
    var set = sigset_t()
    sigemptyset(&set)
    for (sig, _) in actions { sigaddset(&set, sig) }
    self.set = set
  }
}
