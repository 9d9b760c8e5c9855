import Glibc

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
    stdout: Stream = .inherited, stderr: Stream = .inherited, captureOutput: Bool = false, stdinFD: Int32? = nil
  ) -> Subprocess? {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    for (fd, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] where stream == .null {
      posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
    }
    // A descriptor of the caller's as the child's stdin (a pipe it writes a secret into: never argv).
    if let stdinFD { posix_spawn_file_actions_adddup2(&actions, stdinFD, 0) }
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
