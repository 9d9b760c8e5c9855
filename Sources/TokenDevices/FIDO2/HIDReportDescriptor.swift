import FoundationEssentials
import Glibc
import Platform

/// HID report descriptors as the kernel shows them (sysfs `report_descriptor`, no device opened): whether one
/// declares the FIDO Alliance usage page 0xF1D0. libfido2's test for a FIDO device (hid_linux.c `is_fido`) is
/// that the last Usage Page item is 0xF1D0; this accepts the page anywhere, a superset, so a node libfido2 would
/// list is never missed (HardwareNotes.md).
public enum HIDReportDescriptor {
  /// A Usage Page item (global, tag 0) with the value 0xF1D0 anywhere among the short items; long items are
  /// skipped, a truncated item ends the walk.
  public static func declaresFIDOUsagePage(_ descriptor: some Collection<UInt8>) -> Bool {
    shortItems(descriptor).items.contains { $0.tag == 0x04 && $0.value == 0xF1D0 }
  }

  /// The short items in order: the prefix byte without its size bits (tag and type), and the little-endian value
  /// of its 0, 1, 2 or 4 data bytes. Long items are skipped. A truncated item ends the walk: `complete` is false
  /// and `items` holds those before it.
  static func shortItems(_ descriptor: some Collection<UInt8>) -> (items: [(tag: UInt8, value: Int)], complete: Bool) {
    let b = Array(descriptor)
    var items: [(tag: UInt8, value: Int)] = []
    var i = 0
    while i < b.count {
      let prefix = b[i]
      if prefix == 0xFE {  // long item: size, tag, data
        guard i + 1 < b.count else { return (items, false) }
        i += 3 + Int(b[i + 1])
        continue
      }
      let length = [0, 1, 2, 4][Int(prefix & 0x03)]
      guard i + 1 + length <= b.count else { return (items, false) }
      var value = 0
      for k in 0..<length { value |= Int(b[i + 1 + k]) << (8 * k) }
      items.append((prefix & 0xFC, value))
      i += 1 + length
    }
    return (items, true)
  }

  /// libfido2's own test (1.12: hid.c `fido_hid_get_usage`, hid_linux.c `is_fido`): the last Usage Page item is
  /// 0xF1D0. Its walk gives up — not FIDO — at a long item, a reserved item (prefix 0xF0–0xFF), a 4-byte value, or
  /// a truncated item.
  public static func lastUsagePageIsFIDO(_ descriptor: some Collection<UInt8>) -> Bool {
    let b = Array(descriptor)
    var (i, page) = (0, 0)
    while i < b.count {
      let prefix = b[i]
      i += 1
      let length = Int(prefix & 0x03)
      guard prefix & 0xF0 != 0xF0, length < 3, length <= b.count - i else { return false }
      var value = 0
      for k in 0..<length { value |= Int(b[i + k]) << (8 * k) }
      if prefix & 0xFC == 0x04 { page = value }
      i += length
    }
    return page == 0xF1D0
  }

  /// The hidraw nodes libfido2's manifest lists (hid_linux.c `copy_info`, 1.12), found as it finds them but from
  /// sysfs: the descriptor passes `lastUsagePageIsFIDO`, the device is on USB, and the node (`dev`/hidrawN) opens
  /// read-write; each with its USB device's product string (nil when it has none). In node order.
  public static func libfido2Nodes(sys: String = "/sys", dev: String = "/dev") -> [(node: String, product: String?)] {
    let names = (Directory.names("\(sys)/class/hidraw") ?? []).filter { name in
      SystemFacts.procFile("\(sys)/class/hidraw/\(name)/device/report_descriptor").map(lastUsagePageIsFIDO) ?? false
    }
    return names.sorted { $0.count != $1.count ? $0.count < $1.count : $0 < $1 }.compactMap { name in
      guard access("\(dev)/\(name)", R_OK | W_OK) == 0, let usb = try? USBIdentity.of(name, sys: sys) else {
        return nil
      }
      return (name, usb.product)
    }
  }

  /// Whether any hidraw node under `sys` declares the FIDO usage page: where none does, libfido2 (whose Linux
  /// manifest enumerates hidraw nodes only) finds no key, and a command need not load it to learn that.
  public static func anyFIDONode(sys: String = "/sys") -> Bool {
    (Directory.names("\(sys)/class/hidraw") ?? []).contains { isFIDONode($0, sys: sys) }
  }

  /// How many hidraw nodes under `sys` declare the FIDO usage page.
  public static func fidoNodeCount(sys: String = "/sys") -> Int {
    (Directory.names("\(sys)/class/hidraw") ?? []).filter { isFIDONode($0, sys: sys) }.count
  }

  static func isFIDONode(_ name: String, sys: String) -> Bool {
    SystemFacts.procFile("\(sys)/class/hidraw/\(name)/device/report_descriptor").map(declaresFIDOUsagePage) ?? false
  }

  /// The input and output report lengths in bytes (Report Size × Report Count / 8 at the last Input and Output
  /// items); nil for each the descriptor does not declare, and for both when a short item is truncated. libfido2
  /// (hid.c `fido_hid_get_report_len`) reads only Report Count, assuming 8-bit fields; with custom I/O it frames
  /// 64-byte reports whatever the descriptor says, so a node with other lengths is refused (`FIDO2Session.open`).
  public static func reportLengths(_ descriptor: some Collection<UInt8>) -> (input: Int?, output: Int?)? {
    let (items, complete) = shortItems(descriptor)
    guard complete else { return nil }
    var (size, count) = (0, 0)
    var (input, output): (Int?, Int?) = (nil, nil)
    for item in items {
      switch item.tag {
      case 0x74: size = item.value  // Report Size (global)
      case 0x94: count = item.value  // Report Count (global)
      case 0x80: input = size * count / 8  // Input (main)
      case 0x90: output = size * count / 8  // Output (main)
      default: break
      }
    }
    return (input, output)
  }

  /// `reportLengths` of the hidraw node at `path` (/dev/hidrawN), from sysfs; nil when sysfs does not have it.
  static func reportLengths(ofNode path: String, sys: String = "/sys") -> (input: Int?, output: Int?)? {
    guard let name = path.split(separator: "/").last, name.hasPrefix("hidraw"),
      let bytes = SystemFacts.procFile("\(sys)/class/hidraw/\(name)/device/report_descriptor")
    else { return nil }
    return reportLengths(bytes)
  }
}
