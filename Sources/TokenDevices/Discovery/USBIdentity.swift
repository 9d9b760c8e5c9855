import FoundationEssentials
import Glibc
import Platform

/// The USB device a kernel device belongs to, from sysfs: a hidraw node (`hidraw0`) or a USB interface
/// (`1-1:1.1`, the name udev's `%k` gives) leads to the USB device (`1-1`) with its identity and interfaces. One
/// physical token raises several udev events (hidraw + CCID interface, add + bind); they all lead here.
public struct USBIdentity: Equatable, Sendable {
  /// sysfs name of the USB device: bus number, then port path (`1-1`, `3-2.4`).
  public var busPath: String
  public var vendorID: String
  public var productID: String
  /// iSerialNumber, when the device has one.
  public var serial: String?
  /// iProduct (e.g. "YubiKey OTP+FIDO+CCID"), when the device has one.
  public var product: String?
  /// bInterfaceClass of each interface, in interface order (03 HID, 0b CCID).
  public var interfaceClasses: [String]
  /// hidraw nodes of the device (`hidraw0`), sorted.
  public var hidraw: [String]
  /// The bus number and device address the kernel gave it (sysfs `busnum`, `devnum`), when it says.
  public var busNumber: Int? = nil
  public var deviceAddress: Int? = nil

  public var hasCCID: Bool { interfaceClasses.contains("0b") }

  /// A stable name for the physical token: VID:PID and serial when it has one (survives replugs into other
  /// ports), else VID:PID and the port path. Safe as a file name: the serial (the device's own text) keeps only
  /// its letters, digits and `-`, scalar by scalar (a Character is not enough: one whose first scalar is a
  /// letter can carry a `/`, e.g. U+0D4E, a prepended letter, before `/`).
  public var key: String {
    let base = "usb-\(vendorID)-\(productID)-"
    let tail =
      serial.map { s in
        var kept = String.UnicodeScalarView()
        kept.append(
          contentsOf: s.unicodeScalars.filter {
            $0.properties.isAlphabetic || $0.properties.numericType != nil || $0 == "-"
          })
        return String(kept)
      } ?? "port-\(busPath)"
    return base + (tail.isEmpty ? "port-\(busPath)" : Self.bounded(tail))
  }

  /// `tail` when it has at most 96 bytes, else its first 64 bytes (whole scalars) and a digest of all of it (FNV-1a,
  /// 64 bits): a file name has at most 255 bytes, and a serial of 126 two-byte letters made the lock file's name
  /// longer than that (found by the udev-name fuzz target). Real serials are far shorter and keep their key.
  static func bounded(_ tail: String) -> String {
    guard tail.utf8.count > 96 else { return tail }
    var head = String.UnicodeScalarView()
    var bytes = 0
    for scalar in tail.unicodeScalars {
      bytes += String(scalar).utf8.count
      if bytes > 64 { break }
      head.append(scalar)
    }
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in tail.utf8 { hash = (hash ^ UInt64(b)) &* 0x100_0000_01b3 }
    return String(head) + "-" + Hex.digits(hash, width: 16)
  }

  public enum LookupError: Error, Equatable, Sendable {
    /// No such device in sysfs (unplugged already, or a wrong name).
    case noDevice(String)
    /// The device is not on USB (e.g. a Bluetooth or virtual HID device).
    case notUSB(String)
  }

  /// `name` as udev's `%k`: `hidrawN` or a USB interface/device name. `sys` is the sysfs root (tests).
  public static func of(_ name: String, sys: String = "/sys") throws(LookupError) -> USBIdentity {
    // A NUL would end the path early in the C calls below: `1-1\0x` is no name of 1-1.
    guard !name.isEmpty, !name.contains("/"), !name.utf8.contains(0), name != ".", name != ".." else {
      throw .noDevice(name)
    }
    let start = name.hasPrefix("hidraw") ? "\(sys)/class/hidraw/\(name)" : "\(sys)/bus/usb/devices/\(name)"
    guard let real = realPath(start) else { throw .noDevice(name) }
    // Walk up to the first directory that is a USB device (it has idVendor and no bInterfaceClass).
    var dir = real
    while dir.count > 1 {
      if exists("\(dir)/idVendor") && !exists("\(dir)/bInterfaceClass") { return try read(dir, name: name) }
      dir = PathString.deletingLast(dir)
    }
    throw .notUSB(name)
  }

  /// The USB device behind a PC/SC reader: pcscd (libccid) names a reader "Name [Interface] (USB serial) 00 00",
  /// so the device with a CCID interface whose serial is in the name. Nil when none or several match.
  public static func forReader(_ reader: String, sys: String = "/sys") -> USBIdentity? {
    forReader(reader, among: ccidDevices(sys: sys))
  }

  /// The USB devices with a CCID interface and a serial number: what `forReader` matches reader names against.
  static func ccidDevices(sys: String = "/sys") -> [USBIdentity] {
    let devices = Directory.names("\(sys)/bus/usb/devices") ?? []
    return devices.filter { !$0.contains(":") }.compactMap { name -> USBIdentity? in
      guard let id = try? of(name, sys: sys), id.hasCCID, id.serial != nil else { return nil }
      return id
    }
  }

