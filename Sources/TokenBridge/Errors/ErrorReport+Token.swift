import TokenDevices

/// The device layer's errors (TokenError, SmartCardError): what the token or PC/SC said, and what to do.
extension ErrorReport {
  static func token(_ e: TokenError) -> ErrorReport {
    switch e {
    case .smartCard(let s): return smartCard(s)
    case .wrongPIN(let k, let left):
      return .init(status: .wrongPIN, message: "Wrong \(k.rawValue); \(triesLeft(left)).")
    case .pinBlocked(.pin):
      return .init(status: .pinBlocked, message: "The PIN is blocked. Unblock it with the PUK: tokenbridge pin unblock")
    case .pinBlocked(.puk): return .init(status: .pukBlocked, message: "The PUK is blocked.")
    case .needsReinsertion:
      return .init(
        status: .needsReinsertion,
        message: "Too many wrong PINs in a row: remove and re-insert your key, then try again.")
    case .pinNotSet: return .init(status: .pinNotSet, message: "This key has no PIN yet. Set one: tokenbridge pin set")
    case .pinChangeRequired:
      return .init(status: .pinNotSet, message: "The key wants a new PIN before it is used: tokenbridge pin change")
    case .cancelled: return .init(status: .cancelled, message: "Cancelled; nothing was done.")
    case .touchTimeout: return .init(status: .timedOut, message: "The key was not touched in time; nothing was done.")
    case .resetNotAllowed:
      return .init(
        status: .resetWindowMissed,
        message: "The key refused the reset: a key takes it only within a few seconds (10 in CTAP 2.1) of being "
          + "plugged in. Nothing was erased. Run again and touch the key as soon as it is back.")
    case .touchDenied:
      return .init(status: .cancelled, message: "The key refused the request (touch denied); nothing was done.")
    case .fido2(let code, let op):
      return .init(
        status: .failure,
        message: "The key refused \(op) (\(TokenError.fido2Message(code))). Run again with --trace, or set "
          + "FIDO_DEBUG=1 to see the exchange.", code: "libfido2 \(code)")
    case .libraryMissing(let l): return library(l)
    case .pinFormat(let k, .tooShort(let n)):
      return .init(
        status: .policyViolation,
        message: "The \(k.rawValue) is too short: at least \(n) characters. Nothing was sent; no try was spent.")
    case .pinFormat(let k, .tooLong(let n)):
      return .init(
        status: .policyViolation,
        message: "The \(k.rawValue) is too long: at most \(n) characters. Nothing was sent; no try was spent.")
    case .pinFormat(let k, .refusedByToken(let sw)):
      return .init(
        status: .policyViolation, message: "The token refuses this \(k.rawValue) as malformed; choose another.",
        code: sw.map { "SW \($0)" })
    case .noCredential(let op):
      return .init(
        status: .unknownKey,
        message: "The key holds no credential for this request (\(op)): was it reset, or is it another key?")
    case .noAnswer(let op):
      return .init(
        status: .timedOut, message: "The token did not answer (\(op)) in time: remove and re-insert it, then try again."
      )
    case .notPIV(let reader):
      return .init(status: .unsupportedToken, message: "The card in \(shown(reader)) is not a PIV card.")
    case .managementKeyRejected:
      return .init(
        status: .managementKeyRejected,
        message: "The management key was not accepted; nothing was changed on the token.")
    case .slotEmpty(let s):
      return .init(status: .unsupportedToken, message: "Slot \(PIVSlot(rawValue: s)) holds no key.")
    case .securityStatusNotSatisfied(let op):
      return .init(status: .failure, message: "The token refused \(op): it needs the PIN or the management key first.")
    case .unexpectedStatus(let sw, let op):
      return .init(
        status: .failure,
        message: "The token refused \(op) (status \(sw)). Run again with --trace to see the exchange.",
        code: "SW \(sw)")
    case .malformedResponse(let op):
      return .init(
        status: .failure, message: "The token's answer to \(op) could not be read. Run again with --trace to see it.")
    case .unsupported(let what):
      return .init(status: .unsupportedToken, message: "This token does not support \(what).")
    }
  }

  static func smartCard(_ e: SmartCardError) -> ErrorReport {
    switch e {
    case .serviceUnavailable:
      return .init(
        status: .serviceUnavailable,
        message: "The PC/SC service (pcscd) is not running. Start it (sudo systemctl start pcscd.socket, or run "
          + "pcscd as root) and try again.")
    case .serviceUnresponsive:
      return .init(
        status: .serviceUnavailable,
        message: "The PC/SC service (pcscd) does not answer: it runs but is stopped or hung. Restart it (sudo "
          + "systemctl restart pcscd) and try again.")
    case .noReaders:
      return .init(status: .noToken, message: "No smart-card reader found. Plug in your token and try again.")
    case .noCard(let r): return .init(status: .noToken, message: "Reader \(shown(r)) holds no card.")
    case .cardRemoved(let r):
      return .init(
        status: .tokenRemoved,
        message: "The token was removed\(r.isEmpty ? "" : " from \(shown(r))") during the operation; it may not have "
          + "completed. Insert it and check with tokenbridge pin status.")
    case .unknownReader(let r): return .init(status: .tokenRemoved, message: "Reader \(shown(r)) is gone.")
    case .malformedResponse(let n):
      return .init(status: .failure, message: "The card sent a malformed answer (\(n) bytes).")
    case .responseTooLong: return .init(status: .failure, message: "The card's answer did not end.")
    case .pcsc(let st, let call):
      return .init(
        status: .failure,
        message: "The smart-card service failed (\(call) returned \(st)). Re-insert the token and try again.",
        code: "PC/SC \(st)")
    case .libraryMissing(let l): return library(l)
    }
  }

  /// One line per reason a token found by discovery cannot be used (for listings).
  public static func unusable(_ e: TokenError) -> String {
    switch e {
    case .notPIV: "not a PIV card"
    default: token(e).message
    }
  }

  /// Why a token's answer leaves a PIN's or PUK's tries unknown (a status line's "PUK: …"). A PIV PUK's tries
  /// are told only by YubiKey's GET METADATA (SP 800-73-4 §3.2.3 has no status form of RESET RETRY COUNTER,
  /// unlike VERIFY's empty body for the PIN), so a card without it cannot show them without spending a try.
  public static func untoldTries(_ kind: PINKind) -> String {
    switch kind {
    case .puk:
      "not told by this card (it has no GET METADATA, a YubiKey extension, and standard PIV reads a PUK's tries "
        + "only by spending one; a wrong PUK shows them)"
    case .pin: "not told by this card (it answered the empty VERIFY without a count)"
    }
  }
}
