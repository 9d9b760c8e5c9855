import CPCSC
import Dispatch
import Glibc
import Platform
import Synchronization

/// A deadline on every pcsc-lite call that can block. pcsc-lite's client waits for pcscd's answer in `poll` without a
/// timeout (1.9.9 winscard_msg.c `MessageReceive`), holding its context's lock (and, in `SCardEstablishContext`, the
/// library's global lock): a pcscd that stops answering (SIGSTOP, hung) would block the call, and every later call,
/// for ever. Each call runs through `PCSCCall.run`, on the caller's thread; a watchdog thread looks at the calls in
/// flight. A call may take as long as it takes while pcscd answers (a transaction another process holds, a slow card,
/// `SCardGetStatusChange`'s own timeout): when a call has been in flight for `stallSeconds` and pcscd has answered
/// nothing meanwhile, the watchdog asks pcscd (a context established and released on a thread of its own); each
/// answer doubles the quiet time that call may have before pcscd is asked again (up to `longestQuiet`: `watch`'s
/// endless wait costs a question every half minute, not every two seconds). No answer
/// within `pingSeconds`: pcscd is unresponsive, and the watchdog shuts down (`shutdown(2)`) every socket of this
/// process connected to pcscd's, so each blocked call returns at once (pcsc-lite reads end of file:
/// `SCARD_F_COMM_ERROR`), its locks released. Such a call, and every call for `PCSCEstablish.quietSeconds` after, ends
/// `.serviceUnresponsive` (through `unresponsiveRV`). With pcscd stopped while a command waits, the command therefore
/// ends `stallSeconds + pingSeconds` (and a tick) after its call stalled.
enum PCSCCall {
  /// What a call given up returns: no PC/SC status (those are 0x8010xxxx and 0x8011xxxx); `PCSCContext.check` maps it.
  static let unresponsiveRV: LONG = 0x7E00_0001
  static let stallSeconds = 2.0
  static let pingSeconds = 3.0
  static let longestQuiet = 30.0

  struct State {
    /// Call id → when it began and how often pcscd answered the watchdog since.
    var inFlight: [Int: (start: UInt64, vouched: Int)] = [:]
    var next = 0
    /// When a call last returned (pcscd answered), in `DispatchTime` nanoseconds.
    var lastAnswer: UInt64 = 0
    /// The ping in progress: its number and start.
    var ping: (id: Int, started: UInt64)?
    var cuts = 0
    var watchdog = false
    /// The watchdog waits for the next call (no call in flight): `run` wakes it.
    var sleeping = false
  }

  static let state = Mutex(State())
  static let tick = DispatchSemaphore(value: 0)

  /// Seconds from `start` to `end` (monotonic nanoseconds), 0 when `start` is later: a call that began after the
  /// watchdog read the clock, or an answer recorded meanwhile, is not a negative time (an unsigned subtraction
  /// there trapped: SIGILL in the token lab's slower guest).
  static func seconds(from start: UInt64, to end: UInt64) -> Double {
    end > start ? Double(end - start) / 1e9 : 0
  }

  /// Runs one pcsc-lite call (`body` returns its result) under the deadline.
  static func run(_ body: () -> LONG) -> LONG {
    if PCSCEstablish.isUnresponsive { return unresponsiveRV }
    let now = DispatchTime.now().uptimeNanoseconds
    let (id, cuts, start, wake) = state.withLock { s -> (Int, Int, Bool, Bool) in
      let id = s.next
      s.next += 1
      s.inFlight[id] = (now, 0)
      let start = !s.watchdog
      s.watchdog = true
      let wake = s.sleeping
      s.sleeping = false
      return (id, s.cuts, start, wake)
    }
    if start && !POSIXThread.start(stackSize: 1 << 18, { watch() }) {
      state.withLock { $0.watchdog = false }
    }
    if wake { tick.signal() }
    let rv = body()
    let cut = state.withLock { s -> Bool in
      s.inFlight[id] = nil
      if s.cuts != cuts { return true }
      s.lastAnswer = DispatchTime.now().uptimeNanoseconds
      return false
    }
    return cut ? unresponsiveRV : rv
  }

  /// The watchdog: every quarter second while calls are in flight; with none, it sleeps until the next call wakes
  /// it (one thread for the life of the process, never one per call: a thread's start is a measurable part of a
  /// short command).
  static func watch() {
    while true {
      if state.withLock({ $0.sleeping }) { tick.wait() } else { _ = tick.wait(timeout: .now() + 0.25) }
      let now = DispatchTime.now().uptimeNanoseconds
      enum Step {
        case idle
        case ping(Int)
        case cut
      }
      let step = state.withLock { s -> Step in
        if let p = s.ping {
          guard seconds(from: p.started, to: now) > pingSeconds else { return .idle }
          s.ping = nil
          s.cuts += 1
          return .cut
        }
        guard !s.inFlight.isEmpty else {
          s.sleeping = true
          return .idle
        }
        let last = s.lastAnswer
        let stalled = s.inFlight.values.contains { call in
          let quiet = seconds(from: max(call.start, last), to: now)
          return quiet > min(stallSeconds * Double(1 << min(call.vouched, 8)), longestQuiet)
        }
        guard stalled else { return .idle }
        s.ping = (s.next, now)
        s.next += 1
        return .ping(s.ping!.id)
      }
      switch step {
      case .idle: continue
      case .ping(let id): startPing(id)
      case .cut:
        PCSCEstablish.markUnresponsive()
        cutSockets()
      }
    }
  }

