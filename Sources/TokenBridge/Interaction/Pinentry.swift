import FoundationEssentials
import Platform
import Synchronization
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// Why a pinentry program could not ask. Facts only (the program as named, codes); never the secret.
public enum PinentryError: Error, Equatable, Sendable {
  /// The program could not be started (`errno`; ENOENT: not found on PATH).
  case cannotStart(program: String, errno: Int32)
  /// The program ended, or closed its side, in the middle of the dialog (before answering `command`).
  case ended(program: String, command: String)
  /// The program refused a command it must accept (`code`: its Assuan ERR code), or answered something that is
  /// not Assuan (`code` nil).
  case refused(program: String, command: String, code: UInt32?)
}

/// What one pinentry dialog shows. Texts are ours; anything from a token or server is made `displayable` first.
public struct PinentryDialog: Sendable, Equatable {
  public var title: String
  /// Several lines: the token, the tries left, the protection status.
  public var description: String
  public var prompt: String
  /// Why the previous answer was not taken (SETERROR).
  public var error: String?
  /// A new secret: asked twice (SETREPEAT; with a pinentry that refuses it, a second GETPIN compared here).
  public var repeatPrompt: String?
  /// Shown when the two entries differ.
  public var repeatError: String
  /// A short hint about the rules of a new secret (OPTION constraints-hint-short), when the program takes it.
  public var constraintsHint: String?

  public init(
    title: String, description: String, prompt: String, error: String? = nil, repeatPrompt: String? = nil,
    repeatError: String = "The two entries differ.", constraintsHint: String? = nil
  ) {
    self.title = title
    self.description = description
    self.prompt = prompt
    self.error = error
    self.repeatPrompt = repeatPrompt
    self.repeatError = repeatError
    self.constraintsHint = constraintsHint
  }
}

/// Ctrl-C while a pinentry dialog is up (set from the SIGINT handler's thread, read by the dialog's). The program
/// usually got the same Ctrl-C (a terminal pinentry shares our terminal) and ends its dialog as cancelled: it is
/// given `grace` for that; one that does not (it stopped reading, or never saw the signal) is then stopped and the
/// dialog ends as the user's cancel.
public final class PinentryCancellation: Sendable {
  let requested = Mutex<ContinuousClock.Instant?>(nil)
  static let grace: Duration = .seconds(1)

  public init() {}

  public func request() { requested.withLock { $0 = $0 ?? .now } }

  /// Ends the dialog at once, without the grace (the program is stopped): `tokenbridge serve`'s Close, a caller
  /// that left the bus. A dialog not started yet is not started.
  public func requestNow() { requested.withLock { $0 = .now - Self.grace } }

  /// Past the grace after a request: the dialog is to end now.
  var isDue: Bool { requested.withLock { $0.map { ContinuousClock.now >= $0 + Self.grace } ?? false } }
}

/// Asks through a pinentry program (gpg's helper: pinentry-gnome3, -qt, -curses, -tty) over the Assuan
/// protocol on its stdin/stdout. One program run per question, as gpg-agent does. A cancel (ERR 83886179, any
/// source) is the user's cancel (`InteractionError.cancelled`), not a failure; optional commands the program
/// refuses (OPTION, SETREPEAT, SETTIMEOUT) are done without. The PIN arrives percent-encoded on D lines: it is
/// decoded into a buffer reserved up front (no reallocation leaves a copy) and every buffer that held it is
/// wiped. The whole conversation is bounded by `timeout`, counted from the first dialog (a program that answers
/// at once, again and again, cannot make it last longer; each dialog's SETTIMEOUT is what is left); past it the
/// program is stopped and `.timedOut` thrown. Every write to and read from the program waits in `poll` within that
/// deadline (our end of its stdin is non-blocking: a program that stops reading cannot block us) and ends early on
/// `cancellation` (Ctrl-C).
public final class Pinentry {
  /// Assuan's line limit (without the newline).
  static let maxLine = 1000
  /// gpg-error codes (the low 16 bits of an Assuan ERR code; the source bits above vary by program).
  static let canceled: UInt32 = 99
  static let fullyCanceled: UInt32 = 198
  static let notConfirmed: UInt32 = 114
  static let timeout: UInt32 = 62

