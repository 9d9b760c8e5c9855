import DBus
import Glibc
import Platform
import Synchronization
import TokenBridge

/// The desktop service's decisions (docs/dbus-api.md): which calls are answered how, who is calling and what it
/// may act for, which tokens are busy, when a request is cancelled, when the service is idle. It runs on the one
/// thread that owns the bus; work that may touch a token, the network or a prompt runs on other threads and hands
/// its outcome back through `outbox`, which `drainOutbox` turns into the reply or the `Response` signal.
public final class ServiceDispatcher {
  public static let busName = "org.tokenbridge.TokenBridge1"
  public static let objectPath = "/org/tokenbridge/TokenBridge1"
  public static let interface = "org.tokenbridge.TokenBridge1"
  public static let requestPrefix = "/org/tokenbridge/TokenBridge1/request"
  public static let requestInterface = "org.tokenbridge.TokenBridge1.Request"
  public static let errorPrefix = "org.tokenbridge.TokenBridge1.Error."

  let bus: any ServiceBus
  let configuration: Configuration
  let operations: any ServiceOperations
  /// The identity of the process the bus's credentials name (`CallerIdentity.of(credentials:)`; tests: a table).
  let identify: (DBusValue) -> CallerIdentity?
  let uid: UInt32
  let idleTimeout: Duration?
  /// The worker threads of listings and policy checks, with their per-caller bound.
  let pool: TokenWorkPool
  var nextRequest = 1
  var requests: [String: Request] = [:]
  /// Method calls answered later, by id: when at the latest, and with what then (`overdue`).
  var pendingCalls: [Int: PendingCall] = [:]
  /// How long a listing or policy check may take before its caller gets an error (the work itself may be stuck
  /// in a PC/SC call to a pcscd that stopped: the answer does not wait for it).
  let callTimeout: Duration
  var nextCall = 1
  /// Tokens an operation runs on ("*": every token, an operation without options["token"]) → its request path.
  var busy: [String: String] = [:] {
    didSet { live.update { $0.busyTokens = Set(busy.keys) } }
  }
  /// Callers' identities by unique name (dropped when the name leaves the bus).
  var identities: [String: CallerIdentity] = [:]
  /// Registrations answered to a caller, by response message: NotifyUAFResult abandons one the server refused.
  var answered: [String: (sender: String, keyID: String)] = [:]
  var lastActivity = ContinuousClock.now
  /// The tokens last found (`ServiceWork.Context.seen`).
  var seen: [TokenInfo] = [] {
    didSet { live.update { $0.seen = seen } }
  }
  /// What workers read when they start: the busy tokens and the tokens last found as they are then, not as they
  /// were when the call was queued.
  let live: LiveContext
  public let outbox = Outbox()

  /// One open request (a ProcessUAFOperation or ProcessOutOfBand).
  final class Request {
    let path: String
    let sender: String
    let token: String
    let control = RequestControl()
    init(path: String, sender: String, token: String) {
      self.path = path
      self.sender = sender
      self.token = token
    }
  }

  /// `idleTimeout` nil: never idle.
  public init(
    bus: any ServiceBus, configuration: Configuration, operations: any ServiceOperations, idleTimeout: Duration?,
    pool: TokenWorkPool = TokenWorkPool(), callTimeout: Duration = .seconds(20), uid: UInt32 = getuid(),
    identify: @escaping (DBusValue) -> CallerIdentity? = CallerIdentity.of(credentials:)
  ) {
    self.pool = pool
    self.callTimeout = callTimeout
    self.bus = bus
    self.configuration = configuration
    self.operations = operations
    self.idleTimeout = idleTimeout
    self.uid = uid
    self.identify = identify
    let outbox = self.outbox
    live = LiveContext(ServiceWork.Context(configuration: configuration, found: { outbox.post(.seen($0)) }))
  }

  // MARK: Life cycle

  /// Nothing open and nothing being answered.
  public var hasNoWork: Bool { requests.isEmpty && pendingCalls.isEmpty }

