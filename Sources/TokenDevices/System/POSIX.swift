#if canImport(Glibc)
  import Glibc
#endif

// What the client used from full Foundation (FileHandle, NSLock, Thread, Process, NSString's path methods), on
// POSIX directly: full Foundation links CoreFoundation and ICU's data (~32 MiB) into the binary, FoundationEssentials
// does not (issue 12). One helper per need, shared by TokenBridge and the CLI (re-exported by TokenBridge).

/// Threads of their own for blocking calls (libusb's event loop, inotify, SCardGetStatusChange, libfido2 probes).
public enum POSIXThread {
  private final class Body {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
  }

  /// Starts `body` on a new detached thread; false when no thread could be made.
  @discardableResult
  public static func start(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(Body(body)).toOpaque()
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    defer { pthread_attr_destroy(&attr) }
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    if let stackSize { pthread_attr_setstacksize(&attr, stackSize) }
    var tid = pthread_t()
    let rc = pthread_create(
      &tid, &attr,
      { arg in
        guard let arg else { return nil }
        Unmanaged<Body>.fromOpaque(arg).takeRetainedValue().run()
        return nil
      }, box)
    if rc != 0 { Unmanaged<Body>.fromOpaque(box).release() }
    return rc == 0
  }
}

/// Path strings as NSString's `lastPathComponent` and `deletingLastPathComponent` made them (kept: the
/// outputs are printed and compared).
public enum PathString {
  /// The last component: trailing slashes ignored, "/" for "/", "" for "".
  public static func last(_ path: String) -> String {
    let trimmed = trimmingTrailingSlashes(path)
    if trimmed == "/" { return "/" }
    guard let slash = trimmed.lastIndex(of: "/") else { return trimmed }
    return String(trimmed[trimmed.index(after: slash)...])
  }

  /// The path without its last component: "/a" → "/", "a" → "", "/" → "/", repeated slashes collapsed at the cut.
  public static func deletingLast(_ path: String) -> String {
    var collapsed = ""
    for c in path where !(c == "/" && collapsed.last == "/") { collapsed.append(c) }
    let trimmed = trimmingTrailingSlashes(collapsed)
    if trimmed == "/" { return "/" }
    guard let slash = trimmed.lastIndex(of: "/") else { return "" }
    let parent = trimmingTrailingSlashes(String(trimmed[..<slash]))
    return parent.isEmpty ? "/" : parent
  }

  private static func trimmingTrailingSlashes(_ path: String) -> String {
    var s = Substring(path)
    while s.count > 1, s.last == "/" { s = s.dropLast() }
    return String(s)
  }
}

/// Reading and writing file descriptors and small files.
public enum FileIO {
  /// Writes all of `bytes` to `fd` (retrying on EINTR and short writes); false on an error.
  @discardableResult
  public static func write(_ fd: Int32, _ bytes: some Collection<UInt8>) -> Bool {
    Array(bytes).withUnsafeBytes { buf in
      var off = 0
      while off < buf.count {
        let n = Glibc.write(fd, buf.baseAddress! + off, buf.count - off)
        if n < 0 {
          if errno == EINTR { continue }
          return false
        }
        off += n
      }
      return true
    }
  }

  /// Writes `text` to standard error (errors ignored, as FileHandle's write was).
  public static func writeError(_ text: String) { write(2, Array(text.utf8)) }

  /// Writes `text` to standard output.
  public static func writeOutput(_ text: String) { write(1, Array(text.utf8)) }

  /// Reads `fd` until end of file or `limit` bytes (retrying on EINTR); what was read before an error.
  public static func read(_ fd: Int32, limit: Int = .max) -> [UInt8] {
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while out.count < limit {
      let want = min(chunk.count, limit - out.count)
      let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, want) }
      if n < 0 && errno == EINTR { continue }
      if n <= 0 { break }
      out += chunk[..<n]
    }
    return out
  }

  /// A file's bytes up to `limit` (procfs and sysfs files stat as empty, so read to the end); nil when it cannot
  /// be opened (`errno` tells why).
  public static func read(path: String, limit: Int = .max) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    return read(fd, limit: limit)
  }
}

/// glibc ≥ 2.34 (not in Swift's Glibc module: it is a GNU extension).
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func closeFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32

