import Glibc

/// A file a user named on the command line, read safely: opened without blocking (a FIFO without a writer would
/// block `open` forever) and checked with fstat before anything is read: a directory is EISDIR, a device, FIFO or
/// socket `.notAFile`; more than `limit` bytes is EFBIG (checked by size first, then while reading).
enum RegularFile {
  static func read(_ path: String, limit: Int) throws(InputError) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
    guard fd >= 0 else { throw .file(path: path, errno: errno) }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw .file(path: path, errno: errno) }
    guard (st.st_mode & S_IFMT) != S_IFDIR else { throw .file(path: path, errno: EISDIR) }
    guard (st.st_mode & S_IFMT) == S_IFREG else { throw .notAFile(path: path) }
    guard Int(st.st_size) <= limit else { throw .file(path: path, errno: EFBIG) }
    var out = [UInt8]()
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
      let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
      if n < 0 {
        if errno == EINTR { continue }
        throw .file(path: path, errno: errno)
      }
      if n == 0 { break }
      out += chunk[0..<n]
      guard out.count <= limit else { throw .file(path: path, errno: EFBIG) }
    }
    return out
  }
}
