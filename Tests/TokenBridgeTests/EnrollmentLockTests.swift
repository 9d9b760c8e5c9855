import Foundation
import Testing

@testable import TokenBridge

/// The enrollment lock directory gets the data directory's checks (`FileSafety`). A lock directory that is a symbolic
/// link, another user's or writable by others is refused with the local-data message, and nothing is made through it.
/// The USB device is a serial-less CCID device in a sysfs tree of the test's own.
@Suite struct EnrollmentLockTests {
  let root = FileManager.default.temporaryDirectory.appendingPathComponent("enroll-lock-\(UUID().uuidString)")
  var sys: String { root.appendingPathComponent("sys").path }

  init() throws {
    let fm = FileManager.default
    let device = "\(sys)/devices/platform/vhci_hcd.0/usb1/1-2"
    try fm.createDirectory(atPath: "\(device)/1-2:1.0", withIntermediateDirectories: true)
    try "1209\n".write(toFile: "\(device)/idVendor", atomically: true, encoding: .utf8)
    try "0001\n".write(toFile: "\(device)/idProduct", atomically: true, encoding: .utf8)
    try "0b\n".write(toFile: "\(device)/1-2:1.0/bInterfaceClass", atomically: true, encoding: .utf8)
    try fm.createDirectory(atPath: "\(sys)/bus/usb/devices", withIntermediateDirectories: true)
    try fm.createSymbolicLink(atPath: "\(sys)/bus/usb/devices/1-2:1.0", withDestinationPath: "\(device)/1-2:1.0")
  }

  func cleanUp() { try? FileManager.default.removeItem(at: root) }

  /// Runs `decide` with `lockDirectory`; the message it fails with (nil: it did not fail).
  func decide(lockDirectory: URL) throws -> String? {
    let data = root.appendingPathComponent("data")
    var e = try Enrollment(
      device: "1-2:1.0", settings: EnrollmentSettings(server: "https://rp.example", onInsert: .auto),
      dataDirectory: data, lockDirectory: lockDirectory, sys: sys)
    do {
      _ = try e.decide(pcscWaitSeconds: 0.1)
      return nil
    } catch {
      return ErrorReport(error).message
    }
  }

  func contents(_ url: URL) -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? [] }

  @Test func aSymlinkedLockDirectoryIsRefusedAndNothingIsWrittenThroughIt() throws {
    defer { cleanUp() }
    let elsewhere = root.appendingPathComponent("elsewhere")
    try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
    let lock = root.appendingPathComponent("run-tokenbridge")
    try FileManager.default.createSymbolicLink(at: lock, withDestinationURL: elsewhere)
    let message = try decide(lockDirectory: lock)
    #expect(message?.contains("\(lock.path) is a symbolic link, so it is not used") == true, "\(message ?? "-")")
    #expect(contents(elsewhere).isEmpty)
  }

  @Test func aLockDirectoryWritableByOthersIsRefused() throws {
    defer { cleanUp() }
    let lock = root.appendingPathComponent("run-tokenbridge")
    try FileManager.default.createDirectory(at: lock, withIntermediateDirectories: true)
    chmod(lock.path, 0o777)
    let message = try decide(lockDirectory: lock)
    #expect(message?.contains("is writable by other users (mode 777)") == true, "\(message ?? "-")")
    #expect(contents(lock).isEmpty)
  }

  @Test(.enabled(if: geteuid() == 0, "only root can give a directory to another user"))
  func aLockDirectoryOfAnotherUserIsRefused() throws {
    defer { cleanUp() }
    let lock = root.appendingPathComponent("run-tokenbridge")
    try FileManager.default.createDirectory(at: lock, withIntermediateDirectories: true)
    chmod(lock.path, 0o700)
    chown(lock.path, 4242, 4242)
    let message = try decide(lockDirectory: lock)
    #expect(message?.contains("belongs to another user (uid 4242)") == true, "\(message ?? "-")")
    #expect(contents(lock).isEmpty)
  }

  @Test func aSymlinkedLockFileIsRefused() throws {
    defer { cleanUp() }
    let lock = root.appendingPathComponent("run-tokenbridge")
    try FileManager.default.createDirectory(at: lock, withIntermediateDirectories: true)
    chmod(lock.path, 0o700)
    let victim = root.appendingPathComponent("victim")
    try FileManager.default.createSymbolicLink(
      at: lock.appendingPathComponent("enroll-usb-1209-0001-port-1-2.lock"), withDestinationURL: victim)
    let message = try decide(lockDirectory: lock)
    #expect(message?.contains("is a symbolic link, so it is not used") == true, "\(message ?? "-")")
    #expect(!FileManager.default.fileExists(atPath: victim.path))
  }

  @Test func aSafeLockDirectoryIsMade0700WithTheLockIn0600() throws {
    defer { cleanUp() }
    let lock = root.appendingPathComponent("run").appendingPathComponent("tokenbridge")
    // Fails later: the device has no serial and this sysfs no busnum/devnum, so no reader can be matched to it (a
    // serial-less device's reader is matched by its USB bus and address only); the lock was taken before.
    let message = try decide(lockDirectory: lock)
    #expect(message?.contains("sysfs gives no bus number and address to match its reader by") == true)
    var st = stat()
    #expect(lstat(lock.path, &st) == 0 && st.st_mode & 0o7777 == 0o700)
    #expect(lstat(lock.appendingPathComponent("enroll-usb-1209-0001-port-1-2.lock").path, &st) == 0)
    #expect(st.st_mode & 0o7777 == 0o600 && st.st_mode & S_IFMT == S_IFREG)
  }
}
