import FoundationEssentials
import Platform
import TokenBridge

#if canImport(Glibc)
  import Glibc
#endif

/// The controlling terminal (`/dev/tty`), as ssh and gpg use it: prompts work even when stdin/stdout are
/// redirected. Secrets are read with echo off; the terminal is restored on return and on Ctrl-C (`Interrupts`).
package final class Terminal {
  package let fd: Int32
  package let timeout: Double

  package init?(timeout: Double) {
    let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    self.fd = fd
    self.timeout = timeout
  }

  deinit { close(fd) }

  /// The name of the controlling terminal (for a terminal pinentry), or nil without one.
  package static func name() -> String? {
    let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    guard let p = ttyname(fd) else { return nil }
    return String(cString: p)
  }

  package func write(_ s: String) {
    let bytes = Array(s.utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
  }

  /// Reads one line (at most `SecretLineReader.maxLine` bytes kept); with `echo` false the typed characters
  /// are not shown. The returned buffer is the caller's to wipe. Throws `InteractionError.timedOut` after the
  /// interaction timeout, `.cancelled` on EOF.
  package func readLine(echo: Bool) throws -> [UInt8] {
    var saved = termios()
    let isTTY = tcgetattr(fd, &saved) == 0
    if isTTY && !echo {
      var quiet = saved
      quiet.c_lflag &= ~tcflag_t(ECHO)
      quiet.c_lflag |= tcflag_t(ECHONL)
      Interrupts.shared.echoOff(fd: fd, saved: saved)
      tcsetattr(fd, TCSAFLUSH, &quiet)
    }
    defer {
      if isTTY && !echo {
        tcsetattr(fd, TCSAFLUSH, &saved)
        Interrupts.shared.echoRestored()
      }
    }
    var line: [UInt8] = []
    var tooLong = false
    let deadline = Date().addingTimeInterval(timeout)
    while true {
      let left = deadline.timeIntervalSinceNow
      guard left > 0 else {
        wipe(&line)
        throw InteractionError.timedOut
      }
      var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ready = poll(&pfd, 1, Int32(min(left, 1.0) * 1000))
      if ready < 0 && errno == EINTR { continue }
      if ready <= 0 { continue }
      var byte: UInt8 = 0
      let n = Glibc.read(fd, &byte, 1)
      if n <= 0 {
        wipe(&line)
        throw InteractionError.cancelled
      }
      if byte == 0x0A || byte == 0x0D {
        if tooLong { throw InputError.lineTooLong(limit: SecretLineReader.maxLine) }
        return line
      }
      if line.count < SecretLineReader.maxLine {
        line.append(byte)
      } else {
        tooLong = true
        wipe(&line)
        line = []
      }
      byte = 0
    }
  }
}

extension Terminal {
  /// Lists `lines` numbered and asks for one (three tries); `allowed` filters choices that cannot be taken.
  package func choose(_ title: String, _ lines: [String], allowed: (Int) -> Bool = { _ in true }) throws -> Int {
    write(title + "\n")
    for (i, l) in lines.enumerated() { write("  \(i + 1)) \(l)\n") }
    for _ in 0..<3 {
      write("Which one [1-\(lines.count)]? ")
      var answer = try readLine(echo: true)
      defer { wipe(&answer) }
      if let n = Int(Trim.whitespace(String(decoding: answer, as: UTF8.self), newlines: false)),
        (1...lines.count).contains(n), allowed(n - 1)
      {
        return n - 1
      }
    }
    throw InteractionError.cancelled
  }
}
