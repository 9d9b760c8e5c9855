import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// Exactly `n` bytes from a stream socket; nil when the peer closed it or an error came first.
func socketRead(_ fd: Int32, _ n: Int) -> [UInt8]? {
  var buf = [UInt8](repeating: 0, count: n)
  var got = 0
  while got < n {
    let r = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, n - got, 0) }
    if r <= 0 { return nil }
    got += r
  }
  return buf
}

/// All of `bytes` to a stream socket (no SIGPIPE); false when the peer is gone.
func socketSend(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
  var sent = 0
  while sent < bytes.count {
    let r = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
    if r <= 0 { return false }
    sent += r
  }
  return true
}
