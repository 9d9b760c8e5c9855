import Foundation
import Testing
import TokenDevices

@testable import TokenBridge

/// Enrolling a CCID device without a USB serial never takes a card in another reader. Two virtual cards sit in the two
/// vpcd readers (neither on a USB device: vpcd gives no USB channel); the device is a serial-less CCID device of a
/// sysfs tree of the test's own. Before, the first reader with a card was taken and the decision remembered under the
/// new device; now it is refused, and nothing is remembered.
extension PIVThroughPCSCDTests {
  @Test func aSerialLessDeviceDoesNotTakeACardInAnotherReader() throws {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("enroll-reader-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: root) }
    let sys = root.appendingPathComponent("sys").path
    let device = "\(sys)/devices/platform/vhci_hcd.0/usb1/1-2"
    let fm = FileManager.default
    try fm.createDirectory(atPath: "\(device)/1-2:1.0", withIntermediateDirectories: true)
    for (name, value) in [("idVendor", "1209"), ("idProduct", "0001"), ("busnum", "1"), ("devnum", "7")] {
      try "\(value)\n".write(toFile: "\(device)/\(name)", atomically: true, encoding: .utf8)
    }
    try "0b\n".write(toFile: "\(device)/1-2:1.0/bInterfaceClass", atomically: true, encoding: .utf8)
    try fm.createDirectory(atPath: "\(sys)/bus/usb/devices", withIntermediateDirectories: true)
    try fm.createSymbolicLink(atPath: "\(sys)/bus/usb/devices/1-2:1.0", withDestinationPath: "\(device)/1-2:1.0")

    let first = try VirtualCard(slot: 0, serial: 4_200_061)
    let second = try VirtualCard(slot: 1, serial: 4_200_062)
    defer {
      first.stop()
      second.stop()
    }
    let data = root.appendingPathComponent("data")
    var enrollment = try Enrollment(
      device: "1-2:1.0", settings: EnrollmentSettings(server: "https://rp.example", onInsert: .auto),
      dataDirectory: data, lockDirectory: root.appendingPathComponent("run"), sys: sys)
    #expect(enrollment.identity.serial == nil)
    do {
      let outcome = try enrollment.decide(pcscWaitSeconds: 2)
      Issue.record("a card of another reader was taken: \(outcome)")
    } catch {
      let message = ErrorReport(error).message
      #expect(
        message.hasPrefix(
          "USB device 1-2 has no serial number, and no PC/SC reader with a card said it is on that device (USB bus "
            + "1, address 7) within 2 s"), "\(message)")
    }
    #expect(!fm.fileExists(atPath: data.appendingPathComponent("enrollment.json").path))
  }
}
