import DBus
import Glibc
import Synchronization
import TokenBridge

/// What worker threads hand to the loop; the pipe wakes it.
public final class Outbox: Sendable {
  public enum Item: Sendable {
    case reply(id: Int, values: [DBusValue])
    case error(id: Int, name: String, code: UAFErrorCode, text: String)
    case response(path: String, outcome: RequestOutcome)
    case notify(summary: String, body: String)
    /// Every token present, as a full listing found them.
    case seen([TokenInfo])
    /// Some tokens (an operation on one named token): they replace their own entries among those last found.
    case seenSome([TokenInfo])
  }
  /// A method's answer: its values, or an error reply.
  public enum Outcome: Sendable, Equatable {
    case values([DBusValue])
    case failure(name: String, code: UAFErrorCode, text: String)
  }
  let items = Mutex<[Item]>([])
  let readFD: Int32
  let writeFD: Int32

  init() {
    var fds: [Int32] = [0, 0]
    _ = pipe(&fds)
    for fd in fds {
      _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
      _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }
    readFD = fds[0]
    writeFD = fds[1]
  }

  public func post(_ item: Item) {
    items.withLock { $0.append(item) }
    var b: UInt8 = 1
    _ = write(writeFD, &b, 1)
  }

  func take() -> [Item] {
    items.withLock { i in
      defer { i = [] }
      return i
    }
  }

  func clearWake() {
    var buf = [UInt8](repeating: 0, count: 256)
    while read(readFD, &buf, buf.count) > 0 {}
  }
}
