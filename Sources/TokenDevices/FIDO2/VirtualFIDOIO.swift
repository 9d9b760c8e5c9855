import CFido2
import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// libfido2 custom I/O (`fido_dev_set_io_functions`) for keys reached over a Unix SOCK_SEQPACKET socket
/// (virtual-token fido2): one datagram = one 64-byte HID report. libfido2 writes 65 bytes (report ID first) and
/// reads exactly 64 (HardwareNotes.md, FIDO2). The callbacks capture nothing; the handle is a boxed fd.
enum VirtualFIDOIO {
  final class Handle {
    let fd: Int32
    let path: String
    init(fd: Int32, path: String) {
      self.fd = fd
      self.path = path
    }
  }

  /// Called (by path) when the key sends KEEPALIVE UP_NEEDED: libfido2 drops keepalives, but they pass
  /// through these callbacks first, so the user can be told to touch the key at the right moment.
  nonisolated(unsafe) static var touchCues: [String: () -> Void] = [:]
  static let cueLock = NSLock()

  static var functions: fido_dev_io_t {
    fido_dev_io_t(open: openCallback, close: closeCallback, read: readCallback, write: writeCallback)
  }

  static let openCallback: @convention(c) (UnsafePointer<CChar>?) -> UnsafeMutableRawPointer? = { path in
    guard let path, let fd = connectSocket(String(cString: path)) else { return nil }
    return Unmanaged.passRetained(Handle(fd: fd, path: String(cString: path))).toOpaque()
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
      // Ctrl-C (our cancel handler) interrupts poll/recv with EINTR: that is not the end of the key, go on.
      var pfd = pollfd(fd: h.fd, events: Int16(POLLIN), revents: 0)
      var ready: Int32
      repeat { ready = poll(&pfd, 1, ms < 0 ? -1 : ms) } while ready < 0 && errno == EINTR
      guard ready > 0 else { return -1 }
      var n: Int
      repeat { n = recv(h.fd, buf, 64, 0) } while n < 0 && errno == EINTR
      if n == 64 && buf[4] == 0xBB && buf[7] == 2 {  // KEEPALIVE, status UP_NEEDED
        let cue = cueLock.withLock { touchCues.removeValue(forKey: h.path) }  // once per operation
        cue?()
      }
      return n == 64 ? 64 : -1
    }

  static let writeCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Int32 = {
    handle, buf, len in
    guard let handle, let buf, len == 65 else { return -1 }
    let h = Unmanaged<Handle>.fromOpaque(handle).takeUnretainedValue()
    let n = send(h.fd, buf + 1, 64, Int32(MSG_NOSIGNAL))  // drop the report ID
    return n == 64 ? 65 : -1
  }

  static func connectSocket(_ path: String) -> Int32? {
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
