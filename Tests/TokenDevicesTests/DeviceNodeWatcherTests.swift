import Foundation
import Testing

@testable import TokenDevices

/// The replug wait on a directory standing in for /dev (hidraw nodes as plain files; the virtual key's socket
/// as a file renamed into place): inotify events, no polling.
@Suite struct DeviceNodeWatcherTests {
  func scratch() throws -> URL {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("watch-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir
  }

  func touch(_ url: URL) { _ = FileManager.default.createFile(atPath: url.path, contents: Data()) }

  /// Runs `events` on another thread shortly after the watcher started waiting.
  func later(_ events: @escaping @Sendable () -> Void) {
    Thread {
      usleep(100_000)
      events()
    }.start()
  }

  @Test func aHidrawKeyComingBackUnderAnotherNumberIsFound() throws {
    let dir = try scratch()
    defer { try? FileManager.default.removeItem(at: dir) }
    let old = dir.appendingPathComponent("hidraw3")
    touch(old)
    let watcher = try DeviceNodeWatcher(path: old.path, isVirtual: false)
    later { [self] in
      touch(dir.appendingPathComponent("hidraw9"))  // another key, before ours went: not it
      try? FileManager.default.removeItem(at: old)
      touch(dir.appendingPathComponent("mouse0"))  // not a hidraw node
      touch(dir.appendingPathComponent("hidraw5"))
    }
    #expect(try watcher.waitForReplug(timeoutSeconds: 20) == dir.appendingPathComponent("hidraw5").path)
  }

  @Test func aSocketRenamedIntoPlaceAfterTheUnplugIsFound() throws {
    let dir = try scratch()
    defer { try? FileManager.default.removeItem(at: dir) }
    let sock = dir.appendingPathComponent("fido.sock")
    touch(sock)
    let watcher = try DeviceNodeWatcher(path: sock.path, isVirtual: true)
    later { [self] in
      try? FileManager.default.removeItem(at: sock)
      let tmp = dir.appendingPathComponent("fido.sock.new")
      touch(tmp)  // bound, not yet listening: not it
      rename(tmp.path, sock.path)
    }
    #expect(try watcher.waitForReplug(timeoutSeconds: 20) == sock.path)
  }

  @Test func noUnplugEndsAtTheDeadline() throws {
    let dir = try scratch()
    defer { try? FileManager.default.removeItem(at: dir) }
    let sock = dir.appendingPathComponent("fido.sock")
    touch(sock)
    let watcher = try DeviceNodeWatcher(path: sock.path, isVirtual: true)
    later { [self] in touch(dir.appendingPathComponent("other.sock")) }
    #expect(throws: DeviceNodeWatcher.WaitError.timedOut(removed: false)) {
      try watcher.waitForReplug(timeoutSeconds: 0.5)
    }
  }

  @Test func unpluggedButNeverBackSaysSo() throws {
    let dir = try scratch()
    defer { try? FileManager.default.removeItem(at: dir) }
    let sock = dir.appendingPathComponent("fido.sock")
    touch(sock)
    let watcher = try DeviceNodeWatcher(path: sock.path, isVirtual: true)
    later { try? FileManager.default.removeItem(at: sock) }
    #expect(throws: DeviceNodeWatcher.WaitError.timedOut(removed: true)) {
      try watcher.waitForReplug(timeoutSeconds: 1)
    }
  }
}
