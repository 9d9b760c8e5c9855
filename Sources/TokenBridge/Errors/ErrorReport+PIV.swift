import TokenDevices

extension ErrorReport {
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
