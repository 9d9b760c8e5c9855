import Foundation
import Testing

@testable import TokenBridge

/// The data directory, database and lock file are refused when someone else could change them.
@Suite struct LocalDataFileSafetyTests {
  let root = FileManager.default.temporaryDirectory.appendingPathComponent("tb-safe-\(UUID().uuidString)")
  var dir: URL { root.appendingPathComponent("tokenbridge") }
  var db: String { dir.appendingPathComponent("tokenbridge.sqlite").path }

  func mode(_ path: String) -> mode_t {
    var st = stat()
    return lstat(path, &st) == 0 ? st.st_mode & 0o7777 : 0
  }

  /// A directory with exactly `mode` (chmod: the umask does not apply).
  func makeDirectory(_ url: URL, mode: mode_t = 0o700) throws {
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    #expect(chmod(url.path, mode) == 0)
  }

  @Test func createsPrivateDirectoryDatabaseAndLock() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    _ = try LocalData(directory: dir)
    #expect(mode(dir.path) == 0o700)
    #expect(mode(db) == 0o600)
    #expect(mode(dir.appendingPathComponent("tokenbridge.lock").path) == 0o600)
    _ = try LocalData(directory: dir)  // and accepts what it made
  }

  @Test func symlinkedDirectoryIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    let real = root.appendingPathComponent("elsewhere")
    try makeDirectory(real)
    try FileManager.default.createSymbolicLink(at: dir, withDestinationURL: real)
    #expect(throws: LocalDataError.insecure(path: dir.path, reason: .symbolicLink)) {
      try LocalData(directory: dir)
    }
    #expect(FileManager.default.contents(atPath: real.appendingPathComponent("tokenbridge.sqlite").path) == nil)
  }

  @Test func symlinkedDatabaseIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    try makeDirectory(dir)
    let target = root.appendingPathComponent("victim")
    try Data("keep me".utf8).write(to: target)
    try FileManager.default.createSymbolicLink(atPath: db, withDestinationPath: target.path)
    #expect(throws: LocalDataError.insecure(path: db, reason: .symbolicLink)) { try LocalData(directory: dir) }
    #expect(FileManager.default.contents(atPath: target.path) == Data("keep me".utf8))
  }

  @Test func symlinkedLockFileIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    try makeDirectory(dir)
    let lock = dir.appendingPathComponent("tokenbridge.lock").path
    try FileManager.default.createSymbolicLink(atPath: lock, withDestinationPath: "/tmp")
    #expect(throws: LocalDataError.insecure(path: lock, reason: .symbolicLink)) { try LocalData(directory: dir) }
  }

  @Test func worldWritableDirectoryIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    try makeDirectory(dir, mode: 0o777)
    #expect(throws: LocalDataError.insecure(path: dir.path, reason: .writableByOthers(mode: 0o777))) {
      try LocalData(directory: dir)
    }
    #expect(chmod(dir.path, 0o770) == 0)  // group writable too
    #expect(throws: LocalDataError.insecure(path: dir.path, reason: .writableByOthers(mode: 0o770))) {
      try LocalData(directory: dir)
    }
  }

  @Test func worldWritableDatabaseIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    _ = try LocalData(directory: dir)
    #expect(chmod(db, 0o666) == 0)
    #expect(throws: LocalDataError.insecure(path: db, reason: .writableByOthers(mode: 0o666))) {
      try LocalData(directory: dir)
    }
  }

  @Test func aDirectoryInPlaceOfTheDatabaseIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    try makeDirectory(dir)
    try makeDirectory(URL(fileURLWithPath: db))
    #expect(throws: LocalDataError.insecure(path: db, reason: .notARegularFile)) { try LocalData(directory: dir) }
  }

  @Test(.enabled(if: geteuid() == 0, "chown needs root"))
  func anotherUsersDirectoryOrDatabaseIsRefused() throws {
    defer { try? FileManager.default.removeItem(at: root) }
    let nobody: uid_t = 65534
    _ = try LocalData(directory: dir)
    #expect(chown(db, nobody, nobody) == 0)
    #expect(throws: LocalDataError.insecure(path: db, reason: .ownedByAnotherUser(uid: nobody))) {
      try LocalData(directory: dir)
    }
    #expect(chown(db, 0, 0) == 0)
    #expect(chown(dir.path, nobody, nobody) == 0)
    #expect(throws: LocalDataError.insecure(path: dir.path, reason: .ownedByAnotherUser(uid: nobody))) {
      try LocalData(directory: dir)
    }
  }
}
