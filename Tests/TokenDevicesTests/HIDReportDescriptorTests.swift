import Foundation
import Testing

@testable import TokenDevices

/// The FIDO usage-page test on HID report descriptors, which decides whether a command loads libfido2 at all.
struct HIDReportDescriptorTests {
  /// The CTAPHID descriptor (FIDO Alliance page, usage 1, 64-byte input and output reports), as keys and our
  /// virtual key declare it.
  static let ctaphid: [UInt8] = [
    0x06, 0xD0, 0xF1, 0x09, 0x01, 0xA1, 0x01, 0x09, 0x20, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, 0x40,
    0x81, 0x02, 0x09, 0x21, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, 0x40, 0x91, 0x02, 0xC0,
  ]
  /// A boot keyboard's start: Generic Desktop, Keyboard, Keyboard/Keypad page.
  static let keyboard: [UInt8] = [0x05, 0x01, 0x09, 0x06, 0xA1, 0x01, 0x05, 0x07, 0x19, 0xE0, 0x29, 0xE7, 0xC0]

  @Test func fidoDescriptorsAreRecognized() {
    #expect(HIDReportDescriptor.declaresFIDOUsagePage(Self.ctaphid))
    // After another collection (a composite descriptor), not only in the first bytes.
    #expect(HIDReportDescriptor.declaresFIDOUsagePage(Self.keyboard + Self.ctaphid))
    // The same page as a 4-byte item.
    #expect(HIDReportDescriptor.declaresFIDOUsagePage([0x07, 0xD0, 0xF1, 0x00, 0x00, 0x09, 0x01]))
    // After a long item, which is skipped whole.
    #expect(HIDReportDescriptor.declaresFIDOUsagePage([0xFE, 0x02, 0x10, 0xAA, 0xBB, 0x06, 0xD0, 0xF1]))
  }

  @Test func otherDescriptorsAreNot() {
    #expect(!HIDReportDescriptor.declaresFIDOUsagePage(Self.keyboard))
    #expect(!HIDReportDescriptor.declaresFIDOUsagePage([UInt8]()))
    // The bytes 06 D0 F1 inside another item's data (a 4-byte Logical Maximum) are not a usage page.
    #expect(!HIDReportDescriptor.declaresFIDOUsagePage([0x27, 0x06, 0xD0, 0xF1, 0x00, 0x09, 0x01]))
    // A truncated usage page item, and another page.
    #expect(!HIDReportDescriptor.declaresFIDOUsagePage([0x06, 0xD0]))
    #expect(!HIDReportDescriptor.declaresFIDOUsagePage([0x06, 0xD1, 0xF1]))
  }

  @Test func nodesAreReadFromSysfs() throws {
    let fake = FakeSysfs()
    defer { fake.remove() }
    let sys = fake.path
    #expect(!HIDReportDescriptor.anyFIDONode(sys: sys))  // no hidraw class at all
    try fake.hidraw("hidraw0", Self.keyboard)
    #expect(!HIDReportDescriptor.anyFIDONode(sys: sys))
    try fake.hidraw("hidraw1", Self.ctaphid)
    #expect(HIDReportDescriptor.anyFIDONode(sys: sys))
  }
}
