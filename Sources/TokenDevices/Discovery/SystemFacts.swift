import FoundationEssentials
import Glibc
import Platform

/// Facts about this machine's token stack that `tokenbridge doctor` reports: library versions, hidraw devices
/// as the kernel and udev see them, and which processes hold smart cards. Reads sysfs and udev's database;
/// opens nothing.
public enum SystemFacts {
  /// libfido2's file as loaded (e.g. `libfido2.so.1.12.0`), from this process's memory map; nil when it cannot
  /// be loaded.
  public static var libfido2File: String? {
    guard (try? SystemLibrary.fido2.load()) != nil else { return nil }  // loaded at first use: load it now
    guard let maps = procFile("/proc/self/maps") else { return nil }
    for line in String(decoding: maps, as: UTF8.self).split(separator: "\n") {
      guard let slash = line.firstIndex(of: "/"), line.contains("libfido2") else { continue }
      let path = String(line[slash...])
      guard let real = realpath(path, nil) else { return PathString.last(path) }
      defer { free(real) }
      return PathString.last(String(cString: real))
    }
    return nil
  }

  /// pcscd's version from `pcscd --version` ("pcsc-lite version 1.9.9."), nil when there is no pcscd binary.
  public static var pcscdVersion: String? {
    for path in ["/usr/sbin/pcscd", "/usr/local/sbin/pcscd", "/sbin/pcscd"]
    where FileManager.default.isExecutableFile(atPath: path) {
      guard let p = Subprocess.start(path, ["--version"], stderr: .null, captureOutput: true) else { return nil }
      let data = p.readOutput()
      p.wait()
      let first = String(decoding: data.prefix(4096), as: UTF8.self).split(separator: "\n").first ?? ""
      return first.split(separator: " ").last.map { Trim.scalars($0) { $0 == "." } }
    }
    return nil
  }

  /// A hidraw node as the kernel and udev describe it.
  public struct Hidraw: Equatable, Sendable {
    public var name: String
    /// The HID report descriptor declares usage page 0xF1D0 (FIDO Alliance).
    public var fidoUsage: Bool
    /// udev marked it (60-fido-id.rules or our rules).
    public var udevFIDO: Bool
    /// This process may read and write the node.
    public var accessible: Bool
  }

  public static func hidraw(sys: String = "/sys", dev: String = "/dev", udev: String = "/run/udev/data") -> [Hidraw] {
    let names = (Directory.names("\(sys)/class/hidraw") ?? []).sorted()
    return names.map { name in
      let descriptor = procFile("\(sys)/class/hidraw/\(name)/device/report_descriptor")
      let fido = descriptor.map(HIDReportDescriptor.declaresFIDOUsagePage) ?? false
      let number = procFile("\(sys)/class/hidraw/\(name)/dev").map {
        Trim.whitespace(String(decoding: $0, as: UTF8.self))
      }
      let db = number.flatMap { FileManager.default.contents(atPath: "\(udev)/c\($0)") }.map {
        String(decoding: $0, as: UTF8.self)
      }
      let marked = db?.split(separator: "\n").contains("E:ID_FIDO_TOKEN=1") ?? false
      return Hidraw(
        name: name, fidoUsage: fido, udevFIDO: marked, accessible: access("\(dev)/\(name)", R_OK | W_OK) == 0)
    }
  }

  /// The processes that may hold a smart card: pcsc-lite clients (libpcsclite in their memory map) other than this
  /// one and pcscd, in this process's mount and network namespaces (another namespace's clients talk to another
  /// pcscd). Where a map cannot be read (another user's process), the known holders by name (gpg's scdaemon, …).
  /// A process merely named like a card tool that does not use PC/SC is not one.
  public static func cardHolders(proc: String = "/proc") -> [(pid: Int32, name: String)] {
    let known: Set<String> = ["scdaemon", "gpg-agent", "ykman", "opensc-tool", "pkcs11-tool", "p11-kit-server"]
    let me = getpid()
    let ownNamespaces = namespaces(proc, "self")
    var out: [(Int32, String)] = []
    for entry in Directory.names(proc) ?? [] {
      guard let pid = Int32(entry), pid != me, let comm = procFile("\(proc)/\(entry)/comm") else { continue }
      let name = Trim.whitespace(String(decoding: comm, as: UTF8.self))
      guard name != "pcscd", namespaces(proc, entry) == ownNamespaces else { continue }
      if let maps = procFile("\(proc)/\(entry)/maps") {
        if String(decoding: maps, as: UTF8.self).contains("libpcsclite") { out.append((pid, name)) }
      } else if known.contains(name) {
        out.append((pid, name))
      }
    }
    return out.sorted { $0.0 < $1.0 }
  }

  /// The mount and network namespaces of a process (nil parts where they cannot be read).
  static func namespaces(_ proc: String, _ pid: String) -> [String?] {
    ["mnt", "net"].map { ns in
      var buf = [CChar](repeating: 0, count: 256)
      let n = readlink("\(proc)/\(pid)/ns/\(ns)", &buf, buf.count - 1)
      return n > 0 ? String(decoding: buf.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }
  }

  /// A procfs/sysfs file (their size is 0 to stat, so read to the end; at most 4 MiB).
  static func procFile(_ path: String) -> [UInt8]? { FileIO.read(path: path, limit: 4 << 20) }
}
