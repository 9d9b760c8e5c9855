import CFido2

/// The PIN (CTAP 2.1 §6.5 authenticatorClientPIN) through libfido2: tries, status, set and change.
extension FIDO2Session {
  /// PIN tries left (getPINRetries, `fido_dev_get_retry_count`; spends none). The reading also tells the
  /// cool-down memory what happened since the last one (`FIDO2CoolDown.observe`).
  public func pinRetries() throws(TokenError) -> Int {
    trace?("fido2 > clientPIN getPINRetries")
    var n: Int32 = 0
    let rc = try call("getPINRetries", deadlines.probeMs) { fido_dev_get_retry_count($0, &n) }
    guard rc == FIDO_OK else { throw mapped(rc, "getPINRetries") }
    trace?("fido2 < getPINRetries: \(n)")
    coolDown.observe(retries: Int(n), for: ref)
    return Int(n)
  }

  /// Built-in user verification tries left (getUVRetries), for keys with UV (fingerprint); nil otherwise.
  public func uvRetries(_ info: FIDO2Info) -> Int? {
    guard info.options["uv"] != nil else { return nil }
    var n: Int32 = 0
    guard let rc = try? call("getUVRetries", deadlines.probeMs, { fido_dev_get_uv_retry_count($0, &n) }),
      rc == FIDO_OK
    else { return nil }
    return Int(n)
  }

  /// The PIN status in the shape every token shares, with the cool-down as far as it is known
  /// (`powerCycleRequired`: false when nothing known says so).
  public func pinStatus() throws(TokenError) -> PINStatus {
    let left = try pinRetries()
    return PINStatus(kind: .pin, retriesLeft: left, maxRetries: 8, powerCycleRequired: powerCycleRequired)
  }

  /// setPIN (no PIN yet) or changePIN (`fido_dev_set_pin`). A wrong current PIN throws `.wrongPIN` with the tries
  /// read afterwards.
  public func setPIN(_ new: [UInt8], old: [UInt8]?) throws(TokenError) {
    let operation = old == nil ? "setPIN" : "changePIN"
    guard new.count <= 63 else { throw .pinFormat(.pin, .tooLong(maximum: 63)) }
    trace?("fido2 > clientPIN \(operation) <redacted>")
    let rc = try call(operation, deadlines.commandMs) { dev in
      Self.withCString(new) { n in Self.withCString(old) { o in fido_dev_set_pin(dev, n, o) } }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, operation) }
    if old != nil { coolDown.pinAccepted(for: ref) }
    infoChanged()  // clientPin is now true, forcePINChange false
  }

  /// Whether the key takes authenticatorConfig's setMinPINLength (getInfo options `authnrCfg` and `setMinPINLength`
  /// true; CTAP 2.1 §6.11.4), so `forcePINChange` can be asked of it.
  public static func canForcePINChange(_ info: FIDO2Info) -> Bool {
    info.options["authnrCfg"] == true && info.options["setMinPINLength"] == true
  }

  /// Asks the key to refuse its PIN until it is changed (authenticatorConfig setMinPINLength with forceChangePin,
  /// `fido_dev_force_pin_change`: a token with the acfg permission from `pin`). Afterwards getInfo's
  /// forcePINChange is true and every PIN token request fails with PIN_POLICY_VIOLATION until changePIN.
  public func forcePINChange(pin: [UInt8]) throws(TokenError) {
    trace?("fido2 > authenticatorConfig setMinPINLength forceChangePin <redacted PIN>")
    let rc = try call("authenticatorConfig", deadlines.commandMs) { dev in
      Self.withCString(pin) { p in fido_dev_force_pin_change(dev, p) }
    }
    trace?("fido2 < \(rc == FIDO_OK ? "OK" : String(cString: fido_strerr(rc)))")
    guard rc == FIDO_OK else { throw pinAwareError(rc, "authenticatorConfig") }
    coolDown.pinAccepted(for: ref)
    infoChanged()  // forcePINChange is now true
  }
}
