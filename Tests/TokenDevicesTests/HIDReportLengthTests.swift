import Foundation
import Testing

@testable import TokenDevices

/// Our hidraw I/O frames 64-byte reports, as libfido2 does with custom I/O: a node whose descriptor says
/// otherwise is refused with a sentence, not misframed.
struct HIDReportLengthTests {
  /// The CTAPHID descriptor with `count`-byte input and output reports (Report Size 8, Report Count `count`).
  static func ctaphid(input: UInt8 = 0x40, output: UInt8 = 0x40) -> [UInt8] {
    [
      0x06, 0xD0, 0xF1, 0x09, 0x01, 0xA1, 0x01, 0x09, 0x20, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, input,
      0x81, 0x02, 0x09, 0x21, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, output, 0x91, 0x02, 0xC0,
    ]
  }

  @Test func lengthsAreReadFromTheDescriptor() throws {
    let standard = try #require(HIDReportDescriptor.reportLengths(Self.ctaphid()))
    #expect(standard.input == 64 && standard.output == 64)
    let small = try #require(HIDReportDescriptor.reportLengths(Self.ctaphid(input: 0x20, output: 0x30)))
    #expect(small.input == 32 && small.output == 48)
    // 16-bit fields: Report Size 16, Report Count 32 = 64 bytes.
    let wide = try #require(HIDReportDescriptor.reportLengths([0x75, 0x10, 0x95, 0x20, 0x81, 0x02, 0x91, 0x02]))
    #expect(wide.input == 64 && wide.output == 64)
    let none = try #require(HIDReportDescriptor.reportLengths([0x06, 0xD0, 0xF1]))
    #expect(none.input == nil && none.output == nil)
    #expect(HIDReportDescriptor.reportLengths([0x75, 0x08, 0x96, 0x40]) == nil)  // a truncated item
  }

  @Test func aNodeWithOtherReportLengthsIsRefused() throws {
    let fake = FakeSysfs()
    defer { fake.remove() }
    let sys = fake.path
    try fake.hidraw("hidraw0", Self.ctaphid())
    try fake.hidraw("hidraw1", Self.ctaphid(input: 0x20, output: 0x20))
    #expect(FIDO2Session.reportLengthRefusal("/dev/hidraw0", sys: sys) == nil)
    #expect(
      FIDO2Session.reportLengthRefusal("/dev/hidraw1", sys: sys)
        == .unsupported(
          "64-byte FIDO HID reports (its HID descriptor declares 32-byte input and 32-byte output reports)"))
    #expect(FIDO2Session.reportLengthRefusal("/dev/hidraw7", sys: sys) == nil)  // not described: 64, as libfido2
  }
}
