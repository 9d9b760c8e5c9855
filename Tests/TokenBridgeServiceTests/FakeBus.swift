import DBus
import Glibc
import Synchronization
import TokenBridge

@testable import TokenBridgeService

/// A method call or signal as a test makes it.
final class FakeCall: BusCall {
  let sender: String?
  let path: String?
  let interface: String?
  let member: String?
  let values: [DBusValue]
  let isMethodCall: Bool

  init(
    from sender: String?, _ member: String, _ values: [DBusValue] = [],
    path: String = ServiceDispatcher.objectPath, interface: String? = ServiceDispatcher.interface,
    isMethodCall: Bool = true
  ) {
    self.sender = sender
    self.member = member
    self.values = values
    self.path = path
    self.interface = interface
    self.isMethodCall = isMethodCall
  }

  var signature: String { values.map(\.signature).joined() }
  func arguments() throws(DBusError) -> [DBusValue] { values }
}

/// A bus that records what the dispatcher sends.
final class FakeBus: ServiceBus {
  enum Sent: Equatable {
    case reply(member: String?, [DBusValue])
    case error(member: String?, name: String, message: String)
    case signal(path: String, member: String, destination: String, [DBusValue])
    case notification(String)
  }
  var sent: [Sent] = []
  /// The uid each caller's credentials name (absent: ours).
  var uids: [String: UInt32] = [:]

  func reply(to call: any BusCall, _ values: [DBusValue]) throws(DBusError) {
    sent.append(.reply(member: call.member, values))
  }
  func replyError(to call: any BusCall, name: String, message: String) {
    sent.append(.error(member: call.member, name: name, message: message))
  }
  func signal(path: String, interface: String, member: String, destination: String, _ values: [DBusValue])
    throws(DBusError)
  {
    sent.append(.signal(path: path, member: member, destination: destination, values))
  }
  /// Callers that left the bus: asking for their credentials fails, as the bus daemon's NameHasNoOwner.
  var gone: Set<String> = []
  func credentials(of sender: String) throws(DBusError) -> DBusValue {
    if gone.contains(sender) { throw DBusError(name: "org.freedesktop.DBus.Error.NameHasNoOwner", message: sender) }
    return .dict([.init("UnixUserID", .uint32(uids[sender] ?? 1000)), .init("ProcessID", .uint32(4242))])
  }
  func callWithoutReply(destination: String, path: String, interface: String, member: String, _ values: [DBusValue])
    throws(DBusError)
  {
    if case .string(let summary)? = values.dropFirst(3).first { sent.append(.notification(summary)) }
  }

  var errors: [(name: String, message: String)] {
    sent.compactMap { if case .error(_, let n, let m) = $0 { (n, m) } else { nil } }
  }
  var replies: [[DBusValue]] { sent.compactMap { if case .reply(_, let v) = $0 { v } else { nil } } }
  var signals: [(path: String, destination: String, values: [DBusValue])] {
    sent.compactMap { if case .signal(let p, _, let d, let v) = $0 { (p, d, v) } else { nil } }
  }
}

/// Operations that answer from fixed values; a request runs until the test releases it or it is cancelled.
final class FakeOperations: ServiceOperations {
  let released = Mutex<Set<String>>([])
  let started = Mutex<[RequestWork]>([])
  /// While true, Discover does not answer.
  let holdDiscover = Mutex(false)

  func discover(_ c: ServiceWork.Context) -> Outbox.Outcome {
    while holdDiscover.withLock({ $0 }) { usleep(1000) }
    return .values([.dict([])])
  }
  func listTokens(_ c: ServiceWork.Context, token: String?) -> Outbox.Outcome {
    .values([.array(element: "a{sv}", [])])
  }
  func checkPolicy(_ c: ServiceWork.Context, message: String, facet: String, token: String?) -> Outbox.Outcome {
    .values([.uint32(0)])
  }
  func abandon(_ c: ServiceWork.Context, keyID: String) -> Outbox.Outcome { .values([]) }

  /// Registrations settled: (keyID, kept).
  let settled = Mutex<[String]>([])
  func settleRegistration(_ c: ServiceWork.Context, keyID: String, keep: Bool) -> String? {
    settled.withLock { $0.append("\(keyID) \(keep ? "kept" : "abandoned")") }
    return nil
  }

  /// Runs until `release(message)` or the request's cancellation.
  func process(_ c: ServiceWork.Context, _ work: RequestWork, control: RequestControl, outbox: Outbox)
    -> RequestOutcome
  {
    started.withLock { $0.append(work) }
    guard case .uaf(let message, _) = work.kind else { return RequestOutcome(response: 2, results: []) }
    while true {
      if control.isCancelled {
        return RequestOutcome(response: 1, results: [.init("errorCode", .uint32(3))])
      }
      if released.withLock({ $0.contains(message) }) {
        return RequestOutcome(response: 0, results: [.init("errorCode", .uint32(0))])
      }
      usleep(1000)
    }
  }

  /// Jobs the dispatcher's pool still has for anyone.
  func pool(_ dispatcher: ServiceDispatcher) -> Int { dispatcher.pool.running }

  func release(_ message: String) { released.withLock { _ = $0.insert(message) } }
}

/// Drains the dispatcher's outbox until `done` holds (each wait: the outbox's wake-up, at most 50 ms).
func settle(_ dispatcher: ServiceDispatcher, until done: () -> Bool) -> Bool {
  for _ in 0..<400 {
    dispatcher.drainOutbox()
    if done() { return true }
    var p = pollfd(fd: dispatcher.outbox.readFD, events: Int16(POLLIN), revents: 0)
    _ = poll(&p, 1, 50)
    dispatcher.outbox.clearWake()
  }
  return false
}
