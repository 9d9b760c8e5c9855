import FoundationEssentials
import Glibc
import Platform
import TokenDevices

/// Settings from `$XDG_CONFIG_HOME/tokenbridge/config.json` (all optional; command-line options win). Every key
/// is validated when the file is read (type, range, format); an unknown key or a bad value is an error that
/// names the key, the value and what is allowed — never silently ignored.
public struct Configuration: Equatable, Sendable {
  /// Base URL of the nevisFIDO-compatible server (`https://host`; `http://` only for loopback).
  public var server: String?
  /// Our facet ID; default: the server's origin.
  public var facetID: String?
  /// AAID of PIV tokens (ours, registered in the server's metadata; never an F1D0 one).
  public var pivAAID: String
  /// AAID of FIDO2 keys.
  public var fido2AAID: String
  /// PIV slots registrations may use, in order (retired key-management slots by default).
  public var pivSlots: [String]
  /// Seconds a prompt waits for the user.
  public var interactionTimeout: Double
  /// Seconds an HTTP request may take.
  public var networkTimeout: Double
  /// A PIV slot holding an attestation key and its certificate (provisioned by the operator): registrations
  /// then carry basic full attestation signed by it. Nil: surrogate attestation (signed by the new key).
  public var attestationSlot: String?
  /// FIDO2 registrations make discoverable (resident) credentials; default false (no space used on the key).
  public var fido2ResidentKeys: Bool
  /// x-callback-url targets `tokenbridge oob` may open: custom schemes (`myapp:`) and https origins
  /// (`https://bank.example`); anything else is refused and named. Default: none.
  public var callbackAllowList: [String] = []
  /// Enrollment when a token is plugged in (`tokenbridge enroll`, started by udev + systemd). Nil: none.
  public var enroll: EnrollmentSettings?
  /// How PINs and passwords are asked: "terminal", "pinentry", or "auto" (the terminal when there is one,
  /// else pinentry when a pinentry is named or a graphical session is there). `--prompt` wins.
  public var prompt: PromptMode = .auto
  /// The pinentry program (a name looked up on PATH, or an absolute path); nil: `$PINENTRY_PROGRAM`, else
  /// `pinentry`.
  public var pinentry: String?
  /// Callers of `tokenbridge serve` that may act for a web origin (`options["origin"]`), by facet ID
  /// (`unix:exe:/usr/lib/firefox-esr/firefox-esr`, `flatpak:app-id:org.mozilla.firefox`; docs/dbus-api.md).
  /// Default: none.
  public var serviceOriginCallers: [String] = []

  public static let defaultPIVAAID = "7B1D#0001"
  public static let defaultFIDO2AAID = "7B1D#0002"
  /// Bounds of the timeouts (seconds): a day for a prompt, an hour for a request.
  public static let interactionTimeoutRange: ClosedRange<Double> = 1...86_400
  public static let networkTimeoutRange: ClosedRange<Double> = 1...3_600
  /// The file is small; anything larger is refused before it is parsed.
  public static let maxFileSize = 64 * 1024

  public init() {
    server = nil
    facetID = nil
    pivAAID = Self.defaultPIVAAID
    fido2AAID = Self.defaultFIDO2AAID
    pivSlots = (0x82...0x95).map { String($0, radix: 16) }
    interactionTimeout = 240
    networkTimeout = 60
    fido2ResidentKeys = false
  }

  /// The keys a configuration file may hold.
  public static let knownKeys = [
    "attestationSlot", "callbackAllowList", "enroll", "facetID", "fido2AAID", "fido2ResidentKeys",
    "interactionTimeout", "networkTimeout", "pinentry", "pivAAID", "pivSlots", "prompt", "server",
    "serviceOriginCallers",
  ]

  /// `$XDG_CONFIG_HOME/tokenbridge` (default `~/.config/tokenbridge`).
  public static var directory: URL { URL(fileURLWithPath: directoryPath) }

  /// `$XDG_DATA_HOME/tokenbridge` (default `~/.local/share/tokenbridge`).
  public static var dataDirectory: URL {
    URL(fileURLWithPath: xdg("XDG_DATA_HOME", default: ".local/share") + "/tokenbridge")
  }

