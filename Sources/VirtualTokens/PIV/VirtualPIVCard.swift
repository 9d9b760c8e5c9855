import SystemCrypto
import Foundation

/// A PIV card application (NIST SP 800-73-4 Part 2, with YubiKey's GET VERSION/SERIAL/METADATA,
/// SET MANAGEMENT KEY, SET PIN RETRIES and RESET), answering raw APDUs with the status words a YubiKey gives,
/// or, with another `PIVCardProfile`, as a card without YubiKey's extensions would.
/// It shares no code with the client (ARCHITECTURE.md): the client cannot hide a bug in both.
public final class VirtualPIVCard {
  public static let aid: [UInt8] = [0xA0, 0x00, 0x00, 0x03, 0x08, 0x00, 0x00, 0x10, 0x00, 0x01, 0x00]
  /// YubiKey 5 NFC's ATR (T=1, correct TCK), so peers treat the card as a YubiKey.
  public static let atr: [UInt8] = [
    0x3B, 0xFD, 0x13, 0x00, 0x00, 0x81, 0x31, 0xFE, 0x15, 0x80, 0x73, 0xC0, 0x21, 0xC0, 0x57, 0x59, 0x75, 0x62,
    0x69, 0x4B, 0x65, 0x79, 0x40,
  ]

  public internal(set) var state: PIVCardState
  /// How this card differs from a YubiKey (default: not at all).
  public var profile: PIVCardProfile
  /// The ATR this card's profile answers with.
  public var atr: [UInt8] { profile.atr }
  /// Called after every change of persistent state.
  public var onStateChange: ((PIVCardState) -> Void)?

  // Volatile state: lost on power-off, reset and (for authentication) re-SELECT of another application.
  var pinVerified = false
  var managementAuthenticated = false
  var witness: [UInt8]?
  var challenge: [UInt8]?
  var chain: (ins: UInt8, data: [UInt8])?
  var pendingResponse: [UInt8] = []

  /// False simulates a card without a PIV application (e.g. a bank card): every SELECT answers 6A82.
  public var hasPIVApplication = true

  public init(state: PIVCardState, profile: PIVCardProfile = .yubikey) {
    self.state = state
    self.profile = profile
  }

  /// Power off or reset: forget everything volatile.
  public func powerCycle() {
    pinVerified = false
    managementAuthenticated = false
    witness = nil
    challenge = nil
    chain = nil
    pendingResponse = []
  }

  /// Processes one C-APDU (short or extended, case 1-4); returns data ‖ SW1 SW2.
  public func process(_ apdu: [UInt8]) -> [UInt8] {
    guard apdu.count >= 4 else { return sw(0x6700) }
    let cla = apdu[0]
    let ins = apdu[1]
    let p1 = apdu[2]
    let p2 = apdu[3]
    guard cla & 0xEF == 0x00 else { return sw(0x6E00) }
    guard var data = Self.body(apdu) else { return sw(0x6700) }
    let extended = apdu.count > 5 && apdu[4] == 0 && apdu.count >= 7

    if ins != 0xC0 { pendingResponse = [] }
    // Command chaining (ISO 7816-4 §5.1.1): collect until a command without the chaining bit.
    if cla & 0x10 != 0 {
      if let c = chain, c.ins != ins { chain = nil }
      chain = (ins, (chain?.data ?? []) + data)
      guard chain!.data.count <= 16384 else {
        chain = nil
        return sw(0x6700)
      }
      return sw(0x9000)
    }
    if let c = chain {
      chain = nil
      guard c.ins == ins else { return sw(0x6883) }  // last command of a chain expected
      data = c.data + data
    }

    let (out, status) = dispatch(ins: ins, p1: p1, p2: p2, data: data)
    return respond(out, status, extended: extended)
  }

