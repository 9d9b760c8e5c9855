import Foundation
import Testing

@testable import TokenDevices

/// The hidraw nodes a listing reads without libfido2 must be the ones libfido2's manifest lists (so `tokens` shows
/// what the FIDO2 commands can open): its usage-page rule and its USB test, from a sysfs tree laid out as the
/// kernel does.
struct FIDO2ListingNodesTests {
  static let ctaphid = HIDReportDescriptorTests.ctaphid
  static let keyboard = HIDReportDescriptorTests.keyboard

  @Test func theLastUsagePageDecidesAsInLibfido2() {
    #expect(HIDReportDescriptor.lastUsagePageIsFIDO(Self.ctaphid))
    #expect(HIDReportDescriptor.lastUsagePageIsFIDO(Self.keyboard + Self.ctaphid))
    // FIDO first, another page after it: libfido2 takes the last page, so this is not a key to it.
    #expect(!HIDReportDescriptor.lastUsagePageIsFIDO(Self.ctaphid + Self.keyboard))
    #expect(!HIDReportDescriptor.lastUsagePageIsFIDO(Self.keyboard))
    #expect(!HIDReportDescriptor.lastUsagePageIsFIDO([UInt8]()))
    // Where libfido2's walk gives up: a long item, a 4-byte value, a truncated item.
    #expect(!HIDReportDescriptor.lastUsagePageIsFIDO([0xFE, 0x02, 0x10, 0xAA, 0xBB] + Self.ctaphid))
    #expect(!HIDReportDescriptor.lastUsagePageIsFIDO([0x27, 0xFF, 0xFF, 0x00, 0x00] + Self.ctaphid))
    #expect(!HIDReportDescriptor.lastUsagePageIsFIDO(Self.ctaphid + [0x06, 0xD0]))
  }

  @Test func nodesAreTheFIDOOnesOnUSBThatOpen() throws {
    let fm = FileManager.default
    let root = fm.temporaryDirectory.appendingPathComponent("listing-\(UUID().uuidString)").path
    defer { try? fm.removeItem(atPath: root) }
    let sys = "\(root)/sys"
    let dev = "\(root)/dev"
    func file(_ path: String, _ bytes: [UInt8]) throws {
      try fm.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
      try Data(bytes).write(to: URL(fileURLWithPath: path))
    }
    func text(_ path: String, _ s: String) throws { try file(path, Array((s + "\n").utf8)) }
    /// A HID device at `hid` with hidraw node `name`, linked from class/hidraw as the kernel links it.
    func node(_ name: String, hid: String, _ descriptor: [UInt8]) throws {
      try file("\(hid)/report_descriptor", descriptor)
      try fm.createDirectory(atPath: "\(hid)/hidraw/\(name)", withIntermediateDirectories: true)
      try fm.createSymbolicLink(atPath: "\(hid)/hidraw/\(name)/device", withDestinationPath: hid)
      try fm.createDirectory(atPath: "\(sys)/class/hidraw", withIntermediateDirectories: true)
      try fm.createSymbolicLink(atPath: "\(sys)/class/hidraw/\(name)", withDestinationPath: "\(hid)/hidraw/\(name)")
      try file("\(dev)/\(name)", [])
    }
    let usb = "\(sys)/devices/pci0000:00/usb1"
    try text("\(usb)/1-1/idVendor", "1050")
    try text("\(usb)/1-1/idProduct", "0407")
    try text("\(usb)/1-1/product", "YubiKey OTP+FIDO+CCID")
    try text("\(usb)/1-1/1-1:1.1/bInterfaceClass", "03")
    try node("hidraw10", hid: "\(usb)/1-1/1-1:1.1/0003:1050:0407.0002", Self.ctaphid)
    try text("\(usb)/1-1/1-1:1.0/bInterfaceClass", "03")
    try node("hidraw1", hid: "\(usb)/1-1/1-1:1.0/0003:1050:0407.0001", Self.keyboard)
    // FIDO first, then a keyboard collection: not a key to libfido2.
    try text("\(usb)/1-2/idVendor", "1209")
    try text("\(usb)/1-2/idProduct", "0001")
    try text("\(usb)/1-2/1-2:1.0/bInterfaceClass", "03")
    try node("hidraw2", hid: "\(usb)/1-2/1-2:1.0/0003:1209:0001.0003", Self.ctaphid + Self.keyboard)
    // A FIDO device without a product string, on USB.
    try text("\(usb)/1-3/idVendor", "1209")
    try text("\(usb)/1-3/idProduct", "0002")
    try text("\(usb)/1-3/1-3:1.0/bInterfaceClass", "03")
    try node("hidraw3", hid: "\(usb)/1-3/1-3:1.0/0003:1209:0002.0004", Self.ctaphid)
    // A FIDO device that is not on USB (uhid, as a Bluetooth key): libfido2 leaves it out.
    try node("hidraw4", hid: "\(sys)/devices/virtual/misc/uhid/0005:1209:0003.0005", Self.ctaphid)
    // A FIDO device on USB whose node is gone from /dev (unplugged meanwhile): nothing to open.
    try text("\(usb)/1-4/idVendor", "1209")
    try text("\(usb)/1-4/idProduct", "0004")
    try text("\(usb)/1-4/1-4:1.0/bInterfaceClass", "03")
    try node("hidraw5", hid: "\(usb)/1-4/1-4:1.0/0003:1209:0004.0006", Self.ctaphid)
    try fm.removeItem(atPath: "\(dev)/hidraw5")

    let nodes = HIDReportDescriptor.libfido2Nodes(sys: sys, dev: dev)
    #expect(nodes.map(\.node) == ["hidraw3", "hidraw10"])
    #expect(nodes.map(\.product) == [nil, "YubiKey OTP+FIDO+CCID"])
  }
}