  public let program: String
  public let timeout: Double
  /// OPTION ttyname / ttytype / lc-ctype: where a terminal pinentry draws (nil: not sent).
  public var ttyName: String?
  public var ttyType: String?
  public var lcCtype: String?
  /// Set by Ctrl-C (`PinentryCancellation.request`).
  public let cancellation = PinentryCancellation()
  /// The end of the whole conversation: fixed when the first dialog starts.
  var conversationDeadline: ContinuousClock.Instant?
  /// For the fuzzer (`assuan` target): when set, each dialog talks over the descriptors it returns (the program's
  /// output to read, its input to write; the dialog closes both) instead of starting `program`.
  package var channel: (() -> (reading: Int32, writing: Int32))?

  public init(program: String, timeout: Double, ttyName: String? = nil, ttyType: String? = nil, lcCtype: String? = nil)
  {
    self.program = program
    self.timeout = min(max(timeout, 0), 86_400)
    self.ttyName = ttyName
    self.ttyType = ttyType
    self.lcCtype = lcCtype
  }

  /// Asks for a secret (twice for a new one). Throws `InteractionError.cancelled` / `.timedOut`,
  /// `InputError.pinentry`.
  public func getPin(_ dialog: PinentryDialog) throws -> Secret {
    let session = try Session(self)
    defer { session.finish() }
    try session.setUp(dialog.title)
    if let hint = dialog.constraintsHint { _ = try session.optional("OPTION constraints-hint-short=\(escape(hint))") }
    try session.required("SETDESC \(escape(dialog.description))")
    try session.required("SETPROMPT \(escape(dialog.prompt))")
    if let e = dialog.error { try session.required("SETERROR \(escape(e))") }
    var askTwice = false
    if let again = dialog.repeatPrompt {
      askTwice = try !session.optional("SETREPEAT \(escape(again))")
      if !askTwice { _ = try session.optional("SETREPEATERROR \(escape(dialog.repeatError))") }
    }
    let first = try session.getPin()
    guard askTwice, let again = dialog.repeatPrompt else { return first }
    // The program has no SETREPEAT: the same dialog again, with the repeat prompt, and compare here.
    for _ in 0..<3 {
      try session.required("SETPROMPT \(escape(again))")
      let second = try session.getPin()
      if second.bytes == first.bytes { return first }
      try session.required("SETERROR \(escape(dialog.repeatError))")
      try session.required("SETPROMPT \(escape(dialog.prompt))")
      let retry = try session.getPin()
      first.replace(with: retry)
    }
    throw InteractionError.cancelled
  }

  /// Asks a yes/no question (CONFIRM): true on OK, false when the user says no or cancels.
  public func confirm(title: String, description: String, ok: String, cancel: String) throws -> Bool {
    let session = try Session(self)
    defer { session.finish() }
    try session.setUp(title)
    try session.required("SETDESC \(escape(description))")
    _ = try session.optional("SETOK \(escape(ok))")
    _ = try session.optional("SETCANCEL \(escape(cancel))")
    switch try session.send("CONFIRM", data: nil) {
    case .ok: return true
    case .err(let code) where [Self.canceled, Self.fullyCanceled, Self.notConfirmed].contains(code & 0xFFFF):
      return false
    case .err(let code) where code & 0xFFFF == Self.timeout: throw InteractionError.timedOut
    case .err(let code): throw InputError.pinentry(.refused(program: program, command: "CONFIRM", code: code))
    }
  }