  /// True when a PC/SC reader's `SCARD_ATTR_CHANNEL_ID` (`PCSCContext.channelID`) names this USB device: channel
  /// type 0x0020 (USB) and, as libccid fills it, bus number << 8 | device address. What a reader of a device
  /// without a serial number is matched by: its name says nothing that tells two such devices apart.
  public func isChannel(_ channelID: UInt32) -> Bool {
    guard let busNumber, let deviceAddress, channelID >> 16 == 0x0020 else { return false }
    return Int((channelID >> 8) & 0xFF) == busNumber && Int(channelID & 0xFF) == deviceAddress
  }

  static func forReader(_ reader: String, among devices: [USBIdentity]) -> USBIdentity? {
    let matches = devices.filter { reader.contains("(\($0.serial ?? ""))") }
    return matches.count == 1 ? matches[0] : nil
  }

  /// Marks the tokens that share a USB device: `usbDevice` on each, `sameDeviceAs` with the others' ids.
  public static func group(_ tokens: [TokenInfo], sys: String = "/sys") -> [TokenInfo] {
    var out = tokens
    // Read once for all the cards (sysfs is walked device by device: per card, that was cards × devices walks).
    var ccid: [USBIdentity]?
    for i in out.indices {
      let t = out[i]
      let node = String(t.id.dropFirst("fido2-".count))
      if t.kind == .fido2, t.id.hasPrefix("fido2-hidraw"), node.dropFirst(6).allSatisfy(\.isNumber) {
        out[i].usbDevice = (try? of(node, sys: sys))?.key
      } else if let reader = t.reader {
        if ccid == nil { ccid = ccidDevices(sys: sys) }
        out[i].usbDevice = forReader(reader, among: ccid ?? [])?.key
      }
    }
    for i in out.indices {
      guard let key = out[i].usbDevice else { continue }
      let others = out.filter { $0.usbDevice == key && $0.id != out[i].id }.map(\.id)
      out[i].sameDeviceAs = others.isEmpty ? nil : others
    }
    return out
  }

  /// One entry per physical token: tokens that share a USB device (`group` first) become one, named by the PIV
  /// card's id (it survives a replug; a hidraw number does not), with every id in `ids`, both kinds, the union of
  /// the capabilities, the FIDO2 key's getInfo in `fido2` and its PIN in `fido2PIN`.
  public static func merge(_ grouped: [TokenInfo]) -> [TokenInfo] {
    var out: [TokenInfo] = []
    var done = Set<String>()
    for t in grouped {
      guard let key = t.usbDevice, t.sameDeviceAs != nil else {
        out.append(t)
        continue
      }
      guard done.insert(key).inserted else { continue }
      let parts = grouped.filter { $0.usbDevice == key }
      var one = parts.first(where: { $0.kind == .piv }) ?? parts[0]
      one.ids = [one.id] + parts.map(\.id).filter { $0 != one.id }
      one.kinds = [one.kind] + parts.map(\.kind).filter { $0 != one.kind }
      for p in parts where p.id != one.id {
        one.capabilities += p.capabilities.filter { !one.capabilities.contains($0) }
        if p.kind == .fido2 {
          one.fido2 = p.fido2
          one.fido2PIN = p.pin
        }
      }
      one.sameDeviceAs = nil
      out.append(one)
    }
    return out
  }

  static func read(_ dir: String, name: String) throws(LookupError) -> USBIdentity {
    guard let vendor = attribute(dir, "idVendor"), let product = attribute(dir, "idProduct") else {
      throw .noDevice(name)
    }
    let busPath = PathString.last(dir)
    let entries = Directory.names(dir) ?? []
    let interfaces = entries.filter { $0.hasPrefix(busPath + ":") }.sorted()
    var hidraw: [String] = []
    for i in interfaces {
      // <interface>/<hid device>/hidraw/hidrawN
      for hid in Directory.names("\(dir)/\(i)") ?? [] where hid.contains(":") {
        hidraw += (Directory.names("\(dir)/\(i)/\(hid)/hidraw") ?? []).filter {
          $0.hasPrefix("hidraw")
        }
      }
    }
    return USBIdentity(
      busPath: busPath, vendorID: vendor, productID: product, serial: attribute(dir, "serial"),
      product: attribute(dir, "product"),
      interfaceClasses: interfaces.compactMap { attribute("\(dir)/\($0)", "bInterfaceClass") },
      hidraw: hidraw.sorted(), busNumber: attribute(dir, "busnum").flatMap { Int($0) },
      deviceAddress: attribute(dir, "devnum").flatMap { Int($0) })
  }

  static func attribute(_ dir: String, _ name: String) -> String? {
    // Our reader, not FileManager.contents: that one leaks its 4 KiB read buffer per call (LeakSanitizer, in the
    // udev-name fuzz target; swift-foundation of Swift 6.3.1).
    guard let data = FileIO.read(path: "\(dir)/\(name)", limit: 256), data.count < 256 else { return nil }
    let text = Trim.whitespace(String(decoding: data, as: UTF8.self))
    return text.isEmpty ? nil : text
  }

  static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

  static func realPath(_ path: String) -> String? {
    guard let r = realpath(path, nil) else { return nil }
    defer { free(r) }
    return String(cString: r)
  }
}
