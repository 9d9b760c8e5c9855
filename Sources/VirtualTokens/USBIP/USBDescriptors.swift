/// USB descriptors (USB 2.0 §9.6, HID 1.11 §6.2, CCID 1.1 §5.1) of the virtual tokens. Full speed, one
/// configuration; what each value is and why: HardwareNotes.md "Token lab: USB descriptors".
public enum USBDescriptors {
  /// pid.codes test VID:PID. libccid drives only listed ids: the lab adds this one to the guest's Info.plist.
  public static let vendorID: UInt16 = 0x1209
  public static let productID: UInt16 = 0x0001
  static let bcdDevice: UInt16 = 0x0100

  static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
  static func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * UInt32($0))) & 0xFF) } }

  /// `serial`: false for a device without iSerialNumber (index 0), as some CCID readers and tokens are.
  static func device(serial: Bool = true) -> [UInt8] {
    [18, 0x01] + le16(0x0200) + [0x00, 0x00, 0x00, 64] + le16(vendorID) + le16(productID) + le16(bcdDevice)
      + [1, 2, serial ? 3 : 0, 1]  // iManufacturer, iProduct, iSerialNumber, bNumConfigurations
  }

  /// Usage page 0xF1D0 (FIDO Alliance), usage 1 (CTAPHID), 64-byte input and output reports, no report ID.
  static let fidoReport: [UInt8] = [
    0x06, 0xD0, 0xF1, 0x09, 0x01, 0xA1, 0x01,
    0x09, 0x20, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, 0x40, 0x81, 0x02,
    0x09, 0x21, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, 0x40, 0x91, 0x02,
    0xC0,
  ]

  static func hid() -> [UInt8] { [9, 0x21] + le16(0x0111) + [0x00, 1, 0x22] + le16(UInt16(fidoReport.count)) }

  static func fidoInterface(_ number: UInt8) -> [UInt8] {
    [9, 0x04, number, 0, 2, 0x03, 0x00, 0x00, 4]  // HID, no boot protocol, iInterface 4 "FIDO"
      + hid()
      + [7, 0x05, 0x80 | FIDOHIDFunction.endpoint, 0x03] + le16(64) + [5]  // interrupt IN
      + [7, 0x05, FIDOHIDFunction.endpoint, 0x03] + le16(64) + [5]  // interrupt OUT
  }

  /// CCID class descriptor: T=1, automatic everything (ATR, activation, voltage, clock, baud, parameters, PPS),
  /// extended APDU level exchange (dwFeatures 0x000400FE), messages up to 3072 bytes, one slot.
  static func ccidClass() -> [UInt8] {
    [54, 0x21] + le16(0x0110) + [0x00, 0x07] + le32(2) + le32(4000) + le32(4000) + [0] + le32(9600) + le32(9600)
      + [0] + le32(254) + le32(0) + le32(0) + le32(0x0004_00FE) + le32(UInt32(CCIDFunction.maxMessage))
      + [0xFF, 0xFF] + le16(0) + [0x00, 1]
  }

  static func ccidInterface(_ number: UInt8) -> [UInt8] {
    [9, 0x04, number, 0, 3, 0x0B, 0x00, 0x00, 5]  // smart card, iInterface 5 "CCID"
      + ccidClass()
      + [7, 0x05, CCIDFunction.bulkOut, 0x02] + le16(64) + [0]
      + [7, 0x05, 0x80 | CCIDFunction.bulkIn, 0x02] + le16(64) + [0]
      + [7, 0x05, 0x80 | CCIDFunction.interruptIn, 0x03] + le16(8) + [32]
  }

  static func configuration(interfaces: [[UInt8]]) -> [UInt8] {
    let body = interfaces.flatMap { $0 }
    return [9, 0x02] + le16(UInt16(9 + body.count)) + [UInt8(interfaces.count), 1, 0, 0x80, 15] + body
  }

  static func string(_ s: String) -> [UInt8] {
    let units = Array(s.utf16).flatMap { le16($0) }
    return [UInt8(2 + units.count), 0x03] + units
  }
}
