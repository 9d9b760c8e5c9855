import FoundationEssentials
import Platform
import Synchronization
import TokenBridge
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

extension Pinentry {
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
