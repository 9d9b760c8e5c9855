import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The data directory, the database and the lock file are used only when they are what they claim to be:
/// no symbolic link, ours, and writable by nobody else. Checked with `lstat`/`fstat` (never a call that
/// follows links), created 0700 / 0600 whatever the umask.
enum FileSafety {
  enum Kind { case directory, file }

  /// Checks `path` without following a link. Returns false when nothing is there.
  static func check(_ path: String, _ kind: Kind) throws(LocalDataError) -> Bool {
    var st = stat()
    guard lstat(path, &st) == 0 else {
      if errno == ENOENT { return false }
      throw .unavailable(path: path, reason: String(cString: strerror(errno)))
    }
    try verify(st, path: path, kind)
    return true
  }

  static func verify(_ st: stat, path: String, _ kind: Kind) throws(LocalDataError) {
    let type = st.st_mode & S_IFMT
    if type == S_IFLNK { throw .insecure(path: path, reason: .symbolicLink) }
    switch kind {
    case .directory: if type != S_IFDIR { throw .insecure(path: path, reason: .notADirectory) }
    case .file: if type != S_IFREG { throw .insecure(path: path, reason: .notARegularFile) }
    }
    if st.st_uid != geteuid() { throw .insecure(path: path, reason: .ownedByAnotherUser(uid: st.st_uid)) }
    if st.st_mode & 0o022 != 0 {
      throw .insecure(path: path, reason: .writableByOthers(mode: UInt32(st.st_mode & 0o7777)))
    }
  }

  /// The data directory: created 0700 (its parents as usual) if missing, else checked.
  static func prepareDirectory(_ directory: URL) throws(LocalDataError) {
    let path = directory.path
    if try check(path, .directory) { return }
    try makeParents(of: path)
    let made = mkdir(path, 0o700) == 0
    if !made, errno != EEXIST { throw .unavailable(path: path, reason: String(cString: strerror(errno))) }
    let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0 else { throw openError(path) }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw .unavailable(path: path, reason: String(cString: strerror(errno))) }
    // Just made: 0700 whatever the umask let mkdir set.
    if made, st.st_uid == geteuid(), st.st_mode & S_IFMT == S_IFDIR, fchmod(fd, 0o700) == 0 {
      st.st_mode = (st.st_mode & ~0o7777) | 0o700
    }
    try verify(st, path: path, .directory)
  }

  /// Makes the missing parents of `path` (as `mkdir -p`: mode 0777 less the umask), following links as usual.
  static func makeParents(of path: String) throws(LocalDataError) {
    let parts = path.split(separator: "/", omittingEmptySubsequences: true).dropLast()
    var parent = path.hasPrefix("/") ? "" : "."
    for part in parts {
      parent += "/" + part
      if mkdir(parent, 0o777) == 0 || errno == EEXIST { continue }
      let reason = String(cString: strerror(errno))
      var st = stat()
      if stat(parent, &st) == 0, st.st_mode & S_IFMT == S_IFDIR { continue }  // e.g. EACCES on an existing one
      throw .unavailable(path: path, reason: "cannot make \(parent): \(reason)")
    }
  }

  /// Opens (creating 0600 if missing) a file in the checked directory, without following a link, and checks it.
  /// The caller closes the descriptor.
  static func openFile(_ path: String, flags: Int32 = O_RDWR | O_NONBLOCK) throws(LocalDataError) -> Int32 {
    var created = true
    var fd = open(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    if fd < 0, errno == EEXIST {
      created = false
      fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC)
    }
    guard fd >= 0 else { throw errno == EISDIR ? .insecure(path: path, reason: .notARegularFile) : openError(path) }
    var st = stat()
    guard fstat(fd, &st) == 0 else {
      close(fd)
      throw .unavailable(path: path, reason: String(cString: strerror(errno)))
    }
    if created, st.st_uid == geteuid() {
      _ = fchmod(fd, 0o600)
      st.st_mode = (st.st_mode & ~0o7777) | 0o600
    }
    do { try verify(st, path: path, .file) } catch {
      close(fd)
      throw error
    }
    return fd
  }

  /// The bytes of a small file in a checked directory (`directory` checked first, then the file, on the open
  /// descriptor: no link followed, ours, not writable by others); nil when the directory or the file is missing.
  static func readFile(_ path: String, in directory: URL) throws(LocalDataError) -> [UInt8]? {
    guard try check(directory.path, .directory) else { return nil }
    let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else {
      if errno == ENOENT { return nil }
      throw errno == EISDIR ? .insecure(path: path, reason: .notARegularFile) : openError(path)
    }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw .unavailable(path: path, reason: String(cString: strerror(errno))) }
    try verify(st, path: path, .file)
    do { return try LocalData.readAll(fd, path: path) } catch let e as LocalDataError { throw e } catch {
      throw .unavailable(path: path, reason: String(describing: error))
    }
  }

  /// Replaces a file of `directory` (made 0700 or checked, as the data directory) with `bytes`, atomically: a
  /// new 0600 file beside it, written and synced, then renamed over it. An existing file is checked first (a
  /// link, another user's or a shared file is refused, not replaced).
  static func replaceFile(_ path: String, in directory: URL, with bytes: [UInt8]) throws(LocalDataError) {
    try prepareDirectory(directory)
    _ = try check(path, .file)
    let temporary = path + ".new-\(getpid())"
    _ = unlink(temporary)
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw openError(temporary) }
    var done = false
    defer {
      close(fd)
      if !done { _ = unlink(temporary) }
    }
    _ = fchmod(fd, 0o600)
    var written = 0
    while written < bytes.count {
      let n = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      guard n > 0 else { throw .unavailable(path: temporary, reason: String(cString: strerror(errno))) }
      written += n
    }
    guard fsync(fd) == 0, rename(temporary, path) == 0 else {
      throw .unavailable(path: path, reason: String(cString: strerror(errno)))
    }
    done = true
  }

  static func openError(_ path: String) -> LocalDataError {
    errno == ELOOP
      ? .insecure(path: path, reason: .symbolicLink)
      : .unavailable(path: path, reason: String(cString: strerror(errno)))
  }
}

/// An exclusive `flock` on a file in the data directory, held for each write transaction, so that writers in
/// other processes (and other connections in this one) wait for each other. The kernel drops it when the
/// holder dies, so a killed run never leaves it taken.
final class WriteLock: Sendable {
  let fd: Int32
  let path: String

  init(path: String) throws(LocalDataError) {
    self.path = path
    fd = try FileSafety.openFile(path)
  }

  deinit { close(fd) }

  func withLock<T>(_ body: () throws -> T) throws -> T {
    while flock(fd, LOCK_EX) != 0 {
      guard errno == EINTR else {
        throw LocalDataError.unavailable(path: path, reason: String(cString: strerror(errno)))
      }
    }
    defer { flock(fd, LOCK_UN) }
    return try body()
  }
}
