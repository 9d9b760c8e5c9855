import FoundationEssentials
import Platform
import TokenBridge
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// Reads secrets one per line from a file descriptor (`--pin-fd`, as gpg's `--passphrase-fd`). Reads in blocks
/// within the interaction deadline; a line is capped at `maxLine` bytes (a longer one is refused whole, without
/// echoing any of it); bytes read past the current line wait, in a buffer wiped on release, for the next line.
/// A final line without a newline counts; `\r\n` ends a line as `\n` does.
public final class SecretLineReader {
  /// No PIN, PUK, password or management key (hex) comes near this.
  public static let maxLine = 256

  /// Fills the buffer with what is there (blocking until something is, or the deadline); 0 at end of input.
  public typealias Source = (_ into: UnsafeMutableRawBufferPointer, _ deadline: ContinuousClock.Instant) throws -> Int

  let source: Source
  let timeout: Duration
  var pending: [UInt8] = []
  var ended = false

  public init(source: @escaping Source, timeout: Double) {
    self.source = source
    self.timeout = .milliseconds(Int64((min(max(timeout, 0), 86_400) * 1000).rounded()))
  }

  /// Reads `fd` (a pipe, file or socket), waiting at most `timeout` seconds for each line.
  public convenience init(fd: Int32, timeout: Double) {
    self.init(source: { buf, deadline in try Self.read(fd, buf, deadline) }, timeout: timeout)
  }

  deinit { wipe(&pending) }

  /// The next line, or nil at the end of input. Throws `InputError.lineTooLong`, `InputError.unreadable`, or
  /// `InteractionError.timedOut`.
  public func next() throws -> Secret? {
    let deadline = ContinuousClock.now + timeout
    var block = [UInt8](repeating: 0, count: 512)
    defer { wipe(&block) }
    while true {
      if let nl = pending.firstIndex(of: 0x0A) {
        guard nl <= Self.maxLine else { return try refuseLongLine() }
        var line = Array(pending[..<nl])
        if line.last == 0x0D { line.removeLast() }
        wipeFront(nl + 1)
        return Secret(line)
      }
      guard pending.count <= Self.maxLine else { return try refuseLongLine() }
      if ended {
        guard !pending.isEmpty else { return nil }
        var line = pending
        if line.last == 0x0D { line.removeLast() }
        wipeFront(pending.count)
        return Secret(line)
      }
      let n = try block.withUnsafeMutableBytes { try source($0, deadline) }
      if n == 0 { ended = true } else { pending += block[0..<n] }
    }
  }

  func refuseLongLine() throws -> Secret? {
    wipe(&pending)
    pending = []
    ended = true  // the rest of the input is no longer trusted to line up
    throw InputError.lineTooLong(limit: Self.maxLine)
  }

  func wipeFront(_ n: Int) {
    for i in 0..<n { pending[i] = 0 }
    pending.removeFirst(n)
  }

  /// poll + read with the deadline; EINTR is retried.
  static func read(_ fd: Int32, _ buf: UnsafeMutableRawBufferPointer, _ deadline: ContinuousClock.Instant) throws -> Int
  {
    while true {
      let left = ContinuousClock.now.duration(to: deadline)
      guard left > .zero else { throw InteractionError.timedOut }
      let ms = Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
      var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ready = poll(&pfd, 1, min(ms, 1000))
      if ready < 0 {
        if errno == EINTR { continue }
        throw InputError.unreadable(fd: fd, errno: errno)
      }
      if ready == 0 { continue }
      let n = Glibc.read(fd, buf.baseAddress, buf.count)
      if n < 0 {
        if errno == EINTR || errno == EAGAIN { continue }
        throw InputError.unreadable(fd: fd, errno: errno)
      }
      return n
    }
  }
}