  public static var file: URL { URL(fileURLWithPath: filePath) }

  /// The paths as strings, not URLs (`appendingPathComponent`): every command reads the configuration
  /// (docs/performance.md).
  static var directoryPath: String { xdg("XDG_CONFIG_HOME", default: ".config") + "/tokenbridge" }
  static var filePath: String { directoryPath + "/config.json" }

  /// The variable's directory when it is an absolute path (without trailing slashes), else `~/` + `rel`.
  static func xdg(_ variable: String, default rel: String) -> String {
    if var v = Environment.value(variable), v.hasPrefix("/") {
      while v.count > 1 && v.hasSuffix("/") { v.removeLast() }
      return v == "/" ? "" : v
    }
    let home = Environment.home ?? FileManager.default.homeDirectoryForCurrentUser.path
    return (home.hasSuffix("/") ? String(home.dropLast()) : home) + "/" + rel
  }

  /// Loads the config file (`url`, else the user's); a missing file is the defaults, a broken one an error
  /// that names it.
  public static func load(_ url: URL? = nil) throws(ConfigurationError) -> Configuration {
    let path = url?.path ?? filePath
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 {
      if errno == ENOENT { return Configuration() }
      throw .unreadable(path: path, reason: String(cString: strerror(errno)))
    }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
      let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n < 0 { throw .unreadable(path: path, reason: String(cString: strerror(errno))) }
      if n == 0 { break }
      bytes += chunk[0..<n]
      if bytes.count > maxFileSize { throw .unreadable(path: path, reason: "it is larger than \(maxFileSize) bytes") }
    }
    return try parse(bytes, path: path)
  }

  /// Parses and validates a configuration file's bytes (also the fuzz target's entry point).
  public static func parse(_ bytes: [UInt8], path: String) throws(ConfigurationError) -> Configuration {
    let object: [String: JSONValue]
    do { object = try JSONDecoder().decode([String: JSONValue].self, from: Data(bytes)) } catch {
      throw .notJSON(path: path)
    }
    var c = Configuration()
    for key in object.keys.sorted() {
      let value = object[key]!
      func bad(_ allowed: String) -> ConfigurationError {
        .invalidValue(path: path, key: key, value: value.shown, allowed: allowed)
      }
      switch key {
      case "server":
        guard case .string(let s) = value, Self.isServerURL(s) else {
          throw bad("an https:// URL (http:// only for loopback: 127.0.0.0/8, ::1, localhost)")
        }
        c.server = s
      case "facetID":
        guard case .string(let s) = value, !s.isEmpty, s.utf8.count <= 512,
          !s.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { throw bad("a facet ID: a non-empty string of at most 512 bytes without control characters") }
        c.facetID = s
      case "pivAAID", "fido2AAID":
        guard case .string(let s) = value, Self.isAAID(s) else {
          throw bad("an AAID: 4 hex digits, '#', 4 hex digits (your vendor's, e.g. 7B1D#0001; never F1D0#…)")
        }
        if key == "pivAAID" { c.pivAAID = s } else { c.fido2AAID = s }
      case "pivSlots":
        guard case .array(let items) = value, !items.isEmpty else {
          throw bad("a non-empty list of PIV slots (\"82\"…\"95\", \"9a\", \"9c\", \"9d\", \"9e\")")
        }
        var slots: [String] = []
        for item in items {
          guard case .string(let s) = item, let slot = PIVSlot(string: s),
            !slots.contains(String(slot.rawValue, radix: 16))
          else { throw bad("a list of distinct PIV slots (\"82\"…\"95\", \"9a\", \"9c\", \"9d\", \"9e\")") }
          slots.append(String(slot.rawValue, radix: 16))
        }
        c.pivSlots = slots
      case "attestationSlot":
        if case .null = value {
          c.attestationSlot = nil
        } else {
          guard case .string(let s) = value, PIVSlot(string: s) != nil else {
            throw bad("a PIV slot (\"9a\", \"9c\", \"9d\", \"9e\", \"82\"…\"95\") or null")
          }
          c.attestationSlot = s
        }
      case "interactionTimeout", "networkTimeout":
        let range = key == "networkTimeout" ? networkTimeoutRange : interactionTimeoutRange
        guard case .number(let n) = value, range.contains(n) else {
          throw bad("a number of seconds from \(Int(range.lowerBound)) to \(Int(range.upperBound))")
        }
        if key == "networkTimeout" { c.networkTimeout = n } else { c.interactionTimeout = n }
      case "callbackAllowList":
        let allowed = "a list of custom schemes (\"myapp:\") and https origins (\"https://bank.example\")"
        guard case .array(let items) = value else { throw bad(allowed) }
        var list: [String] = []
        for item in items {
          guard case .string(let s) = item, Self.isCallbackEntry(s) else { throw bad(allowed) }
          list.append(s)
        }
        c.callbackAllowList = list
      case "prompt":
        guard case .string(let s) = value, let mode = PromptMode(rawValue: s) else {
          throw bad("\"terminal\", \"pinentry\" or \"auto\"")
        }
        c.prompt = mode
      case "pinentry":
        guard case .string(let s) = value, !s.isEmpty, s.utf8.count <= 4096,
          !s.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { throw bad("a program name or path (a non-empty string without control characters)") }
        c.pinentry = s
      case "serviceOriginCallers":
        let allowed = "a list of facet IDs (\"unix:exe:/usr/bin/…\", \"flatpak:app-id:…\", \"snap:name:…\")"
        guard case .array(let items) = value else { throw bad(allowed) }
        var list: [String] = []
        for item in items {
          guard case .string(let s) = item, s.utf8.count <= 4096,
            s.hasPrefix("unix:exe:/") || s.hasPrefix("flatpak:app-id:") || s.hasPrefix("snap:name:"),
            !s.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
          else { throw bad(allowed) }
          list.append(s)
        }
        c.serviceOriginCallers = list
      case "fido2ResidentKeys":
        guard case .bool(let b) = value else { throw bad("true or false") }
        c.fido2ResidentKeys = b
      case "enroll":
        c.enroll = try EnrollmentSettings.parse(value, path: path)
      default:
        throw .unknownKey(path: path, key: key, known: knownKeys)
      }
    }
    if let a = c.attestationSlot, let slot = PIVSlot(string: a), c.pivSlots.contains(String(slot.rawValue, radix: 16)),
      c.pivSlots.count == 1
    {
      throw .invalidValue(
        path: path, key: "pivSlots", value: "[\"\(a)\"]", allowed: "at least one slot besides attestationSlot")
    }
    return c
  }

  /// `XXXX#XXXX` in hex (UAF Protocol §3.1.4 AAID), not the FIDO Alliance's test vendor F1D0.
  static func isAAID(_ s: String) -> Bool {
    let u = Array(s.utf8)
    guard u.count == 9, u[4] == UInt8(ascii: "#") else { return false }
    let hex = u[0..<4] + u[5..<9]
    guard hex.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }) else {
      return false
    }
    return s.prefix(4).uppercased() != "F1D0"
  }

  /// `scheme:` (a custom scheme) or `https://host[:port]` (an origin), by the x-callback URL rule (`CallbackURL`).
  static func isCallbackEntry(_ s: String) -> Bool { CallbackURL.allowListEntry(s) != nil }

  /// An https URL with a host, or http on a loopback host.
  static func isServerURL(_ s: String) -> Bool {
    guard s.utf8.count <= 2048, let url = URL(string: s), let scheme = url.scheme?.lowercased(), let host = url.host,
      !host.isEmpty
    else { return false }
    return scheme == "https" || (scheme == "http" && BackendClient.isLoopback(host))
  }
}

