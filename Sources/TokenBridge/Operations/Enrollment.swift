import FoundationEssentials
import Platform
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
    return Environment.value("USER") ?? "user"
  }

  /// `$XDG_RUNTIME_DIR/tokenbridge` (locks live only as long as the session), else the data directory.
  public static var lockDirectory: URL {
    if let run = Environment.value("XDG_RUNTIME_DIR"), run.hasPrefix("/") {
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
    if let state = try Self.remembered(memoryURL)[key] { return .remembered(key: key, state: state) }
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

  /// The PIV token behind this device's CCID interface, waiting (bounded, on PC/SC events) for pcscd to list its
  /// reader with a card. Which reader is this device's: with a USB serial, the one pcscd names "… (SERIAL) …";
  /// without one, the one whose USB channel (`SCARD_ATTR_CHANNEL_ID`: bus number and device address, as libccid
  /// gives them) is this device's in sysfs. A reader that does not say is never taken for it: a card in another
  /// reader is not this device's, and guessing would remember the decision under the wrong token.
  func waitForCard(seconds: Double) throws(OperationError) -> String {
    let identity = self.identity
    let marker = identity.serial.map { "(\($0))" }
    let unknown = OperationError.enrollment(
      .readerUnknown(identity.busPath, bus: identity.busNumber, address: identity.deviceAddress, seconds: Int(seconds)))
    if marker == nil, identity.busNumber == nil || identity.deviceAddress == nil {
      throw .enrollment(.readerUnknown(identity.busPath, bus: nil, address: nil, seconds: 0))
    }
    do {
      let context = try PCSCContext()
      let reader = try context.waitForCard(
        in: { name in
          if let marker { return name.firstRange(of: marker) != nil }
          return context.channelID(name).map(identity.isChannel) ?? false
        }, seconds: seconds)
      guard let reader else {
        throw marker == nil ? unknown : OperationError.enrollment(.noReader(identity.busPath, seconds: Int(seconds)))
      }
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

  /// flock on `enroll-KEY.lock`, not waiting: false when another run holds it. Released at exit. The directory
  /// and the file pass the data directory's checks (`FileSafety`: made 0700/0600, no link followed, ours, not
  /// writable by others): a lock directory someone else can change is refused, nothing is made through it.
  mutating func lock(_ key: String) throws(OperationError) -> Bool {
    let fd: Int32
    do {
      try FileSafety.prepareDirectory(lockDirectory)
      fd = try FileSafety.openFile(lockDirectory.appendingPathComponent("enroll-\(key).lock").path)
    } catch { throw .localData(error) }
    guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
      close(fd)
      return false
    }
    lockFD = fd
    return true
  }

  /// Records `state` (`enrolled` / `declined`) for the physical token; atomic (write, then rename).
  public func remember(_ state: String) throws(OperationError) {
    var all = try Self.remembered(memoryURL)
    all[identity.key] = state
    try Self.write(all, to: memoryURL)
  }

  /// Forgets what was decided for `key`; false when nothing was remembered. The data directory and the file pass
  /// the same checks as every other command's local data: refused (nothing read or written) otherwise.
  public static func forget(
    _ key: String, dataDirectory: URL = Configuration.dataDirectory
  ) throws(OperationError) -> Bool {
    let url = dataDirectory.appendingPathComponent("enrollment.json")
    var all = try remembered(url)
    guard all.removeValue(forKey: key) != nil else { return false }
    try write(all, to: url)
    return true
  }

  /// The decisions remembered in `url` (empty when none; a file that is not such a map counts as none). Read
  /// only when the directory and the file pass the data directory's checks.
  public static func remembered(_ url: URL) throws(OperationError) -> [String: String] {
    let bytes: [UInt8]?
    do { bytes = try FileSafety.readFile(url.path, in: url.deletingLastPathComponent()) } catch {
      throw .localData(error)
    }
    guard let bytes, let object = try? JSONDecoder().decode([String: String].self, from: Data(bytes)) else {
      return [:]
    }
    return object
  }

  static func write(_ all: [String: String], to url: URL) throws(OperationError) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
    guard let data = try? encoder.encode(all) else { throw .enrollment(.state(url.path)) }
    do { try FileSafety.replaceFile(url.path, in: url.deletingLastPathComponent(), with: Array(data)) } catch {
      throw .localData(error)
    }
  }
}

/// What an enrollment asks of its front end: the PINs (pinentry in the user service, a terminal or `--pin-fd`
/// by hand), the question of `onInsert: ask`, and the cues of a FIDO2 key that must be re-inserted.
public protocol EnrollmentInteraction: PinChanger, PinUserVerifier, ReinsertionNotifier {
  /// Asks a yes/no question: true only on an explicit yes. Throws `InteractionError` to stop.
  func confirm(_ about: Confirmation) throws -> Bool
}

/// How a run of `tokenbridge enroll` ended (the front end renders it).
public enum EnrollmentResult: Equatable, Sendable {
  /// No `enroll` in the configuration: nothing done, nothing recorded.
  case notConfigured
  /// `onInsert: off`.
  case off
  /// Another run holds this token's lock (another udev event of the same token): nothing to say.
  case busy
  /// Decided before (`enrolled` or `declined`): nothing asked.
  case remembered(key: String, state: String)
  /// `onInsert: ask` and the user said no: remembered as `declined`.
  case declined(key: String, tokenID: String)
  /// Registered at the server and locally, and remembered as `enrolled`.
  case enrolled(key: String, tokenID: String, keyID: String, username: String, server: String)
}

extension Enrollment {
  /// The whole run for the device this enrollment was made for: decides (lock, memory, kind), asks when
  /// `onInsert` is `ask`, sets a first PIN on a FIDO2 key that has none (password policy), registers at the
  /// configured server, and only then remembers `enrolled`. A failure (e.g. the token pulled meanwhile) leaves
  /// no memory, so the next insert runs again; the registration itself is all-or-nothing
  /// (`ServerOperations.register`: the local row is confirmed only after the server took it). A desktop
  /// notification says what happened (`notifier`, best effort).
  public mutating func run(
    environment: UAFEnvironment, interaction: EnrollmentInteraction, interactionTimeout: Double,
    trace: TraceSink? = nil, touchCue: @escaping (TokenInfo) -> Void = { _ in },
    notifier: DesktopNotifier? = DesktopNotifier(), pcscWaitSeconds: Double = 20
  ) throws(OperationError) -> EnrollmentResult {
    let key: String
    let kind: EnrollmentSettings.Kind
    let tokenID: String
    switch try decide(pcscWaitSeconds: pcscWaitSeconds) {
    case .notConfigured: return .notConfigured
    case .off: return .off
    case .busy: return .busy
    case .remembered(let k, let state): return .remembered(key: k, state: state)
    case .proceed(let k, let kd, let t): (key, kind, tokenID) = (k, kd, t)
    }
    guard let settings else { return .notConfigured }
    let username = settings.username ?? Self.loginName
    do throws(OperationError) {
      if settings.onInsert == .ask {
        let yes: Bool
        do {
          yes = try interaction.confirm(.enroll(token: tokenID, server: settings.server, username: username))
        } catch { throw mapInteraction(error) }
        guard yes else {
          try remember("declined")
          notifier?.send(.declined(tokenID: tokenID, key: key))
          return .declined(key: key, tokenID: tokenID)
        }
      }
      if kind == .fido2 {
        try setFirstPIN(tokenID, interaction: interaction, timeout: interactionTimeout, trace: trace)
      }
      let tokens = try environment.tokens(id: tokenID, trace: trace, touchCue: touchCue)
      let ops = try environment.operations(
        server: settings.server, facetID: nil, tokens: tokens, authenticatorSelector: nil)
      let keyID = try ops.register(username: username, verifier: interaction)
      try remember("enrolled")
      notifier?.send(.enrolled(tokenID: tokenID, username: username, server: settings.server))
      return .enrolled(key: key, tokenID: tokenID, keyID: keyID, username: username, server: settings.server)
    } catch {
      notifier?.send(.failed(tokenID: tokenID, reason: ErrorReport(error).message))
      throw error
    }
  }

  /// A FIDO2 key without a PIN gets one first (registration needs user verification). The key is let go
  /// before the registration opens it again.
  func setFirstPIN(_ tokenID: String, interaction: EnrollmentInteraction, timeout: Double, trace: TraceSink?)
    throws(OperationError)
  {
    let chosen = try TokenSelection(trace: trace, includePUK: false, includeFIDO2: true)
      .chooseAny(id: tokenID, selector: nil)
    guard chosen.info.fido2?.pinIsSet == false else { return }
    try PinOperation.setPIN.run(on: chosen, changer: interaction, interactionTimeout: timeout)
  }
}

/// A desktop notification (freedesktop Notifications over the user's D-Bus session bus): `notify-send` when
/// installed, else `busctl --user call … Notify` (systemd's own client, present wherever the user unit runs).
/// Best effort: a service may have no desktop, no bus or no notification server; nothing fails because of it.
public struct DesktopNotifier: Sendable {
  /// What happened, for the notification's title and body.
  public enum Event: Equatable, Sendable {
    case enrolled(tokenID: String, username: String, server: String)
    case declined(tokenID: String, key: String)
    case failed(tokenID: String, reason: String)
  }

  public var notifySend: String
  public var busctl: String
  public var timeoutSeconds: Int
  /// The client's environment (nil: this process's; the bus is `DBUS_SESSION_BUS_ADDRESS`, else
  /// `$XDG_RUNTIME_DIR/bus`).
  public var environment: [String: String]?

  public init(
    notifySend: String = "/usr/bin/notify-send", busctl: String = "/usr/bin/busctl", timeoutSeconds: Int = 5,
    environment: [String: String]? = nil
  ) {
    self.notifySend = notifySend
    self.busctl = busctl
    self.timeoutSeconds = timeoutSeconds
    self.environment = environment
  }

  public static func text(_ e: Event) -> (title: String, body: String) {
    switch e {
    case .enrolled(let token, let username, let server):
      ("Token enrolled", "\(token) is registered for \(displayable(username)) at \(displayable(server)).")
    case .declined(let token, let key):
      ("Token not enrolled", "\(token) was declined; tokenbridge enroll --reset \(key) asks again.")
    case .failed(let token, let reason): ("Token not enrolled", "\(token): \(reason)")
    }
  }

  /// The program and arguments that show `e` (nil: neither client is installed).
  public func command(_ e: Event) -> [String]? {
    let (title, body) = Self.text(e)
    if FileManager.default.isExecutableFile(atPath: notifySend) {
      return [notifySend, "--app-name=TokenBridge", "--", title, body]
    }
    guard FileManager.default.isExecutableFile(atPath: busctl) else { return nil }
    // Notify(app_name s, replaces_id u, app_icon s, summary s, body s, actions as, hints a{sv}, timeout i); "--"
    // so that the timeout -1 is not taken for an option.
    return [
      busctl, "--user", "--timeout=\(timeoutSeconds)", "--", "call", "org.freedesktop.Notifications",
      "/org/freedesktop/Notifications", "org.freedesktop.Notifications", "Notify", "susssasa{sv}i",
      "TokenBridge", "0", "", title, body, "0", "0", "-1",
    ]
  }

  public func send(_ e: Event) {
    guard let argv = command(e) else { return }
    Subprocess.start(
      argv[0], Array(argv.dropFirst()), environment: environment, stdin: .null, stdout: .null, stderr: .null
    )?.wait()
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
  /// The device has no USB serial and no reader with a card said (by its USB channel) that it is this device's
  /// within `seconds` (0: sysfs gives no bus number and address to match by).
  case readerUnknown(String, bus: Int?, address: Int?, seconds: Int)
  /// The lock or the remembered decisions could not be written.
  case state(String)
}
