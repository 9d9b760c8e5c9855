import Foundation
import Platform
import Synchronization
import Testing

/// The Platform helpers that replace full Foundation in the client give what
/// Foundation gave: compared with Foundation itself here (the tests may link it; the client does not).
@Suite struct POSIXHelperTests {
  @Test func pathStringsMatchNSString() {
    // "" and relative single components are left out of deletingLast: swift-corelibs-foundation traps on them.
    for p in ["/a/b/", "/", "/a", "a/b", "//a//b//", "/a/", "a//b", "/sys/bus/usb/devices/1-2.3", "/run/x.sock"] {
      #expect(PathString.deletingLast(p) == (p as NSString).deletingLastPathComponent, "\(p)")
    }
    for p in ["/a/b/", "/", "", "a", "/a", "a/b", "//a//b//", "a/", "/a/", "a//b", "/dev/hidraw3"] {
      #expect(PathString.last(p) == (p as NSString).lastPathComponent, "\(p)")
    }
    #expect(PathString.deletingLast("a") == "" && PathString.deletingLast("") == "")
  }

  @Test func trimmingMatchesCharacterSets() {
    let samples = [
      "  x y \t", "\n\r x\u{85}", "\u{A0}\u{2003}x\u{3000}", "\u{2028}x\u{2029}", "", " \t\n ", "x", "\u{1F600} ",
      "\u{200B}x\u{200B}", "e\u{301} ",
    ]
    for s in samples {
      #expect(Trim.whitespace(s) == s.trimmingCharacters(in: .whitespacesAndNewlines), "\(s.debugDescription)")
      #expect(Trim.whitespace(s, newlines: false) == s.trimmingCharacters(in: .whitespaces), "\(s.debugDescription)")
    }
    // Every scalar of the Basic Multilingual Plane and a sample of the others, alone and around text.
    for v in Array(0...0xFFFF) + Array(stride(from: 0x10000, through: 0x10FFFF, by: 97)) {
      guard let u = Unicode.Scalar(v) else { continue }
      let s = "\(u)a\(u)"
      #expect(Trim.whitespace(s) == s.trimmingCharacters(in: .whitespacesAndNewlines), "U+\(String(v, radix: 16))")
      #expect(
        Trim.whitespace(s, newlines: false) == s.trimmingCharacters(in: .whitespaces), "U+\(String(v, radix: 16))")
    }
    #expect(Trim.scalars("1.9.9.") { $0 == "." } == "1.9.9".trimmingCharacters(in: CharacterSet(charactersIn: ".")))
  }

  @Test func hexMatchesStringFormat() {
    for v: UInt16 in [0, 7, 0x1050, 0x407, 0xFFFF] {
      #expect(Hex.digits(v, width: 4) == String(format: "%04x", v))
    }
    for b: UInt8 in [0, 0x0A, 0x25, 0x7F, 0xFF] {
      #expect(Hex.digits(b, width: 2, uppercase: true) == String(format: "%02X", b))
    }
    let bytes: [UInt8] = [0, 1, 0xAB, 0xFF]
    #expect(Hex.lowercase(bytes) == bytes.map { String(format: "%02x", $0) }.joined())
  }

  @Test func fileIOReadsWritesAndStopsAtTheLimit() throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("posix-\(getpid()).bin").path
    defer { unlink(path) }
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    #expect(fd >= 0)
    let data = (0..<200_000).map { UInt8(truncatingIfNeeded: $0) }
    #expect(FileIO.write(fd, data))
    close(fd)
    #expect(FileIO.read(path: path) == data)
    #expect(FileIO.read(path: path, limit: 70_000) == Array(data.prefix(70_000)))
    #expect(FileIO.read(path: path + ".missing") == nil && errno == ENOENT)
  }

  @Test func subprocessReportsStatusSignalAndOutput() throws {
    let echo = try #require(
      Subprocess.start("/bin/sh", ["-c", "printf 'pcsc-lite version 1.9.9.'; exit 3"], captureOutput: true))
    #expect(String(decoding: echo.readOutput(), as: UTF8.self) == "pcsc-lite version 1.9.9.")
    #expect(echo.wait() == 3)
    let killed = try #require(Subprocess.start("/bin/sh", ["-c", "kill -TERM $$"]))
    #expect(killed.wait() == SIGTERM)
    let env = try #require(
      Subprocess.start(
        "/bin/sh", ["-c", "printf %s \"$ONLY\"; test -z \"$HOME\""], environment: ["ONLY": "x"],
        captureOutput: true))
    #expect(String(decoding: env.readOutput(), as: UTF8.self) == "x")
    #expect(env.wait() == 0)
    #expect(Subprocess.start("/nonexistent/tool", []) == nil)
  }

  @Test func subprocessHandsOnNoOtherDescriptor() throws {
    // A --pin-fd pipe is not close-on-exec: a child (xdg-open, busctl) must not get it.
    var fds: [Int32] = [-1, -1]
    #expect(pipe(&fds) == 0)
    defer { for fd in fds { close(fd) } }
    let p = try #require(Subprocess.start("/bin/sh", ["-c", "test -e /proc/self/fd/\(fds[0]) && exit 7; exit 0"]))
    #expect(p.wait() == 0)
  }

  @Test func subprocessUndoesIgnoredSignals() throws {
    // The CLI ignores SIGINT while it handles it itself; a child must not inherit that.
    let old = signal(SIGINT, SIG_IGN)
    defer { signal(SIGINT, old) }
    let p = try #require(Subprocess.start("/bin/sh", ["-c", "kill -INT $$; sleep 5"]))
    #expect(p.wait() == SIGINT)
  }

  @Test func threadsRunConcurrently() {
    let count = Mutex(0)
    let done = DispatchSemaphore(value: 0)
    for _ in 0..<8 {
      #expect(
        POSIXThread.start(stackSize: 1 << 20) {
          for _ in 0..<10_000 { count.withLock { $0 += 1 } }
          done.signal()
        })
    }
    for _ in 0..<8 { done.wait() }
    #expect(count.withLock { $0 } == 80_000)
  }
}
