import CFido2
import Dispatch
import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#endif

/// libfido2 custom I/O (`fido_dev_set_io_functions`) for keys reached over a Unix SOCK_SEQPACKET socket
/// (virtual-token fido2): one datagram = one 64-byte HID report. libfido2 writes 65 bytes (report ID first) and
/// reads exactly 64 (HardwareNotes.md, FIDO2). The callbacks capture nothing; the handle is a boxed fd plus the
/// owning session's `FIDO2IO.Context` (which sees every report it reads: the touch cue).
///
/// Every call is bounded: connect and send by SO_SNDTIMEO, a read by the `ms` libfido2 passes (the rest of the
/// session's deadline, `fido_dev_set_timeout`) or, when libfido2 passes -1 (no timeout set), by the context's
/// current deadline. A key that accepts and never answers therefore ends the call with an error, not a hang.
enum VirtualFIDOIO {
  typealias Context = FIDO2IO.Context

  typealias Handle = FIDO2IO.Handle

  static var functions: fido_dev_io_t {
    fido_dev_io_t(open: openCallback, close: closeCallback, read: readCallback, write: writeCallback)
  }

  static let openCallback: @convention(c) (UnsafePointer<CChar>?) -> UnsafeMutableRawPointer? = { path in
    guard let path, let context = FIDO2IO.openingContext() else { return nil }
    guard let fd = connectSocket(String(cString: path), deadlineMs: context.readDeadlineMs) else {
      // No socket, or nobody listening on it: the key was unplugged (its simulator stopped).
      if errno == ENOENT || errno == ECONNREFUSED { context.peerGone = true } else { context.timedOut = true }
      return nil
    }
    return Unmanaged.passRetained(Handle(fd: fd, context: context)).toOpaque()
  }

  static let closeCallback = FIDO2IO.closeCallback

  static let readCallback:
    @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, Int, Int32) -> Int32 = {
      handle, buf, len, ms in
      guard let handle, let buf, len >= 64 else { return -1 }
      let h = Unmanaged<Handle>.fromOpaque(handle).takeUnretainedValue()
      guard FIDO2IO.awaitReport(h, ms: ms) else { return -1 }
      var n: Int
      repeat { n = recv(h.fd, buf, 64, Int32(MSG_DONTWAIT)) } while n < 0 && errno == EINTR
      if n <= 0 { h.context.peerGone = true }
      guard n == 64 else { return -1 }
      h.context.received(UnsafeBufferPointer(start: buf, count: 64))  // touch cue
      return 64
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
    guard n == 64 else { return -1 }
    h.context.sent(UnsafeBufferPointer(start: buf + 1, count: 64))  // an INIT's nonce
    return 65
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
