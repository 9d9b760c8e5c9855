import CFido2
import Dispatch
import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#endif

/// libfido2 custom I/O (`fido_dev_set_io_functions`) for keys reached over a Unix SOCK_SEQPACKET socket
/// (virtual-token fido2): one datagram = one 64-byte HID report. libfido2 writes 65 bytes (report ID first) and
/// reads exactly 64 (HardwareNotes.md, FIDO2). The callbacks capture nothing; the handle is a boxed fd plus the
/// owning session's `VirtualFIDOIO.Context`.
///
/// Every call is bounded: connect and send by SO_SNDTIMEO, a read by the `ms` libfido2 passes (the rest of the
/// session's deadline, `fido_dev_set_timeout`) or, when libfido2 passes -1 (no timeout set), by the context's
/// current deadline. A key that accepts and never answers therefore ends the call with an error, not a hang.
enum VirtualFIDOIO {
  /// Per-session state the callbacks see. Used only on the thread that runs the session's libfido2 call (the
  /// callbacks run synchronously inside it), so it needs no lock.
  final class Context {
    /// Upper bound of one read when libfido2 passes no timeout (ms < 0), in milliseconds.
    var readDeadlineMs: Int32
    /// Called once when the key sends KEEPALIVE UP_NEEDED: libfido2 drops keepalives, but they pass through
    /// the read callback first, so the user can be told to touch the key at the right moment.
    var touchCue: (() -> Void)?
    /// The last read or send ended because the key said (or took) nothing before the deadline, not because the
    /// socket failed.
    var timedOut = false
    /// The key hung up (end of stream or a socket error): it was unplugged or its process ended.
    var peerGone = false

    init(readDeadlineMs: Int32) { self.readDeadlineMs = readDeadlineMs }
  }

  final class Handle {
    let fd: Int32
    let context: Context
    init(fd: Int32, context: Context) {
      self.fd = fd
      self.context = context
    }
  }

  /// The open callback gets only the path: the session hands its context over through the opening thread
  /// (a thread-specific value).
  static let contextKey: pthread_key_t = {
    var key = pthread_key_t()
    precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left")
    return key
  }()

  /// Runs `body` (which calls `fido_dev_open`) with `context` visible to the open callback on this thread.
  static func opening<T>(with context: Context, _ body: () -> T) -> T {
    let box = Unmanaged.passRetained(context)
    pthread_setspecific(contextKey, box.toOpaque())
    defer {
      pthread_setspecific(contextKey, nil)
      box.release()
    }
    return body()
  }

  static var functions: fido_dev_io_t {
    fido_dev_io_t(open: openCallback, close: closeCallback, read: readCallback, write: writeCallback)
  }

  static let openCallback: @convention(c) (UnsafePointer<CChar>?) -> UnsafeMutableRawPointer? = { path in
    guard let path, let raw = pthread_getspecific(contextKey),
      case let context = Unmanaged<Context>.fromOpaque(raw).takeUnretainedValue(),
      let fd = connectSocket(String(cString: path), deadlineMs: context.readDeadlineMs)
    else { return nil }
    return Unmanaged.passRetained(Handle(fd: fd, context: context)).toOpaque()
  }

  static let closeCallback: @convention(c) (UnsafeMutableRawPointer?) -> Void = { handle in
    guard let handle else { return }
    let h = Unmanaged<Handle>.fromOpaque(handle).takeRetainedValue()
    close(h.fd)
  }

  static let readCallback:
    @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, Int, Int32) -> Int32 = {
      handle, buf, len, ms in
      guard let handle, let buf, len >= 64 else { return -1 }
      let h = Unmanaged<Handle>.fromOpaque(handle).takeUnretainedValue()
      let limit = ms < 0 ? h.context.readDeadlineMs : ms
      switch waitReadable(h.fd, limitMs: limit) {
      case .readable: break
      case .timedOut:
        h.context.timedOut = true
        return -1
      case .failed:
        h.context.peerGone = true
        return -1
      }
      var n: Int
      repeat { n = recv(h.fd, buf, 64, Int32(MSG_DONTWAIT)) } while n < 0 && errno == EINTR
      if n <= 0 { h.context.peerGone = true }
      if n == 64 && buf[4] == 0xBB && buf[7] == 2, let cue = h.context.touchCue {  // KEEPALIVE UP_NEEDED
        h.context.touchCue = nil  // once per operation
        cue()
      }
      return n == 64 ? 64 : -1
    }

  /// Polls until `fd` is readable or `limitMs` passed. Ctrl-C (our cancel handler) interrupts poll with EINTR:
  /// that is not the end of the key, so poll again for the time left (never longer than the limit in total).
  enum Wait { case readable, timedOut, failed }

  static func waitReadable(_ fd: Int32, limitMs: Int32) -> Wait {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, limitMs)) * 1_000_000
    var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    while true {
      let now = DispatchTime.now().uptimeNanoseconds
      let left = now >= end ? 0 : Int32(min(UInt64(Int32.max), (end - now + 999_999) / 1_000_000))
      let ready = poll(&pfd, 1, left)
      if ready > 0 { return .readable }  // data, or a hang-up that recv then reports
      if ready == 0 { return .timedOut }
      if errno != EINTR { return .failed }
    }
  }

  static let writeCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Int32 = {
    handle, buf, len in
    guard let handle, let buf, len == 65 else { return -1 }
    let h = Unmanaged<Handle>.fromOpaque(handle).takeUnretainedValue()
    var n: Int
    // SO_SNDTIMEO bounds a send to a peer that stopped reading (its queue full).
    repeat { n = send(h.fd, buf + 1, 64, Int32(MSG_NOSIGNAL)) } while n < 0 && errno == EINTR
    if n < 0 {
      if errno == EAGAIN || errno == EWOULDBLOCK { h.context.timedOut = true } else { h.context.peerGone = true }
    }
    return n == 64 ? 65 : -1
  }

  /// Connects with SO_SNDTIMEO set first: Linux bounds a Unix-socket connect (a listener whose backlog is full)
  /// and later sends by it (unix(7), socket(7)).
  static func connectSocket(_ path: String, deadlineMs: Int32) -> Int32? {
    let s = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
    guard s >= 0 else { return nil }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
      close(s)
      return nil
    }
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in
      for (i, b) in bytes.enumerated() { raw[i] = b }
    }
    let ms = max(1, Int(deadlineMs))
    var tv = timeval(tv_sec: ms / 1000, tv_usec: (ms % 1000) * 1000)
    _ = setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0 else {
      close(s)
      return nil
    }
    return s
  }
}
