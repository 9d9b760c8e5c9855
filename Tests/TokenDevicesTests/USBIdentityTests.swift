import Foundation
import Testing

@testable import TokenDevices

/// USB identity from a sysfs tree laid out as the kernel does (devices/, class/hidraw and bus/usb/devices links).
struct USBIdentityTests {
  let root: String

  init() throws {
    root = FileManager.default.temporaryDirectory.appendingPathComponent("sys-\(UUID().uuidString)").path
    let fm = FileManager.default
    func file(_ path: String, _ text: String) throws {
      try fm.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
      try (text + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }
    func link(_ path: String, _ target: String) throws {
      try fm.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
      try fm.createSymbolicLink(atPath: path, withDestinationPath: target)
    }
    // 1-1: composite (FIDO HID + CCID) with a serial; 1-2: CCID only, no serial.
    let d = "\(root)/devices/platform/vhci_hcd.0/usb1"
    try file("\(d)/1-1/idVendor", "1209")
    try file("\(d)/1-1/idProduct", "0001")
    try file("\(d)/1-1/serial", "20000001")
    try file("\(d)/1-1/1-1:1.0/bInterfaceClass", "03")
    try fm.createDirectory(
      atPath: "\(d)/1-1/1-1:1.0/0003:1209:0001.0001/hidraw/hidraw0", withIntermediateDirectories: true)
    try file("\(d)/1-1/1-1:1.1/bInterfaceClass", "0b")
    try file("\(d)/1-2/idVendor", "1209")
    try file("\(d)/1-2/idProduct", "0001")
    try file("\(d)/1-2/1-2:1.0/bInterfaceClass", "0b")
    try file("\(d)/1-2/busnum", "1")
    try file("\(d)/1-2/devnum", "3")
    try link("\(root)/class/hidraw/hidraw0", "\(d)/1-1/1-1:1.0/0003:1209:0001.0001/hidraw/hidraw0")
    for n in ["1-1", "1-1:1.0", "1-1:1.1"] {
      try link("\(root)/bus/usb/devices/\(n)", "\(d)/1-1" + (n == "1-1" ? "" : "/\(n)"))
    }
    for n in ["1-2", "1-2:1.0"] { try link("\(root)/bus/usb/devices/\(n)", "\(d)/1-2" + (n == "1-2" ? "" : "/\(n)")) }
  }

  @Test func theHidrawNodeAndTheCCIDInterfaceAreOneDevice() throws {
    let a = try USBIdentity.of("hidraw0", sys: root)
    let b = try USBIdentity.of("1-1:1.1", sys: root)
    #expect(a == b)
    #expect(a.key == "usb-1209-0001-20000001")
    #expect(a.interfaceClasses == ["03", "0b"] && a.hidraw == ["hidraw0"] && a.hasCCID)
  }

  @Test func withoutASerialTheKeyIsThePort() throws {
    let c = try USBIdentity.of("1-2:1.0", sys: root)
    #expect(c.key == "usb-1209-0001-port-1-2" && c.hidraw.isEmpty && c.hasCCID)
  }

  /// A reader of a serial-less device is matched by its SCARD_ATTR_CHANNEL_ID (libccid: 0x0020 USB, bus << 8 |
  /// address) against sysfs busnum/devnum, never by its name alone, so enrolling the device never takes a card in
  /// another reader.
  @Test func aSerialLessDeviceMatchesOnlyItsOwnUSBChannel() throws {
    let c = try USBIdentity.of("1-2:1.0", sys: root)
    #expect(c.busNumber == 1 && c.deviceAddress == 3)
    #expect(c.isChannel(0x0020_0103))
    #expect(!c.isChannel(0x0020_0104))  // another device on the same bus
    #expect(!c.isChannel(0x0020_0203))  // the same address on another bus
    #expect(!c.isChannel(0x0001_0103))  // not a USB channel (serial port type 1)
    #expect(!c.isChannel(0))
    // Without busnum/devnum in sysfs nothing matches.
    let a = try USBIdentity.of("1-1:1.1", sys: root)
    #expect(a.busNumber == nil && !a.isChannel(0x0020_0100) && !a.isChannel(0x0020_0000))
  }

  @Test func unknownAndUnsafeNamesAreRefused() {
    #expect(throws: USBIdentity.LookupError.noDevice("hidraw9")) { try USBIdentity.of("hidraw9", sys: root) }
    #expect(throws: USBIdentity.LookupError.noDevice("../1-1")) { try USBIdentity.of("../1-1", sys: root) }
    // A NUL ended the path early in realpath, so this was 1-1 (the udev-name fuzz target checks that a name
    // found is one of the tree's).
    #expect(throws: USBIdentity.LookupError.noDevice("1-1\u{0}x")) { try USBIdentity.of("1-1\u{0}x", sys: root) }
  }

  /// The serial is the device's own text: a Character whose first scalar is a letter (U+0D4E, a prepended
  /// letter) took the `/` after it into the key, which names the enrollment lock file.
  @Test func theKeyIsOneFileNameWhateverTheSerialSays() {
    var id = USBIdentity(
      busPath: "1-1", vendorID: "1209", productID: "0001", serial: "12\u{0D4E}/../x\u{0D4E}.\u{0D4E}.",
      product: nil, interfaceClasses: [], hidraw: [])
    #expect(id.key == "usb-1209-0001-12\u{0D4E}x\u{0D4E}\u{0D4E}")
    id.serial = "VW-01 \u{E9}\u{0}"
    #expect(id.key == "usb-1209-0001-VW-01\u{E9}")
    id.serial = "\u{0D4E}/"
    #expect(id.key == "usb-1209-0001-\u{0D4E}")
    // The udev-name fuzz target found that long serials make long keys: the longest a device can report (126
    // characters; two-byte letters here) made `enroll-KEY.lock` longer than a file name may be (255 bytes).
    id.serial = String(repeating: "\u{416}", count: 126)
    #expect(id.key.utf8.count <= 255 - "enroll-.lock".utf8.count)
    #expect(
      id.key.hasPrefix("usb-1209-0001-" + String(repeating: "\u{416}", count: 32) + "-") && id.key.utf8.count == 95)
    id.serial = String(repeating: "\u{416}", count: 125) + "\u{417}"
    #expect(
      id.key
        != USBIdentity(
          busPath: "1-1", vendorID: "1209", productID: "0001", serial: String(repeating: "\u{416}", count: 126),
          product: nil, interfaceClasses: [], hidraw: []
        ).key)
    id.serial = String(repeating: "7", count: 96)
    #expect(id.key == "usb-1209-0001-" + String(repeating: "7", count: 96))
  }

  @Test func tokensOnOneDeviceAreLinked() {
    func token(_ id: String, _ kind: TokenKind, reader: String? = nil) -> TokenInfo {
      TokenInfo(id: id, kind: kind, name: id, reader: reader, capabilities: [])
    }
    let grouped = USBIdentity.group(
      [
        token("piv-20000001", .piv, reader: "Virtual Token CCID [CCID] (20000001) 00 00"),
        token("fido2-hidraw0", .fido2), token("piv-5", .piv, reader: "Virtual PCD 00 00"),
      ], sys: root)
    #expect(grouped.map(\.usbDevice) == ["usb-1209-0001-20000001", "usb-1209-0001-20000001", nil])
    #expect(grouped.map(\.sameDeviceAs) == [["fido2-hidraw0"], ["piv-20000001"], nil])
  }

  @Test func aListingShowsOnePhysicalTokenOnce() {
    var key = TokenInfo(id: "fido2-hidraw0", kind: .fido2, name: "key", capabilities: ["fido2", "hmac-secret"])
    key.pin = PINStatus(kind: .pin, retriesLeft: 8)
    key.fido2 = FIDO2Info(
      versions: ["FIDO_2_1"], extensions: ["hmac-secret"], options: ["clientPin": true], pinProtocols: [2],
      minPINLength: 4, forcePINChange: false, aaguid: "00")
    // The key comes first (discovery's order), the card names the merged token: its id survives a replug.
    let merged = USBIdentity.merge(
      USBIdentity.group(
        [
          key,
          TokenInfo(
            id: "piv-20000001", kind: .piv, name: "card", reader: "Virtual Token CCID [CCID] (20000001) 00 00",
            capabilities: ["piv-sign", "fido2"]),
          TokenInfo(id: "piv-5", kind: .piv, name: "other", reader: "Virtual PCD 00 00", capabilities: []),
        ], sys: root))
    #expect(merged.map(\.id) == ["piv-20000001", "piv-5"])
    #expect(merged[0].ids == ["piv-20000001", "fido2-hidraw0"] && merged[0].kinds == [.piv, .fido2])
    #expect(merged[0].capabilities == ["piv-sign", "fido2", "hmac-secret"])
    #expect(merged[0].fido2PIN == key.pin && merged[0].fido2 == key.fido2 && merged[0].sameDeviceAs == nil)
    #expect(merged[1].ids == nil && merged[1].kinds == nil)
  }
}