  /// Returns at most 256 bytes at once; the rest waits for GET RESPONSE behind `61xx`.
  func respond(_ data: [UInt8], _ status: UInt16, extended: Bool) -> [UInt8] {
    if extended || data.count <= 256 { return data + sw(status) }
    pendingResponse = Array(data.dropFirst(256))
    return Array(data.prefix(256)) + sw(0x6100 | UInt16(min(pendingResponse.count, 255) & 0xFF))
  }

  static func body(_ a: [UInt8]) -> [UInt8]? {
    if a.count <= 5 { return [] }  // case 1 or 2
    if a[4] == 0 && a.count >= 7 {  // extended
      let lc = Int(a[5]) << 8 | Int(a[6])
      guard a.count >= 7 + lc, a.count <= 7 + lc + 2 else { return nil }
      return Array(a[7..<7 + lc])
    }
    let lc = Int(a[4])
    guard a.count >= 5 + lc, a.count <= 5 + lc + 1 else { return nil }
    return Array(a[5..<5 + lc])
  }

  func dispatch(ins: UInt8, p1: UInt8, p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard hasPIVApplication else { return ([], ins == 0xA4 ? 0x6A82 : 0x6D00) }
    if !profile.yubicoExtensions && PIVCardProfile.yubicoInstructions.contains(ins) { return ([], 0x6D00) }
    // A YubiKey answers GET METADATA from firmware 5.3.0 on (Yubico's PIV reference, "GET METADATA").
    if ins == 0xF7 && firmware < 5_03_00 { return ([], 0x6D00) }
    switch ins {
    case 0xA4: return select(p1: p1, data: data)
    case 0xC0: return getResponse()
    case 0xCB: return getData(p1: p1, p2: p2, data: data)
    case 0xDB: return putData(p1: p1, p2: p2, data: data)
    case 0x20: return verify(p1: p1, p2: p2, data: data)
    case 0x24: return changeReference(p2: p2, data: data)
    case 0x2C: return resetRetryCounter(p2: p2, data: data)
    case 0x87: return generalAuthenticate(p1: p1, p2: p2, data: data)
    case 0x47: return generate(p2: p2, data: data)
    case 0xFD: return (state.version, 0x9000)
    case 0xF8: return (withUnsafeBytes(of: state.serial.bigEndian) { Array($0) }, 0x9000)
    case 0xF7: return metadata(p2: p2)
    case 0xFA: return setPINRetries(p1: p1, p2: p2)
    case 0xFB: return reset()
    case 0xFF: return setManagementKey(p1: p1, p2: p2, data: data)
    default: return ([], 0x6D00)
    }
  }

  func changed() { onStateChange?(state) }

  /// The firmware this card reports, as one number (5.4.3 → 50403); a card of the generic profile counts as
  /// implementing every standard command (VERIFY P1=FF).
  var firmware: Int {
    guard profile.yubicoExtensions else { return Int.max }
    let v = state.version.map(Int.init) + [0, 0, 0]
    return v[0] * 10000 + v[1] * 100 + v[2]
  }

  func select(p1: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p1 == 0x04 else { return ([], 0x6A86) }
    // Right-truncated AIDs match (yubico-piv-tool sends the 5-byte RID, OpenSC 9 bytes).
    guard data.count >= 5, data.count <= Self.aid.count, Array(Self.aid.prefix(data.count)) == data else {
      return ([], 0x6A82)
    }
    managementAuthenticated = false
    witness = nil
    challenge = nil
    // Application Property Template as a YubiKey answers it.
    let apt = tlv(0x4F, Array(Self.aid[5...10])) + tlv(0x79, tlv(0x4F, Array(Self.aid.prefix(5))))
    return (tlv(0x61, apt), 0x9000)
  }

  func getResponse() -> ([UInt8], UInt16) {
    guard !pendingResponse.isEmpty else { return ([], 0x6985) }
    let chunk = Array(pendingResponse.prefix(256))
    pendingResponse = Array(pendingResponse.dropFirst(256))
    if pendingResponse.isEmpty { return (chunk, 0x9000) }
    return (chunk, 0x6100 | UInt16(min(pendingResponse.count, 255)))
  }
}

func sw(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
func hexKey(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
