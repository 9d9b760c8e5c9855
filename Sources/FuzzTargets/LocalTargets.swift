import Foundation
import Prompts
import TokenBridge
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// The Assuan reader of `Pinentry`: the fuzz data (after a first byte that picks the dialog: GETPIN with or
/// without a repeat prompt and hint, tty options, or CONFIRM) is everything the pinentry program writes, over real
/// pipes (`Pinentry.channel`; no program is started). A PIN returned is at most 1000 bytes and is exactly the
/// percent-decoded D lines of one reply the program ended with OK; CONFIRM is true only if some reply was OK.
enum AssuanTarget {
  final class Pipes {
    var program: [UInt8] = []
    var ours: [Int32] = []
    func open() -> (reading: Int32, writing: Int32) {
      var out: [Int32] = [0, 0]
      var into: [Int32] = [0, 0]
      guard pipe(&out) == 0, pipe(&into) == 0 else { fatalError("fuzz: pipe: \(errno)") }
      // The program's whole output, then its end: it fits (inputs are capped below the pipe's 64 KiB).
      var off = 0
      while off < program.count {
        let n = program[off...].withUnsafeBytes { Glibc.write(out[1], $0.baseAddress, $0.count) }
        guard n > 0 else { fatalError("fuzz: write to pipe: \(errno)") }
        off += n
      }
      Glibc.close(out[1])
      ours.append(into[0])  // our commands go here; read end kept open (a closed one is the program gone)
      return (out[0], into[1])
    }
    func close() {
      for fd in ours { Glibc.close(fd) }
      ours = []
    }
  }

  static func run(_ data: [UInt8]) {
    var input = FuzzInput(data)
    let selector = input.byte()
    let pipes = Pipes()
    pipes.program = Array(input.rest().prefix(60_000))
    defer { pipes.close() }
    let pinentry = Pinentry(
      program: "fuzz-pinentry", timeout: 60, ttyName: selector & 4 != 0 ? "/dev/pts/0" : nil,
      ttyType: selector & 4 != 0 ? "xterm" : nil)
    pinentry.channel = { pipes.open() }
    let model = replies(pipes.program)
    if selector & 1 != 0 {
      if (try? pinentry.confirm(title: "t", description: "d", ok: "ok", cancel: "no")) == true {
        check(model.contains { $0.ok }, "CONFIRM true without an OK")
      }
      return
    }
    let dialog = PinentryDialog(
      title: "PIN", description: "Enter the PIN", prompt: "PIN",
      error: selector & 16 != 0 ? "Wrong PIN" : nil, repeatPrompt: selector & 2 != 0 ? "Again" : nil,
      repeatError: "They differ", constraintsHint: selector & 8 != 0 ? "6-8 digits" : nil)
    guard let secret = try? pinentry.getPin(dialog) else { return }
    check(secret.bytes.count <= 1000, "a PIN of \(secret.bytes.count) bytes")
    check(
      model.contains { $0.ok && $0.data == secret.bytes },
      "the PIN is not the data of one reply that ended with OK")
  }

  /// The program's output read plainly: complete lines (a final one without a newline is never read), one CR
  /// before the newline dropped; a reply is the lines up to an OK or ERR line, its data the D lines decoded
  /// (nil when one of them is not valid percent-encoding).
  static func replies(_ bytes: [UInt8]) -> [(ok: Bool, data: [UInt8]?)] {
    var out: [(ok: Bool, data: [UInt8]?)] = []
    var data: [UInt8]? = []
    var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
    lines.removeLast()
    func hex(_ c: UInt8) -> UInt8? { UInt8(String(UnicodeScalar(c)), radix: 16) }
    for var line in lines {
      if line.last == 0x0D { line = line.dropLast() }
      let l = Array(line)
      if l.starts(with: "OK".utf8) && (l.count == 2 || l[2] == 0x20) {
        out.append((true, data))
        data = []
      } else if l.starts(with: "ERR ".utf8) {
        out.append((false, data))
        data = []
      } else if l.starts(with: "D ".utf8) {
        var i = 2
        while i < l.count, data != nil {
          if l[i] == 0x25 {
            guard i + 2 < l.count, let h = hex(l[i + 1]), let lo = hex(l[i + 2]) else {
              data = nil
              break
            }
            data!.append(h << 4 | lo)
            i += 3
          } else {
            data!.append(l[i])
            i += 1
          }
        }
      }
    }
    return out
  }
}

