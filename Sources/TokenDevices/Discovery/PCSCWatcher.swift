import CPCSC
import Dispatch
import FoundationEssentials
import Platform
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A change PC/SC reports: readers coming and going (pcsc-lite's `\\?PnP?\Notification`), cards inserted and
/// removed, and pcscd itself going away and coming back.
public enum PCSCEvent: Equatable, Sendable {
  case readerAdded(String)
  case readerRemoved(String)
  case cardInserted(reader: String)
  case cardRemoved(reader: String)
  /// pcscd cannot be reached (not running, or stopped under us: SCARD_E_NO_SERVICE, SCARD_E_SERVICE_STOPPED).
  case serviceLost
  /// pcscd is reachable again (a new context was established).
  case serviceBack
}

/// Follows PC/SC with `SCardGetStatusChange` on every reader and on `\\?PnP?\Notification` (blocking, no
/// timeout: no polling). When pcscd goes away it releases the context and waits for pcscd's socket to come
/// back (inotify on the socket's directory; a slow back-off only when the socket exists but refuses us, as a
/// socket-activated pcscd that failed would), then re-establishes the context and reports what changed meanwhile.
///
/// Make the watcher, read `cards` (the state when it was made), then `start`: nothing between is missed.
public final class PCSCWatcher: Sendable {
  /// The PC/SC context (nil while pcscd is away) and whether `stop` was called (`stop` runs on another thread than
  /// the loop).
  private let state: Mutex<(context: SCARDCONTEXT?, stopped: Bool)>
  private let wake: (read: Int32, write: Int32)
  /// What the watcher saw when it was made: the loop goes on from there.
  private let seenAtStart: Seen
  let socketPath: String

  /// What `refresh` compares the next answer with; the loop keeps it (one thread), `init` makes the first one.
  struct Seen {
    /// Last seen per reader: card present, and pcsc-lite's event counter (the high word of dwEventState).
    var known: [String: (present: Bool, counter: DWORD, raw: DWORD)] = [:]
    /// A new context after pcscd came back: the states last seen belong to the old pcscd (its event counters
    /// mean nothing now); compare the presence of cards only, once.
    var resync = false
  }

  /// Readers that held a card when the watcher was made.
  public let cards: [String]
  /// Readers pcscd listed when the watcher was made.
  public let readers: [String]
  /// pcscd was reachable when the watcher was made.
  public let available: Bool

  public init() {
    wake = WakePipe.make()
    let env = Environment.value("PCSCLITE_CSOCK_NAME")
    socketPath = env.flatMap { $0.isEmpty ? nil : $0 } ?? "/run/pcscd/pcscd.comm"
    let established = Self.establish()
    state = Mutex((context: established, stopped: false))
    var seen = Seen()
    var cards: [String] = []
    var readers: [String] = []
    if let ctx = established,
      case .ok = Self.refresh(ctx, &seen, timeoutMs: 0, isStopped: { false }, report: { _ in })
    {
      cards = seen.known.filter(\.value.present).map(\.key).sorted()
      readers = seen.known.keys.sorted()
    }
    available = established != nil
    seenAtStart = seen
    self.cards = cards
    self.readers = readers
  }

  deinit {
    stop()
    if let c = state.withLock({ $0.context }) { _ = PCSCCall.run { SCardReleaseContext(c) } }
    if wake.read >= 0 {
      close(wake.read)
      close(wake.write)
    }
  }

  /// Runs the loop on its own thread; `handler` is called on that thread, in order.
  public func start(_ handler: @escaping @Sendable (PCSCEvent) -> Void) {
    POSIXThread.start(stackSize: 1 << 20) { [self] in loop(handler) }
  }

  /// Ends the loop (SCardCancel wakes a waiting SCardGetStatusChange; the pipe wakes a wait for pcscd).
  public func stop() {
    let context = state.withLock {
      $0.stopped = true
      return $0.context
    }
    // Outside the lock: with pcscd stopped, the cancel waits for the deadline (`PCSCCall`), and the loop must not.
    // (A context released meanwhile is refused by pcsc-lite: SCARD_E_INVALID_HANDLE.)
    if let c = context { _ = PCSCCall.run { SCardCancel(c) } }
    if wake.write >= 0 { _ = write(wake.write, "x", 1) }
  }

  var isStopped: Bool { state.withLock { $0.stopped } }

  static func establish() -> SCARDCONTEXT? {
    guard (try? SystemLibrary.pcsclite.load()) != nil else { return nil }  // like no pcscd: nothing to watch
    // Bounded: a pcscd that does not answer is, to a watcher, one that is not there (`PCSCEstablish`).
    guard let (rv, ctx) = try? PCSCEstablish.context(), rv == SCARD_S_SUCCESS else { return nil }
    return ctx
  }

  enum Outcome {
    case ok
    case serviceGone
    case stopped
  }

  /// pcscd is gone for this context (the daemon stopped, or restarted: the old context is unknown to the new one).
  static func isServiceGone(_ rv: LONG) -> Bool {
    let st = PCSCStatus(rv)
    // SCARD_F_INTERNAL_ERROR, SCARD_F_COMM_ERROR, SCARD_F_UNKNOWN_ERROR: what the client library answers
    // when its socket to pcscd breaks mid-call.
    let broken: Set<UInt32> = [0x8010_0001, 0x8010_0013, 0x8010_0014]
    return st == .noService || st == .serviceStopped || st == .invalidHandle || broken.contains(st.rawValue)
      || rv == PCSCCall.unresponsiveRV
  }

  func loop(_ handler: @escaping @Sendable (PCSCEvent) -> Void) {
    var seen = seenAtStart
    var down = !available
    if down { handler(.serviceLost) }
    var backoff = 1.0
    while !isStopped {
      guard let ctx = state.withLock({ $0.context }) else {
        if let c = Self.establish() {
          state.withLock { $0.context = c }
          if isStopped { break }
          seen.resync = true
          if down {
            handler(.serviceBack)
            down = false
          }
          backoff = 1
          continue
        }
        if !down {
          handler(.serviceLost)
          down = true
        }
        waitForService(backoff: backoff)
        backoff = min(backoff * 2, 30)
        continue
      }
      switch Self.refresh(ctx, &seen, timeoutMs: 0xFFFF_FFFF, isStopped: { self.isStopped }, report: handler) {
      case .ok: continue
      case .stopped: return
      case .serviceGone:
        state.withLock {
          _ = PCSCCall.run { SCardReleaseContext(ctx) }
          $0.context = nil
        }
        if !down {
          handler(.serviceLost)
          down = true
        }
      }
    }
  }

  /// Lists the readers (reporting those gone and new), then waits up to `timeoutMs` for a change in any reader
  /// or in the reader list, reporting card insertions and removals; `seen` is what was seen last, and is updated.
  static func refresh(
    _ ctx: SCARDCONTEXT, _ seen: inout Seen, timeoutMs: DWORD, isStopped: () -> Bool, report: (PCSCEvent) -> Void
  ) -> Outcome {
    var len: DWORD = 0
    var names: [String] = []
    var rv = PCSCCall.run { SCardListReaders(ctx, nil, nil, &len) }
    if PCSCStatus(rv) == .success {
      var buf = [CChar](repeating: 0, count: Int(len))
      rv = PCSCCall.run { SCardListReaders(ctx, nil, &buf, &len) }
      if PCSCStatus(rv) == .success {
        names = buf.split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
      }
    }
    if Self.isServiceGone(rv) { return .serviceGone }
    if PCSCStatus(rv) == .cancelled { return isStopped() ? .stopped : .ok }
    for (name, state) in seen.known where !names.contains(name) {
      if state.present { report(.cardRemoved(reader: name)) }
      report(.readerRemoved(name))
      seen.known[name] = nil
    }
    var fresh: Set<String> = []
    for name in names where seen.known[name] == nil {
      report(.readerAdded(name))
      fresh.insert(name)
      seen.known[name] = (false, 0, DWORD(SCARD_STATE_UNAWARE))
    }
    // A new reader's state (UNAWARE) is answered at once; a wait proper follows on the next round.
    let wait = fresh.isEmpty && !seen.resync ? timeoutMs : 0
    let resyncing = seen.resync
    seen.resync = false
    // `stop` cancels a call in progress; one that has not started yet would not be (narrow, but checked).
    if isStopped() { return .stopped }
    // Each reader from the state last seen (UNAWARE when new, or when resynchronising after pcscd came back).
    let events: [DWORD]
    let last = seen.known
    (rv, events) = PCSCContext.statusChange(
      ctx, readers: names, current: { resyncing ? nil : last[$0]?.raw }, timeoutMs: wait)
    let st = PCSCStatus(rv)
    if Self.isServiceGone(rv) { return .serviceGone }
    if st == .cancelled { return isStopped() ? .stopped : .ok }
    guard st == .success || st == .timeout else { return .ok }  // e.g. a reader gone meanwhile: list again
    for (name, event) in zip(names, events) {
      if event & DWORD(SCARD_STATE_UNKNOWN) != 0 {
        // The reader went between the listing and the wait (pcsc-lite: "not found"). Said and forgotten now: a
        // reader pcscd adds next under the same name (a USB token pulled and plugged back in) is then a new one,
        // read from UNAWARE. Kept, its last state would be compared with the new reader's, and a card in it
        // with the same event counter (both readers saw one insertion) would never be reported.
        if let before = seen.known.removeValue(forKey: name) {
          if before.present { report(.cardRemoved(reader: name)) }
          report(.readerRemoved(name))
        }
        continue
      }
      guard event & DWORD(SCARD_STATE_IGNORE) == 0 else { continue }
      let present = event & DWORD(SCARD_STATE_PRESENT) != 0
      let counter = event >> 16
      let before = seen.known[name] ?? (false, 0, DWORD(SCARD_STATE_UNAWARE))
      if before.present && present && counter != before.counter && !fresh.contains(name) && !resyncing {
        // Removed and inserted again between two waits: pcsc-lite's event counter moved.
        report(.cardRemoved(reader: name))
        report(.cardInserted(reader: name))
      } else if before.present != present {
        report(present ? .cardInserted(reader: name) : .cardRemoved(reader: name))
      }
      seen.known[name] = (present, counter, event & ~DWORD(SCARD_STATE_CHANGED))
    }
    return .ok
  }

  /// pcscd is not reachable: wait for its socket to be (re)created, for `stop`, or for `backoff` seconds (a socket
  /// that exists but refuses us gives no event to wait for).
  func waitForService(backoff: Double) {
    let dir = PathString.deletingLast(socketPath)
    let name = PathString.last(socketPath)
    let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
    defer { if fd >= 0 { close(fd) } }
    let watching = fd >= 0 && inotify_add_watch(fd, dir, UInt32(IN_CREATE | IN_MOVED_TO | IN_ATTRIB)) >= 0
    // Watching first, then looking: a socket created in between is seen either way.
    if watching && !FileManager.default.fileExists(atPath: socketPath) {
      waitFor(fd: fd, name: name, seconds: 3600)
    } else {
      waitFor(fd: watching ? fd : -1, name: name, seconds: backoff)
    }
  }

  /// Blocks until `name` is created in the inotify `fd`'s directory, the stop pipe is written, or `seconds` pass.
  func waitFor(fd: Int32, name: String, seconds: Double) {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
    var buffer = [UInt8](repeating: 0, count: 4096)
    while !isStopped {
      let now = DispatchTime.now().uptimeNanoseconds
      guard now < end else { return }
      var fds = [
        pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0), pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
      ]
      let ms = Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      let ready = poll(&fds, fd >= 0 ? 2 : 1, ms)
      if ready < 0 && errno == EINTR { continue }
      if ready <= 0 { return }
      if fds[0].revents != 0 { return }
      let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n <= 0 { continue }
      if InotifyEvents.names(buffer, count: n).contains(where: { $0.name == name }) {
        usleep(100_000)  // pcscd binds the socket, then listens: give it a moment before connecting
        return
      }
    }
  }
}

/// Parsing of inotify's event records.
enum InotifyEvents {
  static func names(_ buffer: [UInt8], count n: Int) -> [(name: String, mask: UInt32)] {
    var out: [(String, UInt32)] = []
    var offset = 0
    while offset + MemoryLayout<inotify_event>.size <= n {
      let (mask, len) = buffer.withUnsafeBytes { raw in
        let ev = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
        return (ev.mask, Int(ev.len))
      }
      let nameStart = offset + MemoryLayout<inotify_event>.size
      let nameBytes = buffer[nameStart..<min(n, nameStart + len)].prefix { $0 != 0 }
      out.append((String(decoding: nameBytes, as: UTF8.self), mask))
      offset = nameStart + len
    }
    return out
  }
}

/// A pipe whose write end wakes a `poll` (close-on-exec, non-blocking); (-1, -1) when none could be made.
enum WakePipe {
  static func make() -> (read: Int32, write: Int32) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { return (-1, -1) }
    for fd in fds {
      _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
      _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }
    return (fds[0], fds[1])
  }
}
