import FoundationEssentials
import Glibc
import Platform
import TokenDevices
import UAFCore

/// `tokenbridge doctor`: every way the path from "plugged in" to "usable" is known to break, each check with
/// what it found and a one-line fix. Reads; never sends a PIN, never writes to a token.
public struct DoctorCheck: Equatable, Sendable, Encodable {
  public var name: String
  public var ok: Bool
  public var detail: String
  public var fix: String?
}

public struct Doctor {
  /// The rules this binary expects (Tools/gen-udev writes the same number into the rules file).
  public static let rulesVersion = 2
  public var sys = "/sys"
  public var dev = "/dev"
  public var udevData = "/run/udev/data"
  public var rulesDirectories = [
    "/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d",
  ]
  public var unitDirectories: [String] = {
    let home = Configuration.directory.deletingLastPathComponent().appendingPathComponent("systemd/user").path
    return [home, "/etc/systemd/user", "/usr/lib/systemd/user", "/lib/systemd/user"]
  }()

  /// Where the session bus looks for activation files ($XDG_DATA_HOME, then /usr/local/share and /usr/share).
  public var dbusServiceDirectories: [String] = {
    let home = Configuration.dataDirectory.deletingLastPathComponent().appendingPathComponent("dbus-1/services").path
    return [home, "/usr/local/share/dbus-1/services", "/usr/share/dbus-1/services"]
  }()
  /// This binary (what the activation file must run).
  public var binary: String? = {
    var buf = [CChar](repeating: 0, count: 4097)
    let n = readlink("/proc/self/exe", &buf, 4096)
    return n > 0 ? String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
  }()

  public init() {}

  public func run() -> [DoctorCheck] {
    var checks: [DoctorCheck] = []
    checks += pcsc()
    checks += fido()
    checks.append(rules())
    let config: Configuration?
    do {
      config = try Configuration.load()
      checks.append(.init(name: "configuration", ok: true, detail: "\(Configuration.file.path): valid or absent"))
    } catch {
      config = nil
      checks.append(
        .init(
          name: "configuration", ok: false, detail: ErrorReport(OperationError.configuration(error)).message,
          fix: "edit \(Configuration.file.path) as the message says"))
    }
    checks.append(unit(enrollConfigured: config?.enroll != nil))
    checks.append(desktopService())
    checks.append(dataDirectory())
    return checks
  }

  func pcsc() -> [DoctorCheck] {
    let version = SystemFacts.pcscdVersion.map { "pcsc-lite \($0)" } ?? "pcscd binary not found"
    let context: PCSCContext
    do { context = try PCSCContext() } catch .serviceUnresponsive {
      return [
        .init(
          name: "pcscd", ok: false, detail: "does not answer: it runs but is stopped or hung (\(version))",
          fix: "restart it: systemctl restart pcscd")
      ]
    } catch {
      return [
        .init(
          name: "pcscd", ok: false, detail: "not reachable (\(version))",
          fix: "start it: systemctl start pcscd.socket (or install pcscd)")
      ]
    }
    var out: [DoctorCheck] = [.init(name: "pcscd", ok: true, detail: "reachable (\(version))")]
    let readers = (try? context.readers()) ?? []
    out.append(
      .init(
        name: "readers", ok: true,
        detail: readers.isEmpty
          ? "none (fine for FIDO2-only use)" : readers.map { UntrustedText.displayable($0) }.joined(separator: "; ")))
    for reader in readers where (try? context.readerState(reader).present) == true {
      do {
        _ = try context.connect(reader)
      } catch .pcsc(let status, _) where status == .sharingViolation {
        // A process names itself (prctl, exec -a): its name is untrusted text like any token's or server's.
        let holders = SystemFacts.cardHolders().map { "\(UntrustedText.displayable($0.name)) (pid \($0.pid))" }
        out.append(
          .init(
            name: "card access", ok: false,
            detail: "the card in \(UntrustedText.displayable(reader)) is held exclusively by another program"
              + (holders.isEmpty ? "" : ": running \(holders.joined(separator: ", "))"),
            fix: "end that program (gpgconf --kill scdaemon), or set pcsc-shared in ~/.gnupg/scdaemon.conf"))
      } catch {
        out.append(
          .init(
            name: "card access", ok: false,
            detail:
              "\(UntrustedText.displayable(reader)): \(ErrorReport(OperationError.token(.smartCard(error))).message)",
            fix: "re-insert the token; if it persists, restart pcscd"))
      }
    }
    return out
  }

  func fido() -> [DoctorCheck] {
    var out: [DoctorCheck] = [
      .init(name: "libfido2", ok: SystemFacts.libfido2File != nil, detail: SystemFacts.libfido2File ?? "not loaded")
    ]
    let nodes = SystemFacts.hidraw(sys: sys, dev: dev, udev: udevData)
    let seen = Set(FIDO2Session.list(virtualPaths: []).map { PathString.last($0.path) })
    for n in nodes where n.fidoUsage || n.udevFIDO {
      if !n.udevFIDO {
        out.append(
          .init(
            name: "udev", ok: false, detail: "\(n.name) is a FIDO key but udev did not mark it (ID_FIDO_TOKEN)",
            fix: "udev older than systemd 244: install tokenbridge's rules (Tools/install-udev), then re-plug"))
      }
      if !n.accessible {
        out.append(
          .init(
            name: "key access", ok: false, detail: "\(dev)/\(n.name): no read/write access for this user",
            fix: "Tools/install-udev, re-plug, and use the key from a session active on the seat (uaccess); "
              + "or add yourself to the plugdev group"))
      } else if !seen.contains(n.name) {
        out.append(
          .init(
            name: "libfido2", ok: false, detail: "\(n.name) is a FIDO key libfido2 does not list",
            fix: "check that the key answers (re-plug it); FIDO_DEBUG=1 tokenbridge tokens shows libfido2's view"))
      } else {
        out.append(.init(name: "key access", ok: true, detail: "\(dev)/\(n.name): usable"))
      }
    }
    return out
  }

