import Foundation

/// The persistent part of a virtual PIV card: what survives power-off and a restart of `virtual-token`.
public struct PIVCardState: Codable, Equatable, Sendable {
  public struct Key: Codable, Equatable, Sendable {
    public var algorithm: UInt8
    /// P-256/P-384 private scalar (raw representation).
    public var privateKey: Data
    public var pinPolicy: UInt8
    public var touchPolicy: UInt8
    public var generated: Bool
  }

  public var pin: [UInt8]
  public var puk: [UInt8]
  public var pinRetries: Int
  public var pinMaxRetries: Int
  public var pukRetries: Int
  public var pukMaxRetries: Int
  public var pinIsDefault: Bool
  public var pukIsDefault: Bool
  public var managementKey: [UInt8]
  public var managementAlgorithm: UInt8
  public var managementKeyIsDefault: Bool
  /// Keys by slot (hex, e.g. "9a").
  public var keys: [String: Key]
  /// Data objects by tag (hex, e.g. "5fc102"); value is what GET DATA returns inside tag 53.
  public var objects: [String: Data]
  public var serial: UInt32
  public var version: [UInt8]

  public static let defaultPIN: [UInt8] = Array("123456".utf8)
  public static let defaultPUK: [UInt8] = Array("12345678".utf8)
  public static let defaultManagementKey: [UInt8] = (0..<3).flatMap { _ in [1, 2, 3, 4, 5, 6, 7, 8] as [UInt8] }

  /// A factory-fresh card: PIN 123456, PUK 12345678, `pinTries` PIN tries (3 by default), 3 PUK tries, default
  /// management key,
  /// a CHUID with a random GUID.
  public static func factory(
    serial: UInt32, version: [UInt8] = [5, 4, 3], managementAlgorithm: UInt8 = 0x03, pinTries: Int = 3
  ) -> PIVCardState {
    var guid = [UInt8](repeating: 0, count: 16)
    for i in guid.indices { guid[i] = UInt8.random(in: 0...255) }
    // CHUID (SP 800-73-4 Part 1 Table 9): FASC-N (30), GUID (34), expiry (35), signature (3E, empty), LRC (FE).
    let fascn = [UInt8](repeating: 0xD4, count: 25)
    let chuid = tlv(0x30, fascn) + tlv(0x34, guid) + tlv(0x35, Array("20301231".utf8)) + tlv(0x3E, []) + tlv(0xFE, [])
    return PIVCardState(
      pin: defaultPIN, puk: defaultPUK, pinRetries: pinTries, pinMaxRetries: pinTries, pukRetries: 3, pukMaxRetries: 3,
      pinIsDefault: true, pukIsDefault: true, managementKey: defaultManagementKey,
      managementAlgorithm: managementAlgorithm, managementKeyIsDefault: true, keys: [:],
      objects: ["5fc102": Data(chuid)], serial: serial, version: version)
  }

  /// Loads `url`, or nil when it does not exist.
  public static func load(_ url: URL) throws -> PIVCardState? {
    guard FileManager.default.fileExists(atPath: url.path) else { return nil }
    return try JSONDecoder().decode(PIVCardState.self, from: Data(contentsOf: url))
  }

  /// Writes atomically (temporary file + rename), mode 0600.
  public func save(_ url: URL) throws {
    let enc = JSONEncoder()
    enc.outputFormatting = [.sortedKeys, .prettyPrinted]
    let tmp = url.appendingPathExtension("tmp")
    try enc.encode(self).write(to: tmp)
    try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: tmp.path)
    guard rename(tmp.path, url.path) == 0 else {
      throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
    }
  }
}

func tlv(_ tag: UInt, _ value: [UInt8]) -> [UInt8] {
  var out: [UInt8] = []
  if tag > 0xFFFF {
    out += [UInt8(tag >> 16), UInt8((tag >> 8) & 0xFF), UInt8(tag & 0xFF)]
  } else if tag > 0xFF {
    out += [UInt8(tag >> 8), UInt8(tag & 0xFF)]
  } else {
    out.append(UInt8(tag))
  }
  let n = value.count
  if n < 0x80 {
    out.append(UInt8(n))
  } else if n <= 0xFF {
    out += [0x81, UInt8(n)]
  } else {
    out += [0x82, UInt8(n >> 8), UInt8(n & 0xFF)]
  }
  return out + value
}

/// Parses flat BER-TLV (1-3 byte tags, 1-3 byte lengths); nil on malformed input.
func parseTLV(_ b: [UInt8]) -> [(tag: UInt, value: [UInt8])]? {
  var out: [(UInt, [UInt8])] = []
  var i = 0
  while i < b.count {
    var tag = UInt(b[i])
    if b[i] & 0x1F == 0x1F {
      repeat {
        i += 1
        guard i < b.count else { return nil }
        tag = tag << 8 | UInt(b[i])
      } while b[i] & 0x80 != 0
    }
    i += 1
    guard i < b.count else { return nil }
    var len = Int(b[i])
    i += 1
    if len & 0x80 != 0 {
      let n = len & 0x7F
      guard (1...3).contains(n), i + n <= b.count else { return nil }
      len = b[i..<i + n].reduce(0) { $0 << 8 | Int($1) }
      i += n
    }
    guard i + len <= b.count else { return nil }
    out.append((tag, Array(b[i..<i + len])))
    i += len
  }
  return out
}
