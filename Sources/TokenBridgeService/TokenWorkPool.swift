import Glibc
import Platform
import Synchronization

/// The service's token work (listings, policy checks) on a fixed number of worker threads, each call queued under
/// its caller: the workers take the callers in turn (one call of each caller with work, round-robin), and a caller
/// with `perCaller` calls queued or running gets no more (the dispatcher answers Busy). However many calls arrive,
/// the service holds at most `workers` PC/SC contexts for them.
public final class TokenWorkPool: Sendable {
  public struct Limits: Sendable, Equatable {
    /// Worker threads (each lists tokens through a PC/SC context of its own while it works).
    public var workers: Int
    /// Calls one caller may have queued or running.
    public var perCaller: Int
    /// Calls all callers together may have queued or running.
    public var total: Int
    public init(workers: Int = 2, perCaller: Int = 16, total: Int = 256) {
      self.workers = workers
      self.perCaller = perCaller
      self.total = total
    }
  }

  struct Job {
    let caller: String
    let body: @Sendable () -> Void
  }

  struct Queues {
    var byCaller: [String: [Job]] = [:]
    /// Callers with queued jobs, in the order the workers serve them.
    var turn: [String] = []
    /// Jobs queued or running, per caller.
    var inFlight: [String: Int] = [:]
    var total = 0
    var running = 0
  }

  public let limits: Limits
  let queues = Mutex(Queues())
  /// One byte per queued job: a worker blocks reading it (the pipe is the pool's semaphore).
  let readFD: Int32
  let writeFD: Int32

  public init(limits: Limits = Limits()) {
    self.limits = limits
    var fds: [Int32] = [0, 0]
    _ = pipe(&fds)
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    readFD = fds[0]
    writeFD = fds[1]
    for _ in 0..<max(1, limits.workers) {
      _ = POSIXThread.start { [self] in self.serve() }
    }
  }

  /// Queues `body` under `caller`; false (nothing queued) when the caller or the pool is at its bound.
  public func submit(caller: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    let queued = queues.withLock { q in
      guard q.inFlight[caller, default: 0] < limits.perCaller, q.total < limits.total else { return false }
      q.inFlight[caller, default: 0] += 1
      q.total += 1
      if q.byCaller[caller, default: []].isEmpty { q.turn.append(caller) }
      q.byCaller[caller, default: []].append(Job(caller: caller, body: body))
      return true
    }
    if queued {
      var byte: UInt8 = 1
      while write(writeFD, &byte, 1) < 0 && errno == EINTR {}
    }
    return queued
  }

  /// Jobs queued or running for `caller`.
  public func inFlight(_ caller: String) -> Int { queues.withLock { $0.inFlight[caller, default: 0] } }

  /// Jobs running now (at most `limits.workers`).
  public var running: Int { queues.withLock { $0.running } }

  /// The next job: the first caller in turn, which goes to the back of the turn if it has more.
  func next() -> Job? {
    queues.withLock { q in
      guard !q.turn.isEmpty else { return nil }
      let caller = q.turn.removeFirst()
      let job = q.byCaller[caller]!.removeFirst()
      if q.byCaller[caller]!.isEmpty { q.byCaller[caller] = nil } else { q.turn.append(caller) }
      q.running += 1
      return job
    }
  }

  func finished(_ job: Job) {
    queues.withLock { q in
      q.running -= 1
      q.total -= 1
      let left = q.inFlight[job.caller, default: 1] - 1
      q.inFlight[job.caller] = left > 0 ? left : nil
    }
  }

  func serve() {
    var byte: UInt8 = 0
    while true {
      let n = read(readFD, &byte, 1)
      if n < 0 && errno == EINTR { continue }
      guard n == 1 else { return }
      guard let job = next() else { continue }
      job.body()
      finished(job)
    }
  }
}