  func rules() -> DoctorCheck {
    for dir in rulesDirectories {
      let path = "\(dir)/70-tokenbridge.rules"
      guard let data = FileManager.default.contents(atPath: path) else { continue }
      let text = String(decoding: data.prefix(65536), as: UTF8.self)
      let version = text.split(separator: "\n").lazy.compactMap { line -> Int? in
        line.hasPrefix("# tokenbridge-rules-version: ") ? Int(line.split(separator: " ").last ?? "") : nil
      }.first
      guard let version, version >= Self.rulesVersion else {
        return .init(
          name: "udev rules", ok: false,
          detail: "\(path) is older than this tokenbridge (version \(version.map(String.init) ?? "none"), "
            + "want \(Self.rulesVersion))",
          fix: "Tools/install-udev (then re-plug the token)")
      }
      return .init(name: "udev rules", ok: true, detail: "\(path) (version \(version))")
    }
    return .init(
      name: "udev rules", ok: false, detail: "70-tokenbridge.rules is not installed",
      fix: "Tools/install-udev (then re-plug the token)")
  }

  func unit(enrollConfigured: Bool) -> DoctorCheck {
    let found = unitDirectories.map { "\($0)/tokenbridge-enroll@.service" }.first {
      FileManager.default.fileExists(atPath: $0)
    }
    if let found { return .init(name: "enrollment unit", ok: true, detail: found) }
    return enrollConfigured
      ? .init(
        name: "enrollment unit", ok: false,
        detail: "\"enroll\" is configured but tokenbridge-enroll@.service is not installed",
        fix: "Tools/install-udev")
      : .init(name: "enrollment unit", ok: true, detail: "not installed (no \"enroll\" configured: not needed)")
  }

  /// The desktop service's activation file (`tokenbridge serve`, docs/dbus-api.md): the first the bus would read
  /// must run this binary, and its user unit (when it names one) must be installed beside it. Not installed: fine
  /// (only desktop apps need it).
  func desktopService() -> DoctorCheck {
    let name = "org.tokenbridge.TokenBridge1.service"
    guard
      let path = dbusServiceDirectories.map({ "\($0)/\(name)" }).first(where: {
        FileManager.default.fileExists(atPath: $0)
      })
    else {
      return .init(
        name: "desktop service", ok: true,
        detail: "not installed (only desktop apps using the D-Bus API need it; Tools/install-udev installs it)")
    }
    let text = FileIO.read(path: path, limit: 65536).map { String(decoding: $0, as: UTF8.self) } ?? ""
    let lines = text.split(separator: "\n").map { String($0) }
    let exec = lines.first { $0.hasPrefix("Exec=") }.map { String($0.dropFirst(5)) } ?? ""
    var program = exec.split(separator: " ").first.map(String.init) ?? ""
    if exec.hasPrefix("\""), let end = exec.dropFirst().firstIndex(of: "\"") {
      program = String(exec[exec.index(after: exec.startIndex)..<end])
    }
    let real = realPath(program)
    guard !program.isEmpty, FileManager.default.isExecutableFile(atPath: program) else {
      return .init(
        name: "desktop service", ok: false,
        detail: "\(path) runs \(program.isEmpty ? "nothing" : program), which is missing",
        fix: "Tools/install-udev (or reinstall the package)")
    }
    if let binary, real != realPath(binary) {
      return .init(
        name: "desktop service", ok: false, detail: "\(path) runs \(program), not this tokenbridge (\(binary))",
        fix: "Tools/install-udev --bin \(binary)")
    }
    if let unit = lines.first(where: { $0.hasPrefix("SystemdService=") }).map({ String($0.dropFirst(15)) }),
      !unitDirectories.contains(where: { FileManager.default.fileExists(atPath: "\($0)/\(unit)") })
    {
      return .init(
        name: "desktop service", ok: false, detail: "\(path) names the user unit \(unit), which is not installed",
        fix: "Tools/install-udev (or reinstall the package)")
    }
    return .init(name: "desktop service", ok: true, detail: "\(path) (runs \(program))")
  }

  func realPath(_ p: String) -> String {
    guard let r = realpath(p, nil) else { return p }
    defer { free(r) }
    return String(cString: r)
  }

  func dataDirectory() -> DoctorCheck {
    let path = Configuration.dataDirectory.path
    do {
      _ = try FileSafety.check(path, .directory)
      return .init(name: "data directory", ok: true, detail: "\(path): safe (or not created yet)")
    } catch {
      return .init(
        name: "data directory", ok: false, detail: ErrorReport(OperationError.localData(error)).message,
        fix: "fix the directory as the message says (it must be yours, a directory, writable by you alone)")
    }
  }
}
