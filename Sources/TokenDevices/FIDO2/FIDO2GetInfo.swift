/// The authenticatorGetInfo response (CTAP 2.1 §6.4) read from its CBOR map, into the same `FIDO2Info` that
/// `fido_dev_get_cbor_info` fills: what libfido2 sends while opening a key is read this way (captured in the
/// custom I/O, `FIDO2IO.Context`), so no command needs a second getInfo.
///
/// Why not the project's CBOR codec: it lives in VirtualTokens (the simulators), which shares no code with the
/// client. This reader takes only what getInfo holds: definite-length integers, byte and text strings, arrays,
/// maps, booleans, null (and skips floats, simple values and tags it does not need). It never traps.
public enum FIDO2GetInfo {
  /// The fields `FIDO2Session.info()` reports; nil when the bytes are not one well-formed CBOR map, or a field
  /// TokenBridge reads has the wrong type. Versions (0x01) and the AAGUID (0x03, 16 bytes) must be there.
  public static func parse(_ bytes: some Collection<UInt8>) -> FIDO2Info? {
    guard let map = CTAP2CBOR.map(Array(bytes)) else { return nil }
    func field(_ key: UInt64) -> Item? { map.first { $0.0 == .unsigned(key) }?.1 }
    func strings(_ key: UInt64) -> [String]?? {
      guard let value = field(key) else { return .some(nil) }
      guard case .array(let items) = value else { return nil }
      var out: [String] = []
      for i in items {
        guard case .text(let s) = i else { return nil }
        out.append(s)
      }
      return .some(out)
    }
    func unsigned(_ key: UInt64) -> UInt64?? {
      guard let value = field(key) else { return .some(nil) }
      guard case .unsigned(let u) = value else { return nil }
      return .some(u)
    }
    guard case .some(.some(let versions)) = strings(0x01), case .some(let extensions) = strings(0x02),
      case .bytes(let aaguid)? = field(0x03), aaguid.count == 16,
      case .some(let maxMsgSize) = unsigned(0x05), case .some(let minPIN) = unsigned(0x0D),
      case .some(let firmware) = unsigned(0x0E), case .some(let remaining) = unsigned(0x14)
    else { return nil }
    var options: [String: Bool] = [:]
    if let o = field(0x04) {
      guard case .map(let pairs) = o else { return nil }
      for (k, v) in pairs {
        guard case .text(let name) = k, case .bool(let b) = v else { return nil }
        options[name] = b
      }
    }
    var protocols: [Int] = []
    if let p = field(0x06) {
      guard case .array(let items) = p else { return nil }
      for i in items {
        guard case .unsigned(let u) = i, u <= UInt64(UInt8.max) else { return nil }
        protocols.append(Int(u))
      }
    }
    var forcePINChange = false
    if let f = field(0x0C) {
      guard case .bool(let b) = f else { return nil }
      forcePINChange = b
    }
    return FIDO2Info(
      versions: versions, extensions: extensions ?? [], options: options, pinProtocols: protocols,
      minPINLength: max(4, Int(min(minPIN ?? 0, 255))), forcePINChange: forcePINChange,
      aaguid: Hex.string(aaguid, uppercase: true, separator: nil),
      remainingDiscoverableCredentials: remaining.map { Int(min($0, UInt64(Int32.max))) },
      firmwareVersion: firmware.flatMap { $0 > 0 ? $0 : nil }, maxMsgSize: maxMsgSize.flatMap { $0 > 0 ? $0 : nil })
  }

  /// The unsigned integer under `key` in a response that is one CBOR map (getPINRetries' pinRetries, 0x03;
  /// getUVRetries' uvRetries, 0x05); nil when the bytes are not one well-formed map, or the field is missing or
  /// not an unsigned integer.
  static func unsigned(_ key: UInt64, inMap bytes: some Collection<UInt8>) -> UInt64? {
    guard let map = CTAP2CBOR.map(Array(bytes)),
      case .unsigned(let value)? = map.first(where: { $0.0 == .unsigned(key) })?.1
    else { return nil }
    return value
  }

  enum Item: Equatable {
    case unsigned(UInt64)
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([Item])
    case map([(Item, Item)])
    case bool(Bool)
    case other

    static func == (a: Item, b: Item) -> Bool {
      switch (a, b) {
      case (.unsigned(let x), .unsigned(let y)), (.negative(let x), .negative(let y)): x == y
      case (.bytes(let x), .bytes(let y)): x == y
      case (.text(let x), .text(let y)): x == y
      case (.bool(let x), .bool(let y)): x == y
      default: false
      }
    }
  }

  struct Malformed: Error {}

  struct Reader {
    let bytes: [UInt8]
    var offset = 0

    mutating func byte() throws(Malformed) -> UInt8 {
      guard offset < bytes.count else { throw Malformed() }
      defer { offset += 1 }
      return bytes[offset]
    }

    /// The argument of a head whose low five bits are `info` (RFC 8949 §3); indefinite lengths are refused.
    mutating func argument(_ info: UInt8) throws(Malformed) -> UInt64 {
      switch info {
      case 0..<24: return UInt64(info)
      case 24...27:
        var v: UInt64 = 0
        for _ in 0..<(1 << (info - 24)) { v = v << 8 | UInt64(try byte()) }
        return v
      default: throw Malformed()
      }
    }

    mutating func take(_ n: UInt64) throws(Malformed) -> ArraySlice<UInt8> {
      guard n <= UInt64(bytes.count - offset) else { throw Malformed() }
      defer { offset += Int(n) }
      return bytes[offset..<offset + Int(n)]
    }

    mutating func item(depth: Int) throws(Malformed) -> Item {
      guard depth < 16 else { throw Malformed() }
      let head = try byte()
      let info = head & 0x1F
      switch head >> 5 {
      case 0: return .unsigned(try argument(info))
      case 1: return .negative(try argument(info))
      case 2: return .bytes(Array(try take(try argument(info))))
      case 3:
        guard let s = String(validating: try take(try argument(info)), as: UTF8.self) else { throw Malformed() }
        return .text(s)
      case 4:
        let n = try argument(info)
        guard n <= UInt64(bytes.count - offset) else { throw Malformed() }  // each item is at least one byte
        var items: [Item] = []
        for _ in 0..<n { items.append(try item(depth: depth + 1)) }
        return .array(items)
      case 5:
        let n = try argument(info)
        guard n <= UInt64(bytes.count - offset) / 2 else { throw Malformed() }
        var pairs: [(Item, Item)] = []
        for _ in 0..<n { pairs.append((try item(depth: depth + 1), try item(depth: depth + 1))) }
        return .map(pairs)
      case 6:
        _ = try argument(info)  // a tag: the tagged item stands for itself
        return try item(depth: depth + 1)
      default:
        switch info {
        case 20: return .bool(false)
        case 21: return .bool(true)
        case 22, 23: return .other  // null, undefined
        case 24: _ = try take(1)
        case 25: _ = try take(2)
        case 26: _ = try take(4)
        case 27: _ = try take(8)
        case 0..<20: break
        default: throw Malformed()  // reserved or indefinite
        }
        return .other
      }
    }
  }
}