/// The names `enroll --device` and `watch` take from udev (`%k`, an inotify name in /dev), looked up by
/// `USBIdentity.of` in a sysfs tree built once like the kernel's (a USB device with a serial, one without, a
/// non-USB hidraw node, a device whose serial the data writes). First byte even: the rest is the name; a name
/// found is exactly one of the tree's names and leads to one of its USB devices. Odd: the rest is the serial the
/// device reports; its key (`USBIdentity.key`, the name of its lock file and of its remembered decision) is one
/// file name, the same on each lookup.
enum UdevNameTarget {
  static let sys: String = {
    // In memory when there is /dev/shm: the serial is rewritten on every input.
    let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
    let root = "\(base)/tokenbridge-fuzz-sys-\(getpid())"
    let fm = FileManager.default
    try? fm.removeItem(atPath: root)
    atexit { try? FileManager.default.removeItem(atPath: UdevNameTarget.sys) }
    func dir(_ p: String) { try! fm.createDirectory(atPath: "\(root)/\(p)", withIntermediateDirectories: true) }
    func file(_ p: String, _ text: String) {
      _ = fm.createFile(atPath: "\(root)/\(p)", contents: Data((text + "\n").utf8))
    }
    func link(_ p: String, _ to: String) { try! fm.createSymbolicLink(atPath: "\(root)/\(p)", withDestinationPath: to) }
    let hub = "devices/pci0000:00/0000:00:14.0/usb1"
    dir(hub)
    file("\(hub)/idVendor", "1d6b")
    file("\(hub)/idProduct", "0002")
    dir("bus/usb/devices")
    dir("class/hidraw")
    link("bus/usb/devices/usb1", "../../../\(hub)")
    for (n, device) in ["1-1", "1-2", "1-3"].enumerated() {
      let d = "\(hub)/\(device)"
      dir(d)
      file("\(d)/idVendor", "1050")
      file("\(d)/idProduct", "0407")
      if device == "1-1" { file("\(d)/serial", "12345678") }
      file("\(d)/product", "YubiKey OTP+FIDO+CCID")
      link("bus/usb/devices/\(device)", "../../../\(d)")
      for (i, cls) in ["03", "0b"].enumerated() {
        let interface = "\(device):1.\(i)"
        dir("\(d)/\(interface)")
        file("\(d)/\(interface)/bInterfaceClass", cls)
        link("bus/usb/devices/\(interface)", "../../../\(d)/\(interface)")
        if cls == "03" {
          let node = "hidraw\(n)"
          dir("\(d)/\(interface)/0003:1050:0407.000\(n + 1)/hidraw/\(node)")
          link("class/hidraw/\(node)", "../../\(d)/\(interface)/0003:1050:0407.000\(n + 1)/hidraw/\(node)")
        }
      }
    }
    dir("devices/virtual/misc/uhid/0005:046D:B01A.0009/hidraw/hidraw9")
    link("class/hidraw/hidraw9", "../../devices/virtual/misc/uhid/0005:046D:B01A.0009/hidraw/hidraw9")
    return root
  }()
  static let names: Set<String> = [
    "usb1", "1-1", "1-2", "1-3", "1-1:1.0", "1-1:1.1", "1-2:1.0", "1-2:1.1", "1-3:1.0", "1-3:1.1", "hidraw0",
    "hidraw1", "hidraw2", "hidraw9",
  ]
  static let devices: Set<String> = ["usb1", "1-1", "1-2", "1-3"]
  static let serialPath = sys + "/devices/pci0000:00/0000:00:14.0/usb1/1-3/serial"

  static func isOneFileName(_ s: String) -> Bool {
    !s.isEmpty && s != "." && s != ".." && !s.utf8.contains(UInt8(ascii: "/")) && !s.utf8.contains(0)
      && s.utf8.count <= 255
  }

  static func run(_ data: [UInt8]) {
    guard let selector = data.first else { return }
    let body = Array(data.dropFirst())
    if selector & 1 == 0 {
      let name = String(decoding: body, as: UTF8.self)
      guard let id = try? USBIdentity.of(name, sys: sys) else { return }
      check(names.contains(name), "a name that is none of the tree's was found")
      check(devices.contains(id.busPath), "a name led to no USB device of the tree")
      check(isOneFileName("enroll-\(id.key).lock"), "a device key that is not one file name")
      return
    }
    let fd = open(serialPath, O_WRONLY | O_TRUNC | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return check(false, "cannot write the serial: \(errno)") }
    let serial = Array(body.prefix(300))
    let written = serial.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    Glibc.close(fd)
    check(written == serial.count, "the serial was not written whole")
    guard let id = try? USBIdentity.of("1-3:1.1", sys: sys) else { return check(false, "1-3 not found") }
    check(id.busPath == "1-3" && id.key.utf8.starts(with: "usb-1050-0407-".utf8), "1-3 read as another device")
    check(isOneFileName("enroll-\(id.key).lock"), "a serial made a key that is not one file name")
    check((try? USBIdentity.of("hidraw2", sys: sys))?.key == id.key, "the key differs between lookups")
  }
}