/// A JSON value as the configuration file holds it (strict types: `1` is not `true`).
enum JSONValue: Decodable, Equatable {
  case null
  case bool(Bool)
  case number(Double)
  case string(String)
  case array([JSONValue])
  case object([String: JSONValue])

  init(from decoder: Decoder) throws {
    let c = try decoder.singleValueContainer()
    if c.decodeNil() {
      self = .null
    } else if let b = try? c.decode(Bool.self) {
      self = .bool(b)
    } else if let n = try? c.decode(Double.self) {
      self = .number(n)
    } else if let s = try? c.decode(String.self) {
      self = .string(s)
    } else if let a = try? c.decode([JSONValue].self) {
      self = .array(a)
    } else {
      self = .object(try c.decode([String: JSONValue].self))
    }
  }

  /// The value as the error shows it (short; a configuration holds no secret).
  var shown: String {
    let s: String
    switch self {
    case .null: s = "null"
    case .bool(let b): s = b ? "true" : "false"
    case .number(let n): s = n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : "\(n)"
    case .string(let v): s = "\"\(v)\""
    case .array(let a): s = "[" + a.map(\.shown).joined(separator: ", ") + "]"
    case .object: s = "{…}"
    }
    return s.count > 80 ? String(s.prefix(77)) + "…" : s
  }
}

