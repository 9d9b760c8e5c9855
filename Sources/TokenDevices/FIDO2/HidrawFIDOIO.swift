import CFido2
import Dispatch

#if canImport(Glibc)
  import Glibc
#endif

/// libfido2 custom I/O (`fido_dev_set_io_functions`) for keys on a Linux hidraw node, in place of libfido2's own
/// (hid_linux.c): the reads pass through `FIDO2IO.Context`, which fires the touch cue when the key asks for a touch
/// and tells a deadline from a failure. One report = 64 bytes; libfido2 writes 65 (report ID 0 first) and reads 64
/// (HardwareNotes.md, "FIDO2 I/O is ours").
///
/// Like libfido2's `fido_hid_open`: the node is opened read-write, then locked with an exclusive non-blocking
/// `flock` — another process (or another libfido2) using the key holds it — retried with growing pauses. Ours
/// is bounded by the session's deadline (libfido2 retries 20 times, about 21 s). A lock that had to be waited
/// for is taken again on a freshly opened node, as libfido2 does: the first descriptor queued every input report
/// the other process's exchange produced.
enum HidrawFIDOIO {
  typealias Handle = FIDO2IO.Handle

  static var functions: fido_dev_io_t {
    fido_dev_io_t(open: openCallback, close: closeCallback, read: readCallback, write: writeCallback)
  }

  static let openCallback: @convention(c) (UnsafePointer<CChar>?) -> UnsafeMutableRawPointer? = { path in
    guard let path, let context = FIDO2IO.openingContext(),
      let fd = openLocked(String(cString: path), context: context)
    else { return nil }
    return Unmanaged.passRetained(Handle(fd: fd, context: context)).toOpaque()
  }

  /// Opens `path` and takes its exclusive lock within the context's deadline; nil (with `timedOut` when the lock
  /// stayed taken, `peerGone` when the node is not there) otherwise.
  static func openLocked(_ path: String, context: FIDO2IO.Context) -> Int32? {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(max(1, context.readDeadlineMs)) * 1_000_000
    var pauseMs: UInt32 = 10
    while true {
      switch tryOpenLocked(path) {
      case .opened(let fd): return fd
      case .notOpened:
        context.peerGone = true
        return nil
      case .failed: return nil
      case .busy:
        guard DispatchTime.now().uptimeNanoseconds < end else {
          context.timedOut = true  // another process keeps the key
          return nil
        }
        usleep(pauseMs * 1000)
        pauseMs = min(pauseMs * 2, 100)
      }
    }
  }

  enum TryOpen: Equatable {
    case opened(Int32)
    /// Another process holds the lock: try again later, on a fresh descriptor (this one queued every input report
    /// the other process's exchange produced).
    case busy
    /// The node could not be opened (errno): gone, or not ours to open.
    case notOpened(Int32)
    /// Opened, but not a character device (0) or not lockable (errno).
    case failed(Int32)
  }

  /// One try: open read-write, check it is a character device, take the exclusive lock without waiting.
  static func tryOpenLocked(_ path: String) -> TryOpen {
    var fd: Int32
    repeat { fd = open(path, O_RDWR | O_CLOEXEC) } while fd < 0 && errno == EINTR
    guard fd >= 0 else { return .notOpened(errno) }
    var st = stat()
    guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFCHR else {
      close(fd)
      return .failed(0)
    }
    while flock(fd, LOCK_EX | LOCK_NB) != 0 {
      if errno == EINTR { continue }
      let why = errno
      close(fd)
      return why == EWOULDBLOCK ? .busy : .failed(why)
    }
    return .opened(fd)
  }

  /// Closing the descriptor releases the lock.
  static let closeCallback = FIDO2IO.closeCallback

  static let readCallback:
    @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, Int, Int32) -> Int32 = {
      handle, buf, len, ms in
      guard let handle, let buf, len == 64 else { return -1 }
      let h = Unmanaged<Handle>.fromOpaque(handle).takeUnretainedValue()
      guard FIDO2IO.awaitReport(h, ms: ms) else { return -1 }
      var n: Int
      repeat { n = read(h.fd, buf, 64) } while n < 0 && errno == EINTR
      guard n == 64 else {
        if n < 0 { h.context.peerGone = true }  // EIO, ENODEV: unplugged (FIDO2Session.mapped waits for the node)
        return -1
      }
      h.context.received(UnsafeBufferPointer(start: buf, count: 64))  // touch cue
      return 64
    }

  static let writeCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Int32 = {
    handle, buf, len in
    guard let handle, let buf, len == 65 else { return -1 }
    let h = Unmanaged<Handle>.fromOpaque(handle).takeUnretainedValue()
    var n: Int
    repeat { n = write(h.fd, buf, 65) } while n < 0 && errno == EINTR
    guard n == 65 else { return -1 }
    h.context.sent(UnsafeBufferPointer(start: buf + 1, count: 64))  // an INIT's nonce
    return 65
  }
}
