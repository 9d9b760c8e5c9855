import Foundation
import TokenBridge
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// The controlling terminal (`/dev/tty`), as ssh and gpg use it: prompts work even when stdin/stdout are
/// redirected. Secrets are read with echo off; the terminal is restored on exit and on Ctrl-C.
final class Terminal {
  let fd: Int32
  let timeout: Double

  init?(timeout: Double) {
    let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    self.fd = fd
    self.timeout = timeout
  }

  deinit { close(fd) }

  func write(_ s: String) {
    let bytes = Array(s.utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
  }

  /// Reads one line; with `echo` false the typed characters are not shown. The returned buffer is the
  /// caller's to wipe. Throws `InteractionError.timedOut` after the interaction timeout, `.cancelled` on EOF.
  func readLine(echo: Bool) throws -> [UInt8] {
    var saved = termios()
    let isTTY = tcgetattr(fd, &saved) == 0
    if isTTY && !echo {
      var quiet = saved
      quiet.c_lflag &= ~tcflag_t(ECHO)
      quiet.c_lflag |= tcflag_t(ECHONL)
      tcsetattr(fd, TCSAFLUSH, &quiet)
      TerminalRestore.arm(fd: fd, saved: saved)
    }
    defer {
      if isTTY && !echo {
        tcsetattr(fd, TCSAFLUSH, &saved)
        TerminalRestore.disarm()
      }
    }
    var line: [UInt8] = []
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
      if byte == 0x0A || byte == 0x0D { return line }
      line.append(byte)
      byte = 0
    }
  }
}

extension Terminal {
  /// Lists `lines` numbered and asks for one (three tries); `allowed` filters choices that cannot be taken.
  func choose(_ title: String, _ lines: [String], allowed: (Int) -> Bool = { _ in true }) throws -> Int {
    write(title + "\n")
    for (i, l) in lines.enumerated() { write("  \(i + 1)) \(l)\n") }
    for _ in 0..<3 {
      write("Which one [1-\(lines.count)]? ")
      var answer = try readLine(echo: true)
      defer { wipe(&answer) }
      if let n = Int(String(decoding: answer, as: UTF8.self).trimmingCharacters(in: .whitespaces)),
        (1...lines.count).contains(n), allowed(n - 1)
      {
        return n - 1
      }
    }
    throw InteractionError.cancelled
  }
}

/// Restores the terminal if the process is interrupted while echo is off.
enum TerminalRestore {
  nonisolated(unsafe) static var fd: Int32 = -1
  nonisolated(unsafe) static var saved = termios()

  nonisolated(unsafe) static var previous: sighandler_t?

  static func arm(fd: Int32, saved: termios) {
    Self.saved = saved
    Self.fd = fd
    previous = signal(SIGINT) { _ in
      if TerminalRestore.fd >= 0 { tcsetattr(TerminalRestore.fd, TCSANOW, &TerminalRestore.saved) }
      _exit(3)
    }
  }

  /// Puts back whatever handled SIGINT before the prompt (e.g. the cancel-on-Ctrl-C source).
  static func disarm() {
    fd = -1
    signal(SIGINT, previous ?? SIG_DFL)
  }
}

/// Reads secrets one per line from a file descriptor (`--pin-fd`, as gpg's `--passphrase-fd`).
/// Reads byte by byte so nothing past the current line is consumed or kept.
final class FDLineReader {
  let fd: Int32
  init(fd: Int32) { self.fd = fd }

  /// The next line, or nil at end of input.
  func next() -> [UInt8]? {
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while true {
      let n = Glibc.read(fd, &byte, 1)
      if n < 0 && errno == EINTR { continue }
      if n <= 0 { return line.isEmpty ? nil : line }
      if byte == 0x0A { return line }
      if byte != 0x0D { line.append(byte) }
    }
  }
}
