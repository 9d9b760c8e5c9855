import Glibc

extension Subprocess {
  /// Runs `path` with `input` on its stdin (through a pipe: a secret handed to a child never goes on its argv) and
  /// its stdout captured (at most `limit` bytes); stderr goes to /dev/null unless `stderr` says otherwise. Returns
  /// the exit status (as `wait`) and the output; nil when the child could not be started, or `input` is larger than
  /// a pipe's buffer (4 KiB here: it is written whole before the output is read, so it must never block). The
  /// caller wipes its own `input`; nothing here keeps a copy.
  public static func run(
    _ path: String, _ arguments: [String], input: [UInt8], environment: [String: String]? = nil,
    stderr: Stream = .null, limit: Int = 1 << 20
  ) -> (status: Int32, output: [UInt8])? {
    guard input.count <= 4096 else { return nil }
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { return nil }
    _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
    guard
      let child = start(
        path, arguments, environment: environment, stdout: .inherited, stderr: stderr, captureOutput: true,
        stdinFD: fds[0])
    else {
      close(fds[0])
      close(fds[1])
      return nil
    }
    close(fds[0])
    // A child that exits without reading makes this write fail with EPIPE, not kill us: SIGPIPE is blocked here.
    var block = sigset_t()
    var previous = sigset_t()
    sigemptyset(&block)
    sigaddset(&block, SIGPIPE)
    pthread_sigmask(SIG_BLOCK, &block, &previous)
    _ = FileIO.write(fds[1], input)
    close(fds[1])
    var pending = sigset_t()
    sigpending(&pending)
    if sigismember(&pending, SIGPIPE) == 1 {
      var timeout = timespec(tv_sec: 0, tv_nsec: 0)
      _ = sigtimedwait(&block, nil, &timeout)
    }
    pthread_sigmask(SIG_SETMASK, &previous, nil)
    let output = child.readOutput(limit: limit)
    return (child.wait(), output)
  }
}