  /// Assuan percent-escaping of our text: `%`, CR, LF and other control bytes; cut to fit a line.
  func escape(_ s: String) -> String {
    var out: [UInt8] = []
    for b in s.utf8 {
      if out.count > Self.maxLine - 40 { break }
      if b == 0x25 || b < 0x20 || b == 0x7F {
        out += Array(("%" + Hex.digits(b, width: 2, uppercase: true)).utf8)
      } else {
        out.append(b)
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  enum Reply {
    case ok
    case err(UInt32)
  }

  /// One run of the program: its pipes, its pid, the deadline of the dialog.
  final class Session {
    let owner: Pinentry
    /// nil over a `channel` (no program of ours to reap or stop).
    let pid: pid_t?
    let toChild: Int32
    let fromChild: Int32
    let deadline: ContinuousClock.Instant
    var pending: [UInt8]
    var finished = false

    init(_ owner: Pinentry) throws {
      self.owner = owner
      let end = owner.conversationDeadline ?? .now + .milliseconds(Int64((owner.timeout * 1000).rounded()))
      owner.conversationDeadline = end
      guard ContinuousClock.now < end else { throw InteractionError.timedOut }
      if owner.cancellation.isDue { throw InteractionError.cancelled }
      deadline = end
      pending = []
      pending.reserveCapacity(4 * Pinentry.maxLine)
      signal(SIGPIPE, SIG_IGN)  // a program that dies makes our write fail with EPIPE, not kill us
      if let channel = owner.channel {
        (fromChild, toChild) = channel()
        pid = nil
        for fd in [toChild, fromChild] { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return
      }
      var toPipe: [Int32] = [0, 0]
      var fromPipe: [Int32] = [0, 0]
      guard Self.pipeCloseOnExec(&toPipe) else {
        throw InputError.pinentry(.cannotStart(program: owner.program, errno: errno))
      }
      guard Self.pipeCloseOnExec(&fromPipe) else {
        let e = errno
        close(toPipe[0])
        close(toPipe[1])
        throw InputError.pinentry(.cannotStart(program: owner.program, errno: e))
      }
      var actions = posix_spawn_file_actions_t()
      posix_spawn_file_actions_init(&actions)
      defer { posix_spawn_file_actions_destroy(&actions) }
      posix_spawn_file_actions_adddup2(&actions, toPipe[0], 0)
      posix_spawn_file_actions_adddup2(&actions, fromPipe[1], 1)
      posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
      var attr = posix_spawnattr_t()
      posix_spawnattr_init(&attr)
      defer { posix_spawnattr_destroy(&attr) }
      // Our SIGINT is ignored (a dispatch source takes it) and so is SIGPIPE: the program gets the defaults.
      var defaults = sigset_t()
      sigemptyset(&defaults)
      sigaddset(&defaults, SIGINT)
      sigaddset(&defaults, SIGPIPE)
      posix_spawnattr_setsigdefault(&attr, &defaults)
      var none = sigset_t()
      sigemptyset(&none)
      posix_spawnattr_setsigmask(&attr, &none)
      posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
      let argv: [UnsafeMutablePointer<CChar>?] = [strdup(owner.program), nil]
      defer { for a in argv { free(a) } }
      var child: pid_t = 0
      let rc = posix_spawnp(&child, owner.program, &actions, &attr, argv, environ)
      close(toPipe[0])
      close(fromPipe[1])
      guard rc == 0 else {
        close(toPipe[1])
        close(fromPipe[0])
        throw InputError.pinentry(.cannotStart(program: owner.program, errno: rc))
      }
      pid = child
      toChild = toPipe[1]
      fromChild = fromPipe[0]
      // Our ends wait in poll, never in the call: a full pipe to a program that stopped reading is a timeout.
      for fd in [toChild, fromChild] { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
    }

    deinit {
      finish()
      wipe(&pending)
    }

    /// A pipe whose ends do not leak into other programs (the child gets its ends through dup2).
    static func pipeCloseOnExec(_ fds: inout [Int32]) -> Bool {
      guard pipe(&fds) == 0 else { return false }
      _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
      _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
      return true
    }

    /// Greeting, then the options and the title.
    func setUp(_ title: String) throws {
      switch try reply(for: "(greeting)", data: nil) {
      case .ok: break
      case .err(let code):
        throw InputError.pinentry(.refused(program: owner.program, command: "(greeting)", code: code))
      }
      if let t = owner.ttyName { _ = try optional("OPTION ttyname=\(owner.escape(t))") }
      if let t = owner.ttyType { _ = try optional("OPTION ttytype=\(owner.escape(t))") }
      if let l = owner.lcCtype { _ = try optional("OPTION lc-ctype=\(owner.escape(l))") }
      let left = ContinuousClock.now.duration(to: deadline)
      let seconds = max(1, Int(left.components.seconds) + (left.components.attoseconds > 0 ? 1 : 0))
      _ = try optional("SETTIMEOUT \(seconds)")
      _ = try optional("SETTITLE \(owner.escape(title))")
    }

    /// A command the program must take.
    func required(_ line: String) throws {
      if case .err(let code) = try send(line, data: nil) {
        if [Pinentry.canceled, Pinentry.fullyCanceled].contains(code & 0xFFFF) { throw InteractionError.cancelled }
        throw InputError.pinentry(.refused(program: owner.program, command: verb(line), code: code))
      }
    }

    /// A command the program may refuse: true when taken.
    func optional(_ line: String) throws -> Bool {
      if case .ok = try send(line, data: nil) { return true }
      return false
    }

    func getPin() throws -> Secret {
      let secret = Secret([])
      secret.reserve(Pinentry.maxLine)
      switch try send("GETPIN", data: secret) {
      case .ok: return secret
      case .err(let code) where [Pinentry.canceled, Pinentry.fullyCanceled].contains(code & 0xFFFF):
        throw InteractionError.cancelled
      case .err(let code) where code & 0xFFFF == Pinentry.timeout: throw InteractionError.timedOut
      case .err(let code): throw InputError.pinentry(.refused(program: owner.program, command: "GETPIN", code: code))
      }
    }

    func verb(_ line: String) -> String { String(line.prefix { $0 != " " }) }

    func send(_ line: String, data: Secret?) throws -> Reply {
      try write(Array((line + "\n").utf8), command: verb(line))
      return try reply(for: verb(line), data: data)
    }

    /// Writes all of `bytes`, waiting for room in the pipe within the deadline (and Ctrl-C).
    func write(_ bytes: [UInt8], command: String) throws {
      var off = 0
      while off < bytes.count {
        try wait(for: toChild, events: POLLOUT, command: command)
        let n = bytes[off...].withUnsafeBytes { Glibc.write(toChild, $0.baseAddress, $0.count) }
        if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
        guard n > 0 else { throw ended(command) }
        off += n
      }
    }

    /// Waits until `fd` is ready for `events` (or its other end is closed), in slices short enough to see Ctrl-C.
    /// Throws `.timedOut` at the deadline, `.cancelled` once a Ctrl-C's grace is over.
    func wait(for fd: Int32, events: Int32, command: String) throws {
      while true {
        if owner.cancellation.isDue { throw InteractionError.cancelled }
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { throw InteractionError.timedOut }
        let ms = Int32(
          clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
        var pfd = pollfd(fd: fd, events: Int16(events), revents: 0)
        let ready = poll(&pfd, 1, min(ms, 100))
        if ready < 0 && errno != EINTR { throw PinentryError.ended(program: owner.program, command: command) }
        if ready > 0 { return }
      }
    }

    /// Reads lines up to OK/ERR; D lines are decoded into `data` (nil: a D line is a protocol error). Lines are
    /// read in place in `pending` (no slice of it is kept: a later write would copy the buffer, leaving the
    /// original unwiped) and wiped before they are dropped.
    func reply(for command: String, data: Secret?) throws -> Reply {
      while true {
        let end = try nextLine(command)
        var len = end
        if len > 0 && pending[len - 1] == 0x0D { len -= 1 }
        let outcome: Reply?
        var understood = true
        if has("OK", len) && (len == 2 || pending[2] == 0x20) {
          outcome = .ok
        } else if has("ERR ", len) {
          var code: UInt32 = 0
          var i = 4
          while i < len, pending[i] >= 0x30, pending[i] <= 0x39, code < UInt32.max / 10 {
            code = code * 10 + UInt32(pending[i] - 0x30)
            i += 1
          }
          understood = i > 4
          outcome = .err(code)
        } else if has("D ", len) {
          outcome = nil
          if let data { try decode(2..<len, into: data, command: command) } else { understood = false }
        } else if len == 0 || has("S", len) || has("#", len) {
          outcome = nil
        } else if has("INQUIRE", len) {
          // Nothing of ours is inquired: cancel the inquiry; the command then ends with ERR.
          try write(Array("CAN\n".utf8), command: command)
          outcome = nil
        } else {
          outcome = nil
          understood = false
        }
        for i in 0...end { pending[i] = 0 }
        pending.removeFirst(end + 1)
        guard understood else { break }
        if let outcome { return outcome }
      }
      throw InputError.pinentry(.refused(program: owner.program, command: command, code: nil))
    }

    /// Does the line of `len` bytes at the start of `pending` begin with `prefix`?
    func has(_ prefix: String, _ len: Int) -> Bool {
      let p = Array(prefix.utf8)
      guard len >= p.count else { return false }
      for (i, b) in p.enumerated() where pending[i] != b { return false }
      return true
    }

    /// Percent-decoding of `pending[range]` (a D line's data) into the secret's reserved buffer.
    func decode(_ range: Range<Int>, into data: Secret, command: String) throws {
      var i = range.lowerBound
      while i < range.upperBound {
        var b = pending[i]
        if b == 0x25 {
          guard i + 2 < range.upperBound, let h = hex(pending[i + 1]), let l = hex(pending[i + 2]) else {
            throw InputError.pinentry(.refused(program: owner.program, command: command, code: nil))
          }
          b = h << 4 | l
          i += 2
        }
        guard data.bytes.count < Pinentry.maxLine else {
          throw InputError.pinentry(.refused(program: owner.program, command: command, code: nil))
        }
        data.append(b)
        b = 0
        i += 1
      }
    }

    func hex(_ c: UInt8) -> UInt8? {
      switch c {
      case 0x30...0x39: c - 0x30
      case 0x41...0x46: c - 0x41 + 10
      case 0x61...0x66: c - 0x61 + 10
      default: nil
      }
    }

    /// Index of the next newline in `pending`, reading more within the deadline.
    func nextLine(_ command: String) throws -> Int {
      var block = [UInt8](repeating: 0, count: 1024)
      defer { wipe(&block) }
      while true {
        if let nl = pending.firstIndex(of: 0x0A) { return nl }
        guard pending.count <= Pinentry.maxLine + 2 else {
          throw InputError.pinentry(.refused(program: owner.program, command: command, code: nil))
        }
        try wait(for: fromChild, events: POLLIN, command: command)
        let n = block.withUnsafeMutableBytes { Glibc.read(fromChild, $0.baseAddress, $0.count) }
        if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
        guard n > 0 else { throw ended(command) }
        pending.append(contentsOf: block[0..<n])
      }
    }

    /// The program closed its side: reap it (it is ending). One ended by Ctrl-C (SIGINT: a terminal pinentry
    /// shares our terminal) is the user's cancel; anything else is `.ended`.
    func ended(_ command: String) -> Error {
      var status: Int32 = 0
      for _ in 0..<20 {
        guard let pid else { break }
        let r = waitpid(pid, &status, WNOHANG)
        if r == pid {
          if status & 0x7F == SIGINT { return InteractionError.cancelled }
          break
        }
        if r < 0 { break }
        usleep(50_000)
      }
      return InputError.pinentry(.ended(program: owner.program, command: command))
    }

    /// Says BYE (when the program is still there and has room for it: never waits), closes the pipes and reaps the
    /// program; one that does not end within a second is stopped. Past the deadline or a Ctrl-C it is stopped at
    /// once (it did not answer in time, or did not end its dialog when the user cancelled).
    func finish() {
      guard !finished else { return }
      finished = true
      let bye = Array("BYE\n".utf8)
      _ = bye.withUnsafeBytes { Glibc.write(toChild, $0.baseAddress, $0.count) }
      close(toChild)
      close(fromChild)
      guard let pid else { return }
      var status: Int32 = 0
      let abandoned = ContinuousClock.now >= deadline || owner.cancellation.isDue
      for _ in 0..<(abandoned ? 0 : 20) {
        if waitpid(pid, &status, WNOHANG) != 0 { return }
        usleep(50_000)
      }
      kill(pid, SIGTERM)
      for _ in 0..<20 {
        if waitpid(pid, &status, WNOHANG) != 0 { return }
        usleep(50_000)
      }
      kill(pid, SIGKILL)
      _ = waitpid(pid, &status, 0)
    }
  }
}

extension Secret {
  func reserve(_ n: Int) { mutate { $0.reserveCapacity(n) } }
  func append(_ b: UInt8) { mutate { $0.append(b) } }
  /// Takes `other`'s value (this one's old bytes wiped first).
  func replace(with other: Secret) {
    mutate {
      wipe(&$0)
      $0.removeAll(keepingCapacity: true)
      $0.append(contentsOf: other.bytes)
    }
  }
}