  /// No request has run for the idle timeout and none is open: the service may end.
  public func isIdle(now: ContinuousClock.Instant = .now) -> Bool {
    guard let idleTimeout, hasNoWork else { return false }
    return now - lastActivity >= idleTimeout
  }

  // MARK: Answers

  func reply(_ call: any BusCall, _ values: [DBusValue]) {
    do { try bus.reply(to: call, values) } catch {
      bus.replyError(to: call, name: Self.errorPrefix + "Failed", message: "255: \(error)")
    }
  }

  /// An error reply whose text starts with the UAF code (docs/dbus-api.md, "Errors").
  func replyError(_ call: any BusCall, _ name: String, _ code: UAFErrorCode, _ text: String) {
    bus.replyError(to: call, name: Self.errorPrefix + name, message: "\(code.rawValue): \(text)")
  }

  /// A desktop notification, best effort (no notification daemon: nothing).
  func notify(_ summary: String, _ body: String) {
    try? bus.callWithoutReply(
      destination: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
      interface: "org.freedesktop.Notifications", member: "Notify",
      [
        .string("TokenBridge"), .uint32(0), .string("security-high"), .string(summary), .string(body),
        .array(element: "s", []), .dict([]), .int32(-1),
      ])
  }

  struct PendingCall {
    let call: any BusCall
    let deadline: ContinuousClock.Instant
    /// The answer when the work has not ended by the deadline.
    let overdue: Outbox.Outcome
  }

  /// What the CLI says of a pcscd that does not answer, as an error reply.
  static var tokensDoNotAnswer: Outbox.Outcome {
    let report = ServiceSupport.tokensDoNotAnswer
    return .failure(name: "Failed", code: UAFErrorCode(report.status), text: report.message)
  }

  /// Queues `body` in the pool under the caller; its outcome is the reply to `call`, or `overdue` once the call
  /// timeout passed. A caller at its bound (or a pool at its own) is answered Busy at once.
  func work(
    _ call: any BusCall, overdue: Outbox.Outcome = tokensDoNotAnswer,
    _ body: @escaping @Sendable () -> Outbox.Outcome
  ) {
    let id = nextCall
    let outbox = self.outbox
    let queued = pool.submit(caller: call.sender ?? "") {
      switch body() {
      case .values(let v): outbox.post(.reply(id: id, values: v))
      case .failure(let name, let code, let text): outbox.post(.error(id: id, name: name, code: code, text: text))
      }
    }
    guard queued else {
      replyError(
        call, "Busy", .insufficientAuthenticatorResources,
        "too many calls are waiting (at most \(pool.limits.perCaller) per caller): try again once some are answered")
      return
    }
    nextCall += 1
    pendingCalls[id] = PendingCall(call: call, deadline: .now + callTimeout, overdue: overdue)
  }

  /// Answers every call whose work did not end by its deadline with its `overdue` answer (by default what the
  /// CLI says of a pcscd that does not answer); the work's late outcome is dropped.
  public func expireOverdueCalls(now: ContinuousClock.Instant = .now) {
    for (id, pending) in pendingCalls where pending.deadline <= now {
      pendingCalls[id] = nil
      switch pending.overdue {
      case .values(let values): reply(pending.call, values)
      case .failure(let name, let code, let text): replyError(pending.call, name, code, text)
      }
      lastActivity = now
    }
  }

  /// What a worker needs of the service, as it is now.
  func snapshot() -> ServiceWork.Context { live.read() }
}

/// The busy tokens and the tokens last found, written by the dispatcher, read by a worker when its work starts.
final class LiveContext: Sendable {
  let context: Mutex<ServiceWork.Context>
  init(_ context: ServiceWork.Context) { self.context = Mutex(context) }
  func read() -> ServiceWork.Context { context.withLock { $0 } }
  func update(_ change: (inout ServiceWork.Context) -> Void) { context.withLock { change(&$0) } }
}
