import Platform

/// Moves raw APDU bytes to one card. `PCSCCard` is the real one; tests may put a recorder in front of it.
public protocol SmartCardTransport: AnyObject {
  var reader: String { get }
  var atr: [UInt8] { get }
  func transmit(_ command: [UInt8]) throws(SmartCardError) -> [UInt8]
  func reconnect() throws(SmartCardError)
  func beginTransaction() throws(SmartCardError)
  func endTransaction()
  /// Set once a PIN or management key was verified: disconnecting then resets the card
  /// (`SCARD_RESET_CARD`), so no other program inherits the verified state (yubico-piv-tool does the same).
  var resetOnClose: Bool { get set }
}

/// Where `--trace` lines go. The sink never sees secrets: sensitive bodies are redacted before it is called.
public typealias TraceSink = (String) -> Void

/// The small processors every card application shares, stacked over one transport (ISO 7816-4 §5.1.1
/// command chaining, §7.1 GET RESPONSE on 61xx, 6Cxx re-send with the right Le).
public final class SmartCardProtocol {
  public let transport: SmartCardTransport
  public var trace: TraceSink?
  /// APDUs put on the wire (every chunk and GET RESPONSE counts); read by `Tools/bench`.
  public private(set) var transmitCount = 0
  /// Use extended-length APDUs instead of chaining (only where the card says it supports them).
  public var useExtendedLength = false

  public init(transport: SmartCardTransport, trace: TraceSink? = nil) {
    self.transport = transport
    self.trace = trace
  }

  /// Sends one logical command; returns the whole response after chaining and GET RESPONSE.
  public func send(_ apdu: APDU) throws(SmartCardError) -> APDUResponse {
    var apdu = apdu
    if apdu.data.count > 255 && !useExtendedLength {
      let chunks = stride(from: 0, to: apdu.data.count, by: 255).map {
        Array(apdu.data[$0..<min($0 + 255, apdu.data.count)])
      }
      for chunk in chunks.dropLast() {
        var part = apdu
        part.cla |= 0x10
        part.data = chunk
        part.le = nil
        let r = try exchange(part)
        guard r.statusWord == .success else { return r }
      }
      apdu.data = chunks.last!
    }
    var response = try exchange(apdu)
    if response.statusWord.sw1 == 0x6C {
      apdu.le = Int(response.statusWord.sw2)
      response = try exchange(apdu)
    }
    var data = response.data
    var rounds = 0
    while response.statusWord.isMoreDataAvailable {
      rounds += 1
      guard rounds <= 256 else { throw .responseTooLong }
      let le = Int(response.statusWord.sw2)
      response = try exchange(
        APDU(cla: apdu.cla & 0x0F, ins: 0xC0, le: le, sensitive: apdu.isSensitive))
      data += response.data
    }
    return APDUResponse(data: data, statusWord: response.statusWord)
  }

  private func exchange(_ apdu: APDU) throws(SmartCardError) -> APDUResponse {
    trace?("> \(apdu.traceDescription)")
    transmitCount += 1
    let raw = try transport.transmit(apdu.encoded(extended: useExtendedLength))
    let response = try APDUResponse(raw: raw)
    if let trace {
      let body =
        response.data.isEmpty
        ? "" : (apdu.isSensitive ? "<redacted \(response.data.count) bytes> " : response.data.hexString + " ")
      trace("< \(body)\(response.statusWord)")
    }
    return response
  }
}
