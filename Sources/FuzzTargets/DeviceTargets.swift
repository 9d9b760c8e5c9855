import Foundation
import TokenDevices
import VirtualTokens

/// BER-TLV, and what a card answers: the APDU layer (61xx GET RESPONSE, 6Cxx re-send, chaining) and the PIV
/// session's response parsers, over a transport that plays the fuzz data back as the card's responses.
enum APDUTarget {
  /// A card whose answers are the fuzz data: each response is a length byte and that many bytes (data ‖ SW).
  /// When the data is used up the card is gone (and a reconnect finds no card).
  final class ScriptedCard: SmartCardTransport {
    var input: FuzzInput
    let reader = "fuzz"
    let atr: [UInt8]
    var resetOnClose = false
    var transmits = 0
    init(_ input: FuzzInput, atr: [UInt8]) {
      self.input = input
      self.atr = atr
    }
    func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8] {
      transmits += 1
      guard !input.isEmpty else { throw .cardRemoved(reader: reader) }
      let n = Int(input.byte())
      return input.take(n)
    }
    func reconnect() throws(SmartCardError) { throw .noCard(reader: reader) }
    func beginTransaction() throws(SmartCardError) {}
    func endTransaction() {}
  }

  // ATRs with and without extended length (YubiKey 5 NFC's and a plain one).
  static let atrs: [[UInt8]] = [
    [
      0x3B, 0xFD, 0x13, 0x00, 0x00, 0x81, 0x31, 0xFE, 0x15, 0x80, 0x73, 0xC0, 0x21, 0xC0, 0x57, 0x59, 0x75, 0x62,
      0x69, 0x4B, 0x65, 0x79, 0x40,
    ],
    [0x3B, 0x88, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09],
  ]

  static func run(_ data: [UInt8]) {
    var input = FuzzInput(data)
    let selector = input.byte()
    switch selector % 4 {
    case 0: berTLV(input.rest())
    case 1:
      // One logical command through SmartCardProtocol, data long enough to need chaining when asked.
      let card = ScriptedCard(input, atr: atrs[Int(selector >> 2) & 1])
      let proto = SmartCardProtocol(transport: card)
      let long = selector & 0x10 != 0
      let apdu = APDU(ins: 0xCB, p1: 0x3F, p2: 0xFF, data: [UInt8](repeating: 0x5C, count: long ? 600 : 5), le: 0)
      if let r = try? proto.send(apdu) {
        // A 61xx answer to a chunk before the last one ends the chain as it is (callers see a failure status).
        check(
          !r.statusWord.isMoreDataAvailable || (long && proto.transmitCount < 3),
          "a 61xx status word was returned as final")
      }
      check(proto.transmitCount <= 3 + 1 + 256 + 1, "unbounded GET RESPONSE loop: \(proto.transmitCount) APDUs")
    default:
      // The PIV session's parsers over the same scripted card.
      let card = ScriptedCard(input, atr: atrs[Int(selector >> 2) & 1])
      let session = PIVSession(transport: card)
      let op = selector >> 3
      switch op % 6 {
      case 0: _ = try? session.pinStatus(.pin)
      case 1: _ = try? session.pinStatus(.puk)
      case 2: _ = try? session.identity()
      case 3: _ = try? session.metadata(.authentication)
      case 4:
        if let point = try? session.generateKey(.init(rawValue: 0x82)) { check(point.first == 0x04, "not a point") }
      default:
        _ = try? session.sign(.signature, digest: [UInt8](repeating: 1, count: 32))
        _ = try? session.readObject(0x5FC102)
        _ = try? session.managementKeyAlgorithm()
      }
      check(card.transmits <= 6 * 262, "unbounded exchange: \(card.transmits) APDUs")
    }
  }

  static func berTLV(_ data: [UInt8]) {
    guard let tlvs = BERTLV.parse(data) else { return }
    // Lengths re-encode minimally, so compare values: parsing the re-encoding gives the same elements.
    let again = tlvs.flatMap { BERTLV.encode($0.tag, $0.value) }
    guard let reparsed = BERTLV.parse(again) else { return check(false, "re-encoded BER-TLV does not parse") }
    check(reparsed.map(\.tag) == tlvs.map(\.tag) && reparsed.map(\.value) == tlvs.map(\.value), "BER-TLV round trip")
    check(tlvs.reduce(0) { $0 + $1.value.count } <= data.count, "values longer than the input")
    if let first = tlvs.first { check(BERTLV.find(first.tag, in: data) == first.value, "find disagrees with parse") }
  }
}

/// The virtual FIDO2 key's CBOR decoder (it reads what any client sends the key).
enum CTAPCBORTarget {
  static func run(_ data: [UInt8]) {
    guard let item = try? CBOR.decode(data) else { return }
    let encoded = item.encoded()
    check(encoded.count <= data.count, "canonical encoding longer than the input")
    // Map keys come back sorted (canonical CTAP2 order), so the encoding is a fixed point, not the input.
    check((try? CBOR.decode(encoded))?.encoded() == encoded, "canonical CBOR does not round-trip")
    _ = item.int
    _ = item[int: 1]
  }
}
