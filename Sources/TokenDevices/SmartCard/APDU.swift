import Platform

/// A command APDU (ISO 7816-4 §5.1). Encoded short unless data or Le exceed short limits.
public struct APDU: Sendable, Equatable {
  public var cla: UInt8
  public var ins: UInt8
  public var p1: UInt8
  public var p2: UInt8
  public var data: [UInt8]
  /// Expected response length; `nil` = no Le (case 1/3), `0` = up to 256 (or 65536 extended).
  public var le: Int?
  /// The data field carries a secret (PIN, PUK, management-key material): traces show it as `<redacted>`.
  public var isSensitive: Bool

  public init(
    cla: UInt8 = 0x00, ins: UInt8, p1: UInt8 = 0, p2: UInt8 = 0, data: [UInt8] = [], le: Int? = nil,
    sensitive: Bool = false
  ) {
    self.cla = cla
    self.ins = ins
    self.p1 = p1
    self.p2 = p2
    self.data = data
    self.le = le
    self.isSensitive = sensitive
  }

  /// Short encoding (data ≤ 255 bytes); longer data must go through command chaining first.
  public func encoded(extended: Bool = false) -> [UInt8] {
    var out: [UInt8] = [cla, ins, p1, p2]
    if extended && (data.count > 255 || (le ?? 0) > 256) {
      out.append(0)
      if !data.isEmpty { out += [UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data }
      if let le { out += [UInt8((le >> 8) & 0xFF), UInt8(le & 0xFF)] }
      return out
    }
    if !data.isEmpty { out += [UInt8(data.count)] + data }
    if let le { out.append(UInt8(le & 0xFF)) }
    return out
  }

  /// The bytes to show in a trace: header in the clear, a sensitive body replaced.
  public var traceDescription: String {
    let header = [cla, ins, p1, p2].hexString
    if data.isEmpty { return le == nil ? header : header + " Le=\(le!)" }
    let body = isSensitive ? "<redacted \(data.count) bytes>" : data.hexString
    return "\(header) Lc=\(data.count) \(body)"
  }
}

/// A response APDU: data and status word.
public struct APDUResponse: Sendable, Equatable {
  public var data: [UInt8]
  public var statusWord: StatusWord
  public init(data: [UInt8], statusWord: StatusWord) {
    self.data = data
    self.statusWord = statusWord
  }
  /// Splits raw bytes `data ‖ SW1 SW2`.
  public init(raw: [UInt8]) throws(SmartCardError) {
    guard raw.count >= 2 else { throw .malformedResponse(raw.count) }
    data = Array(raw.dropLast(2))
    statusWord = StatusWord(raw[raw.count - 2], raw[raw.count - 1])
  }
}
