import Foundation
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// Enrollment of a token when it is plugged in (`tokenbridge enroll --device %k`, started by udev through the
/// user's service manager). One physical token raises several udev events (hidraw and CCID interface, add and
/// bind): all of them lead to the same USB device (`USBIdentity`), one run holds its lock, the others leave
/// quietly, and what was decided (enrolled / declined) is remembered per token so a replug asks nothing.
public struct Enrollment {
  public enum Outcome: Equatable, Sendable {
    /// No `enroll` in the configuration: nothing done, nothing recorded.
    case notConfigured
    /// `onInsert: off`.
    case off
    /// Another run holds this token's lock (another udev event of the same token).
    case busy
    /// Decided before (`enrolled` or `declined`); `tokenbridge enroll --reset KEY` forgets.
    case remembered(key: String, state: String)
    /// Ready: enroll `tokenID` (of `kind`) for the physical token `key`.
    case proceed(key: String, kind: EnrollmentSettings.Kind, tokenID: String)
  }

  public let settings: EnrollmentSettings?
  public let identity: USBIdentity
  let memoryURL: URL
  let lockDirectory: URL
  var lockFD: Int32 = -1

  /// The login name, the default username.
  public static var loginName: String {
    if let pw = getpwuid(getuid()), let name = pw.pointee.pw_name { return String(cString: name) }
    return ProcessInfo.processInfo.environment["USER"] ?? "user"
  }

  /// `$XDG_RUNTIME_DIR/tokenbridge` (locks live only as long as the session), else the data directory.
  public static var lockDirectory: URL {
    if let run = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], run.hasPrefix("/") {
      return URL(fileURLWithPath: run).appendingPathComponent("tokenbridge")
    }
    return Configuration.dataDirectory
  }

  public init(
    device: String, settings: EnrollmentSettings?, dataDirectory: URL = Configuration.dataDirectory,
    lockDirectory: URL = Enrollment.lockDirectory, sys: String = "/sys"
  ) throws(OperationError) {
    do { identity = try USBIdentity.of(device, sys: sys) } catch { throw .enrollment(.device(device, error)) }
    self.settings = settings
    memoryURL = dataDirectory.appendingPathComponent("enrollment.json")
    self.lockDirectory = lockDirectory
  }

  /// Decides what this run does. Holds the token's lock from here on when it returns `.proceed`.
  public mutating func decide(pcscWaitSeconds: Double = 20) throws(OperationError) -> Outcome {
    guard let settings else { return .notConfigured }
    if settings.onInsert == .off { return .off }
    let key = identity.key
    guard try lock(key) else { return .busy }
    if let state = Self.remembered(memoryURL)[key] { return .remembered(key: key, state: state) }
    let hasFIDO = !identity.hidraw.isEmpty
    let kind: EnrollmentSettings.Kind =
      hasFIDO && identity.hasCCID ? settings.prefer : (hasFIDO ? .fido2 : .piv)
    guard hasFIDO || identity.hasCCID else { throw .enrollment(.notAToken(identity.busPath)) }
    switch kind {
    case .fido2:
      return .proceed(key: key, kind: .fido2, tokenID: "fido2-" + identity.hidraw[0])
    case .piv:
      return .proceed(key: key, kind: .piv, tokenID: try waitForCard(seconds: pcscWaitSeconds))
    }
  }

  /// The PIV token behind this device's CCID interface: pcscd names the reader "… (USB serial) …"; waits
  /// (bounded, on PC/SC events) for pcscd to list it with a card.
  func waitForCard(seconds: Double) throws(OperationError) -> String {
    let marker = identity.serial.map { "(\($0))" }
    do {
      let context = try PCSCContext()
      let reader = try context.waitForCard(in: { name in marker.map { name.contains($0) } ?? true }, seconds: seconds)
      guard let reader else { throw OperationError.enrollment(.noReader(identity.busPath, seconds: Int(seconds))) }
      let listing = try TokenListing(trace: nil)
      guard let token = listing.tokens.first(where: { $0.reader == reader }) else {
        throw OperationError.enrollment(.noReader(identity.busPath, seconds: Int(seconds)))
      }
      return token.id
    } catch let e as OperationError {
      throw e
    } catch let e as SmartCardError {
      throw .token(.smartCard(e))
    } catch {
      throw .unexpected(String(describing: type(of: error)))
    }
  }

  /// flock on `enroll-KEY.lock`, not waiting: false when another run holds it. Released at exit.
  mutating func lock(_ key: String) throws(OperationError) -> Bool {
    do {
      try FileManager.default.createDirectory(
        at: lockDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    } catch { throw .enrollment(.state(lockDirectory.path)) }
    let path = lockDirectory.appendingPathComponent("enroll-\(key).lock").path
    let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { throw .enrollment(.state(path)) }
    guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
      close(fd)
      return false
    }
    lockFD = fd
    return true
  }

  /// Records `state` (`enrolled` / `declined`) for the physical token; atomic (write, then rename).
  public func remember(_ state: String) throws(OperationError) {
    var all = Self.remembered(memoryURL)
    all[identity.key] = state
    try Self.write(all, to: memoryURL)
  }

  /// Forgets what was decided for `key`; false when nothing was remembered.
  public static func forget(
    _ key: String, dataDirectory: URL = Configuration.dataDirectory
  ) throws(OperationError) -> Bool {
    let url = dataDirectory.appendingPathComponent("enrollment.json")
    var all = remembered(url)
    guard all.removeValue(forKey: key) != nil else { return false }
    try write(all, to: url)
    return true
  }

  public static func remembered(_ url: URL) -> [String: String] {
    guard let data = try? Data(contentsOf: url), data.count < 1 << 20,
      let object = try? JSONDecoder().decode([String: String].self, from: data)
    else { return [:] }
    return object
  }

  static func write(_ all: [String: String], to url: URL) throws(OperationError) {
    do {
      try FileManager.default.createDirectory(
        at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
        attributes: [.posixPermissions: 0o700])
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
      try encoder.encode(all).write(to: url, options: .atomic)
      chmod(url.path, 0o600)
    } catch { throw .enrollment(.state(url.path)) }
  }
}

/// Why an enrollment could not start.
public enum EnrollmentError: Error, Equatable, Sendable {
  /// The udev device name leads to no USB device.
  case device(String, USBIdentity.LookupError)
  /// The USB device has neither a FIDO (hidraw) nor a CCID interface.
  case notAToken(String)
  /// pcscd did not list a reader with a card for the device in time.
  case noReader(String, seconds: Int)
  /// The lock or the remembered decisions could not be written.
  case state(String)
}