  /// Asks pcscd for a context (and releases it): an answer is pcscd alive. Not through `run` (its own deadline is
  /// the ping's).
  static func startPing(_ id: Int) {
    let started = POSIXThread.start(stackSize: 1 << 18) {
      let (rv, ctx) = PCSCEstablish.establishNow()
      if rv == SCARD_S_SUCCESS { SCardReleaseContext(ctx) }
      state.withLock { s in
        guard s.ping?.id == id else { return }
        s.ping = nil
        guard rv == SCARD_S_SUCCESS else { return }
        s.lastAnswer = DispatchTime.now().uptimeNanoseconds
        for id in s.inFlight.keys { s.inFlight[id]?.vouched += 1 }
      }
    }
    if !started { state.withLock { $0.ping = nil } }
  }

  /// pcscd's socket as pcsc-lite finds it: `PCSCLITE_CSOCK_NAME`, else its built-in path.
  static var socketPath: String {
    Environment.value("PCSCLITE_CSOCK_NAME").flatMap { $0.isEmpty ? nil : $0 } ?? "/run/pcscd/pcscd.comm"
  }

  /// Shuts down every socket of this process whose peer is pcscd's socket (`getpeername` names the path a Unix
  /// socket is connected to).
  static func cutSockets() {
    let path = Array(socketPath.utf8)
    let limit = min(Int(sysconf(Int32(_SC_OPEN_MAX))), 65536)
    for fd in 0..<Int32(max(limit, 0)) {
      var addr = sockaddr_un()
      var len = socklen_t(MemoryLayout<sockaddr_un>.size)
      let got = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &len) }
      }
      guard got == 0, addr.sun_family == sa_family_t(AF_UNIX) else { continue }
      let peer = withUnsafeBytes(of: addr.sun_path) { Array($0.prefix { $0 != 0 }) }
      if peer == path { shutdown(fd, Int32(SHUT_RDWR)) }
    }
  }
}

/// `SCardEstablishContext` with a deadline. The first establishment of the process, the first PC/SC call of every
/// use, runs on a helper thread and is given up after `answerDeadline` (a pcscd whose listen backlog is full blocks
/// pcsc-lite in `connect`, where no shutdown reaches it): `.serviceUnresponsive`. Later ones run through
/// `PCSCCall.run`. After either gave up, every PC/SC call of the process ends `.serviceUnresponsive` at once for
/// `quietSeconds`; then the next establishment is a first one again (a long-lived process finds pcscd back).
enum PCSCEstablish {
  enum State {
    case unknown
    case answered
    case unresponsive(since: UInt64)
  }

  static let state = Mutex(State.unknown)
  /// pcscd answers in milliseconds; a socket-activated one that is starting, within a second or two.
  static let answerDeadline = 5.0
  static let quietSeconds = 30.0

  static var isUnresponsive: Bool {
    state.withLock { s in
      guard case .unresponsive(let since) = s else { return false }
      if PCSCCall.seconds(from: since, to: DispatchTime.now().uptimeNanoseconds) < quietSeconds { return true }
      s = .unknown
      return false
    }
  }

  static func markUnresponsive() { state.withLock { $0 = .unresponsive(since: DispatchTime.now().uptimeNanoseconds) } }

  /// What `SCardEstablishContext` returned, and the context.
  static func context() throws(SmartCardError) -> (LONG, SCARDCONTEXT) {
    if isUnresponsive { throw .serviceUnresponsive }
    guard case .unknown = state.withLock({ $0 }) else {
      let result = establish()
      if result.0 == PCSCCall.unresponsiveRV { throw .serviceUnresponsive }
      return result
    }
    final class Outcome: Sendable {
      let lock = Mutex<(rv: LONG, ctx: SCARDCONTEXT, abandoned: Bool)?>(nil)
      let done = DispatchSemaphore(value: 0)
    }
    let outcome = Outcome()
    let started = POSIXThread.start(stackSize: 1 << 20) {
      let (rv, ctx) = establish()
      let abandoned = outcome.lock.withLock { o -> Bool in
        if o?.abandoned == true { return true }
        o = (rv, ctx, false)
        return false
      }
      // Given up on meanwhile: nobody will use the context (pcscd answered late).
      if abandoned && rv == SCARD_S_SUCCESS { _ = PCSCCall.run { SCardReleaseContext(ctx) } }
      outcome.done.signal()
    }
    guard started else { return establish() }
    if outcome.done.wait(timeout: .now() + answerDeadline) == .timedOut {
      let result = outcome.lock.withLock { o -> (LONG, SCARDCONTEXT)? in
        if let o { return (o.rv, o.ctx) }
        o = (0, 0, true)
        return nil
      }
      guard let result else {
        markUnresponsive()
        throw .serviceUnresponsive
      }
      return answered(result)
    }
    let result = answered(outcome.lock.withLock { ($0!.rv, $0!.ctx) })
    if result.0 == PCSCCall.unresponsiveRV { throw .serviceUnresponsive }
    return result
  }

  static func answered(_ result: (LONG, SCARDCONTEXT)) -> (LONG, SCARDCONTEXT) {
    // "No service" (no socket, pcscd not running) is an answer too, but not pcscd's: the next use asks anew.
    if PCSCStatus(result.0) == .success { state.withLock { $0 = .answered } }
    return result
  }

  /// Through the deadline (`PCSCCall`).
  static func establish() -> (LONG, SCARDCONTEXT) {
    var ctx: SCARDCONTEXT = 0
    let rv = PCSCCall.run { SCardEstablishContext(DWORD(SCARD_SCOPE_SYSTEM), nil, nil, &ctx) }
    return (rv, ctx)
  }

  /// Without a deadline: the watchdog's own question to pcscd.
  static func establishNow() -> (LONG, SCARDCONTEXT) {
    var ctx: SCARDCONTEXT = 0
    let rv = SCardEstablishContext(DWORD(SCARD_SCOPE_SYSTEM), nil, nil, &ctx)
    return (rv, ctx)
  }
}
