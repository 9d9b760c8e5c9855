import Glibc

/// Reading and writing file descriptors and small files.
public enum FileIO {
  /// Writes all of `bytes` to `fd` (retrying on EINTR and short writes); false on an error.
  @discardableResult
  public static func write(_ fd: Int32, _ bytes: some Collection<UInt8>) -> Bool {
    Array(bytes).withUnsafeBytes { buf in
      var off = 0
      while off < buf.count {
        let n = Glibc.write(fd, buf.baseAddress! + off, buf.count - off)
        if n < 0 {
          if errno == EINTR { continue }
          return false
        }
        off += n
      }
      return true
    }
  }

  /// Writes `text` to standard error (errors ignored, as FileHandle's write was).
  public static func writeError(_ text: String) { write(2, Array(text.utf8)) }

  /// Writes `text` to standard output.
  public static func writeOutput(_ text: String) { write(1, Array(text.utf8)) }

  /// Reads `fd` until end of file or `limit` bytes (retrying on EINTR); what was read before an error.
  public static func read(_ fd: Int32, limit: Int = .max) -> [UInt8] {
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while out.count < limit {
      let want = min(chunk.count, limit - out.count)
      let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, want) }
      if n < 0 && errno == EINTR { continue }
      if n <= 0 { break }
      out += chunk[..<n]
    }
    return out
  }

  /// A file's bytes up to `limit` (procfs and sysfs files stat as empty, so read to the end); nil when it cannot
  /// be opened (`errno` tells why).
  public static func read(path: String, limit: Int = .max) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    return read(fd, limit: limit)
  }
}
