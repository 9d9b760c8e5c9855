import FoundationEssentials
import Platform
import Synchronization
import TokenBridge
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// The Assuan side of a dialog: commands and replies, each within the dialog's deadline.
extension Pinentry.Session {
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

  func send(_ line: String, data: Secret?) throws -> Pinentry.Reply {
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
  func reply(for command: String, data: Secret?) throws -> Pinentry.Reply {
    while true {
      let end = try nextLine(command)
      var len = end
      if len > 0 && pending[len - 1] == 0x0D { len -= 1 }
      let outcome: Pinentry.Reply?
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
}