/// A child process started with posix_spawn (what Foundation's `Process` did for the client).
public struct Subprocess: Sendable {
  public let pid: pid_t
  /// The read end of the child's standard output when it was captured, else -1.
  public let output: Int32

  /// What the child's standard streams are.
  public enum Stream: Sendable {
    case inherited, null
  }

  /// Starts `path` with `arguments` (argv[0] is `path`); `environment` replaces this process's when given.
  /// Signals this process ignores or blocks (the CLI's SIGINT handling) are reset in the child, and no file
  /// descriptor but 0, 1 and 2 is inherited. Nil when it could not be started.
  public static func start(
    _ path: String, _ arguments: [String], environment: [String: String]? = nil, stdin: Stream = .inherited,
    stdout: Stream = .inherited, stderr: Stream = .inherited, captureOutput: Bool = false
  ) -> Subprocess? {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    for (fd, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] where stream == .null {
      posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
    }
    var pipeFDs: [Int32] = [-1, -1]
    if captureOutput {
      guard pipe(&pipeFDs) == 0 else { return nil }
      for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
      posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
    }
    // Nothing else of this process's is handed on (a --pin-fd pipe is not close-on-exec), as Process did.
    guard closeFrom(&actions, 3) == 0 else { return nil }
    var attr = posix_spawnattr_t()
    posix_spawnattr_init(&attr)
    defer { posix_spawnattr_destroy(&attr) }
    var all = sigset_t()
    sigfillset(&all)
    var none = sigset_t()
    sigemptyset(&none)
    posix_spawnattr_setsigdefault(&attr, &all)
    posix_spawnattr_setsigmask(&attr, &none)
    posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

    let argv = ([path] + arguments).map { strdup($0) } + [nil]
    let env = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
    defer {
      for p in argv + (env ?? []) { free(p) }
    }
    var pid: pid_t = 0
    let rc =
      env.map { e in
        e.withUnsafeBufferPointer {
          posix_spawn(&pid, path, &actions, &attr, argv, UnsafeMutablePointer(mutating: $0.baseAddress))
        }
      } ?? posix_spawn(&pid, path, &actions, &attr, argv, environ)
    if captureOutput { close(pipeFDs[1]) }
    guard rc == 0 else {
      if captureOutput { close(pipeFDs[0]) }
      return nil
    }
    return Subprocess(pid: pid, output: captureOutput ? pipeFDs[0] : -1)
  }

  /// Reads the captured output to its end (at most `limit` bytes) and closes it.
  public func readOutput(limit: Int = .max) -> [UInt8] {
    guard output >= 0 else { return [] }
    defer { close(output) }
    return FileIO.read(output, limit: limit)
  }

  /// Waits for the child: its exit status, or the number of the signal that ended it (as Process's
  /// `terminationStatus`).
  @discardableResult
  public func wait() -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
      if errno != EINTR { return -1 }
    }
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : signal
  }
}

/// Environment variables, one at a time with getenv. FoundationEssentials' `ProcessInfo.processInfo.environment`
/// builds a dictionary of the whole environment on its first use: 1.7M instructions at the start of every command
/// (callgrind), more than parsing the command line.
public enum Environment {
  public static func value(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

  /// The user's home directory: $HOME when it is an absolute path (as the XDG base directory spec reads it), else
  /// the password database's (getpwuid_r: reads /etc/nsswitch.conf and /etc/passwd).
  public static var home: String? {
    if let h = value("HOME"), h.hasPrefix("/") { return h }
    var pw = passwd()
    var result: UnsafeMutablePointer<passwd>?
    var buffer = [CChar](repeating: 0, count: 4096)
    guard getpwuid_r(getuid(), &pw, &buffer, buffer.count, &result) == 0, result != nil, let dir = pw.pw_dir else {
      return nil
    }
    return String(cString: dir)
  }
}

/// Directory listings with opendir/readdir. FoundationEssentials' `contentsOfDirectory` costs 0.2M instructions
/// on its first use (generic sequence machinery), and discovery lists /sys/class/hidraw in every command.
public enum Directory {
  /// The entries of `path` (without "." and ".."); nil when it cannot be read.
  public static func names(_ path: String) -> [String]? {
    guard let dir = opendir(path) else { return nil }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
      }
      if name != "." && name != ".." { names.append(name) }
    }
    return names
  }
}
