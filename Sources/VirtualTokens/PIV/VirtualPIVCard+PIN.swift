/// VERIFY, CHANGE REFERENCE DATA, RESET RETRY COUNTER (SP 800-73-4 Part 2 §3.2.1-3.2.3) with YubiKey's
/// rules: 6-8 byte values, 63Cx on a wrong value, 6983 once blocked.
extension VirtualPIVCard {
  func verify(p1: UInt8, p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p2 == 0x80 else { return ([], 0x6A88) }
    if p1 == 0xFF {  // reset the verified state (SP 800-73-4 §3.2.1, YubiKey 5.4.3+)
      guard firmware >= 5_04_03 else { return ([], 0x6A86) }
      guard data.isEmpty else { return ([], 0x6A80) }
      pinVerified = false
      return ([], 0x9000)
    }
    guard p1 == 0x00 else { return ([], 0x6A86) }
    if data.isEmpty {
      if pinVerified { return ([], 0x9000) }
      return ([], state.pinRetries == 0 ? 0x6983 : 0x63C0 | UInt16(state.pinRetries))
    }
    guard data.count == 8 else { return ([], 0x6A80) }
    guard state.pinRetries > 0 else { return ([], 0x6983) }
    if constantTimeEqual(Self.pad(state.pin), data) {
      pinVerified = true
      if state.pinRetries != state.pinMaxRetries {
        state.pinRetries = state.pinMaxRetries
        changed()
      }
      return ([], 0x9000)
    }
    pinVerified = false
    state.pinRetries -= 1
    changed()
    return ([], 0x63C0 | UInt16(state.pinRetries))
  }

  func changeReference(p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p2 == 0x80 || p2 == 0x81 else { return ([], 0x6A88) }
    guard data.count == 16 else { return ([], 0x6A80) }
    let isPIN = p2 == 0x80
    let retries = isPIN ? state.pinRetries : state.pukRetries
    guard retries > 0 else { return ([], 0x6983) }
    let current = Self.pad(isPIN ? state.pin : state.puk)
    guard constantTimeEqual(current, Array(data[0..<8])) else {
      if isPIN {
        state.pinRetries -= 1
        pinVerified = false
      } else {
        state.pukRetries -= 1
      }
      changed()
      return ([], 0x63C0 | UInt16(retries - 1))
    }
    guard let new = Self.unpad(Array(data[8..<16])), (6...8).contains(new.count) else { return ([], 0x6A80) }
    if isPIN {
      state.pin = new
      state.pinRetries = state.pinMaxRetries
      state.pinIsDefault = false
      pinVerified = true
    } else {
      state.puk = new
      state.pukRetries = state.pukMaxRetries
      state.pukIsDefault = false
    }
    changed()
    return ([], 0x9000)
  }

  func resetRetryCounter(p2: UInt8, data: [UInt8]) -> ([UInt8], UInt16) {
    guard p2 == 0x80 else { return ([], 0x6A88) }
    guard data.count == 16 else { return ([], 0x6A80) }
    guard state.pukRetries > 0 else { return ([], 0x6983) }
    guard constantTimeEqual(Self.pad(state.puk), Array(data[0..<8])) else {
      state.pukRetries -= 1
      changed()
      return ([], 0x63C0 | UInt16(state.pukRetries))
    }
    guard let new = Self.unpad(Array(data[8..<16])), (6...8).contains(new.count) else { return ([], 0x6A80) }
    state.pin = new
    state.pinRetries = state.pinMaxRetries
    state.pukRetries = state.pukMaxRetries
    state.pinIsDefault = false
    changed()
    return ([], 0x9000)
  }

  /// Yubico SET PIN RETRIES (00 FA pin puk): management key and PIN first; resets PIN and PUK to defaults.
  func setPINRetries(p1: UInt8, p2: UInt8) -> ([UInt8], UInt16) {
    guard managementAuthenticated, pinVerified else { return ([], 0x6982) }
    guard (1...15).contains(p1), (1...15).contains(p2) else { return ([], 0x6A86) }
    state.pinMaxRetries = Int(p1)
    state.pukMaxRetries = Int(p2)
    state.pinRetries = Int(p1)
    state.pukRetries = Int(p2)
    state.pin = PIVCardState.defaultPIN
    state.puk = PIVCardState.defaultPUK
    state.pinIsDefault = true
    state.pukIsDefault = true
    changed()
    return ([], 0x9000)
  }

  /// Yubico RESET (00 FB): only when PIN and PUK are both blocked.
  func reset() -> ([UInt8], UInt16) {
    guard state.pinRetries == 0, state.pukRetries == 0 else { return ([], 0x6985) }
    state = .factory(serial: state.serial, version: state.version, managementAlgorithm: state.managementAlgorithm)
    powerCycle()
    changed()
    return ([], 0x9000)
  }

  static func pad(_ v: [UInt8]) -> [UInt8] { v + [UInt8](repeating: 0xFF, count: max(0, 8 - v.count)) }

  /// Strips FF padding; nil when padding is followed by non-FF bytes.
  static func unpad(_ v: [UInt8]) -> [UInt8]? {
    guard let end = v.firstIndex(of: 0xFF) else { return v }
    guard v[end...].allSatisfy({ $0 == 0xFF }) else { return nil }
    return Array(v[..<end])
  }
}

func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
  guard a.count == b.count else { return false }
  var diff: UInt8 = 0
  for i in a.indices { diff |= a[i] ^ b[i] }
  return diff == 0
}