public enum ConfigurationError: Error, Equatable, Sendable {
  case unreadable(path: String, reason: String)
  /// The file is not a JSON object.
  case notJSON(path: String)
  case unknownKey(path: String, key: String, known: [String])
  /// `value` (as shown) of `key` is not allowed; `allowed` says what is.
  case invalidValue(path: String, key: String, value: String, allowed: String)
  case noServer
  /// `uaf process` needs a facet ID (option or configuration).
  case noFacetID
  case insecureServer(String)
  case invalidServer(String)
}

/// `enroll` in the configuration: {"server": URL, "username": name (default: the login name),
/// "onInsert": "ask" | "auto" | "off" (default ask), "prefer": "fido2" | "piv" (default fido2: no management key)}.
public struct EnrollmentSettings: Equatable, Sendable {
  public enum OnInsert: String, Sendable, CaseIterable { case ask, auto, off }
  public enum Kind: String, Sendable, CaseIterable { case fido2, piv }
  public var server: String
  public var username: String?
  public var onInsert: OnInsert = .ask
  public var prefer: Kind = .fido2

  public static let knownKeys = ["onInsert", "prefer", "server", "username"]

  static func parse(_ value: JSONValue, path: String) throws(ConfigurationError) -> EnrollmentSettings {
    guard case .object(let object) = value else {
      throw .invalidValue(
        path: path, key: "enroll", value: value.shown,
        allowed: "an object: {\"server\": …, \"username\": …, "
          + "\"onInsert\": \"ask|auto|off\", \"prefer\": \"fido2|piv\"}")
    }
    var server: String?
    var e = EnrollmentSettings(server: "")
    for key in object.keys.sorted() {
      let v = object[key]!
      func bad(_ allowed: String) -> ConfigurationError {
        .invalidValue(path: path, key: "enroll.\(key)", value: v.shown, allowed: allowed)
      }
      switch key {
      case "server":
        guard case .string(let s) = v, Configuration.isServerURL(s) else {
          throw bad("an https:// URL (http:// only for loopback: 127.0.0.0/8, ::1, localhost)")
        }
        server = s
      case "username":
        guard case .string(let s) = v, !s.isEmpty, s.utf8.count <= 128,
          !s.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { throw bad("a username: 1 to 128 bytes without control characters") }
        e.username = s
      case "onInsert":
        guard case .string(let s) = v, let o = OnInsert(rawValue: s) else { throw bad("\"ask\", \"auto\" or \"off\"") }
        e.onInsert = o
      case "prefer":
        guard case .string(let s) = v, let k = Kind(rawValue: s) else { throw bad("\"fido2\" or \"piv\"") }
        e.prefer = k
      default:
        throw .unknownKey(path: path, key: "enroll.\(key)", known: knownKeys)
      }
    }
    guard let server else {
      throw .invalidValue(path: path, key: "enroll.server", value: "missing", allowed: "the server to enroll at")
    }
    e.server = server
    return e
  }
}

/// How PINs and passwords are asked (the configuration's "prompt", the CLI's `--prompt`).
public enum PromptMode: String, Sendable, Equatable, CaseIterable {
  case auto, terminal, pinentry
}
