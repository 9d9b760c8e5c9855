import TokenBridge
import TokenDevices
import UAFCore

/// Every message a person sees about a failure is made here, with its exit status.
enum ErrorReport {
  static func describe(_ error: Error) -> (message: String, status: ExitStatus) {
    switch error {
    case let e as OperationError: return operation(e)
    case let e as TokenError: return token(e)
    case let e as SmartCardError: return smartCard(e)
    case InteractionError.cancelled: return ("Cancelled.", .cancelled)
    case InteractionError.timedOut: return ("No answer within the time allowed; nothing was changed.", .timedOut)
    case let e as InputError: return (e.message, e.status)
    default: return ("Unexpected error: \(error)", .failure)
    }
  }

  static func operation(_ e: OperationError) -> (String, ExitStatus) {
    switch e {
    case .cancelled: return ("Cancelled; nothing was changed on the token.", .cancelled)
    case .timedOut: return ("No answer within the time allowed; nothing was changed.", .timedOut)
    case .blocked(.pin, let t):
      return (
        "The PIN of \(t.id) is blocked. Unblock it with the PUK: tokenbridge pin unblock --token \(t.id)",
        .pinBlocked
      )
    case .blocked(.puk, let t):
      return (
        "The PUK of \(t.id) is blocked. Only a reset of the PIV application (which erases its keys) helps now.",
        .pukBlocked
      )
    case .noToken(let readers, let empty, let unusable):
      if readers == 0 { return ("No smart-card reader found. Plug in your token and try again.", .noToken) }
      var lines = ["No PIV token found."]
      for r in empty { lines.append("  \(r): no card") }
      for u in unusable { lines.append("  \(u)") }
      // A card is there but is not one we can use: say so with its own code.
      return (lines.joined(separator: "\n"), unusable.isEmpty ? .noToken : .unsupportedToken)
    case .tokenNotFound(let id, let available):
      let list = available.isEmpty ? "none" : available.map(\.id).joined(separator: ", ")
      return ("No token \(id). Tokens present: \(list).", .noToken)
    case .ambiguous(let tokens):
      let list = tokens.map { "  \($0.id)  \($0.name)  (\($0.reader ?? ""))" }.joined(separator: "\n")
      return ("Several tokens are present; choose one with --token ID:\n\(list)", .noToken)
    case .slotOccupied(let slot):
      return ("Slot \(slot) already holds a key; nothing was changed. Use --force to overwrite it.", .slotOccupied)
    case .token(let t): return token(t)
    case .interaction(let e): return describe(e)
    case .localData(let e):
      switch e {
      case .unavailable(let path, let reason): return ("Local data \(path) cannot be used: \(reason)", .localData)
      case .notFound(let k): return ("No local registration with KeyID \(k).", .unknownKey)
      }
    case .noFreeSlot(let t):
      return ("Every PIV slot TokenBridge may use on \(t) is taken (see pivSlots in the configuration).", .failure)
    case .configuration(let c): return configuration(c)
    case .backend(let b): return backend(b)
    case .message(let m):
      switch m {
      case .malformed(let d): return ("The UAF message is malformed: \(d).", .badMessage)
      case .unsupportedVersion(let v):
        return (
          "No request in a UAF version this client speaks (1.0, 1.1); got \(v.map { "\($0.major).\($0.minor)" }.joined(separator: ", ")).",
          .badMessage
        )
      case .tooLarge(let n): return ("The UAF message is too large (\(n) bytes).", .badMessage)
      }
    case .facet(let f):
      switch f {
      case .untrustedFacet(let facet, let app):
        return (
          "The server's appID \(app) does not trust this client's facet ID \(facet); nothing was signed.",
          .untrustedFacet
        )
      case .invalidAppID(let a): return ("The appID \(a) is not an https URL; nothing was signed.", .untrustedFacet)
      case .facetListUnavailable(let why): return ("The trusted-facets list could not be read: \(why)", .untrustedFacet)
      }
    case .noSuitableAuthenticator(let why):
      var lines = ["No token here fits the server's policy."]
      for (k, reasons) in why.sorted(by: { $0.key < $1.key }) {
        lines.append("  \(k): " + Array(Set(reasons)).sorted().joined(separator: "; "))
      }
      return (lines.joined(separator: "\n"), .noSuitableAuthenticator)
    case .transaction(let p):
      switch p {
      case .unsupportedType(let t):
        return ("The transaction to confirm is \(t), which this client cannot show; nothing was signed.", .badMessage)
      case .notBase64URL, .notUTF8: return ("The transaction text is malformed; nothing was signed.", .badMessage)
      }
    case .notRegistered(let what): return ("No registration for \(what).", .unknownKey)
    case .ambiguousAccount(let recs):
      let list = recs.map { "  \($0.username) (\($0.tokenID))" }.joined(separator: "\n")
      return ("Several accounts can sign in; name one with --username:\n\(list)", .noToken)
    }
  }

  static func token(_ e: TokenError) -> (String, ExitStatus) {
    switch e {
    case .smartCard(let s): return smartCard(s)
    case .wrongPIN(let k, let left): return ("Wrong \(k.rawValue); \(Render.triesLeft(left)).", .wrongPIN)
    case .pinBlocked(.pin): return ("The PIN is blocked. Unblock it with the PUK: tokenbridge pin unblock", .pinBlocked)
    case .pinBlocked(.puk): return ("The PUK is blocked.", .pukBlocked)
    case .needsReinsertion:
      return ("Too many wrong PINs in a row: remove and re-insert your key, then try again.", .needsReinsertion)
    case .pinNotSet: return ("This key has no PIN yet. Set one: tokenbridge pin set", .pinNotSet)
    case .pinChangeRequired:
      return ("The key wants a new PIN before it is used: tokenbridge pin change", .pinNotSet)
    case .cancelled: return ("Cancelled; nothing was done.", .cancelled)
    case .touchTimeout: return ("The key was not touched in time; nothing was done.", .timedOut)
    case .touchDenied: return ("The key refused the request (touch denied); nothing was done.", .cancelled)
    case .fido2(let code, let op):
      return (
        "The key refused \(op) (\(TokenError.fido2Message(code))). Run again with --trace, or set FIDO_DEBUG=1 to "
          + "see the exchange.", .failure
      )
    case .pinFormat(let k, .tooShort(let n)):
      return ("The \(k.rawValue) is too short: at least \(n) characters; no try was spent.", .policyViolation)
    case .pinFormat(let k, .tooLong(let n)):
      return ("The \(k.rawValue) is too long: at most \(n) characters; no try was spent.", .policyViolation)
    case .pinFormat(let k, .refusedByToken(let sw)):
      return (
        "The token refuses this \(k.rawValue) as malformed\(sw.map { " (status \($0))" } ?? ""); choose another.",
        .policyViolation
      )
    case .notPIV(let reader): return ("The card in \(reader) is not a PIV card.", .unsupportedToken)
    case .managementKeyRejected:
      return ("The management key was not accepted; nothing was changed on the token.", .managementKeyRejected)
    case .slotEmpty(let s): return ("Slot \(PIVSlot(rawValue: s)) holds no key.", .unsupportedToken)
    case .noCredential(let op):
      return ("The key holds no credential for this request (\(op)): was it reset, or is it another key?", .unknownKey)
    case .noAnswer(let op):
      return ("The token did not answer (\(op)) in time: remove and re-insert it, then try again.", .timedOut)
    case .securityStatusNotSatisfied(let op):
      return ("The token refused \(op): it needs the PIN or the management key first.", .failure)
    case .unexpectedStatus(let sw, let op):
      return ("The token refused \(op) (status \(sw)). Run again with --trace to see the exchange.", .failure)
    case .malformedResponse(let op):
      return ("The token's answer to \(op) could not be read. Run again with --trace to see it.", .failure)
    case .unsupported(let what): return ("This token does not support \(what).", .unsupportedToken)
    }
  }

  static func configuration(_ c: ConfigurationError) -> (String, ExitStatus) {
    switch c {
    case .noServer: return ("No server: pass --server URL or set \"server\" in the configuration file.", .configuration)
    case .insecureServer(let s):
      return ("\(s): only https:// servers (http:// only on this machine's loopback).", .configuration)
    case .invalidServer(let s): return ("\(s) is not a server URL.", .configuration)
    case .unreadable(let path, let reason):
      return ("The configuration \(path) cannot be read: \(reason)", .configuration)
    }
  }

  static func backend(_ b: BackendError) -> (String, ExitStatus) {
    switch b {
    case .uafStatus(1481, _):
      return ("The server does not know this key any more (1481): \(UAFStatus.meaning(1481)).", .unknownKey)
    case .uafStatus(let code, let d):
      return (
        "The server refused: \(code) \(UAFStatus.meaning(code))\(d.map { " (\(TransactionContent.sanitized($0)))" } ?? "").",
        .serverRefused
      )
    case .http(let code): return ("The server answered HTTP \(code).", .serverUnreachable)
    case .timedOut(let url): return ("The server did not answer in time (\(url)).", .serverUnreachable)
    case .unreachable(let why): return ("The server cannot be reached: \(why)", .serverUnreachable)
    case .malformedAnswer(let why):
      return ("The server's answer is not what the protocol says: \(why).", .serverUnreachable)
    }
  }

  static func smartCard(_ e: SmartCardError) -> (String, ExitStatus) {
    switch e {
    case .serviceUnavailable:
      return (
        "The PC/SC service (pcscd) is not running. Start it (sudo systemctl start pcscd.socket, or run pcscd as "
          + "root) and try again.", .serviceUnavailable
      )
    case .noReaders: return ("No smart-card reader found. Plug in your token and try again.", .noToken)
    case .noCard(let r): return ("Reader \(r) holds no card.", .noToken)
    case .cardRemoved(let r):
      return (
        "The token was removed\(r.isEmpty ? "" : " from \(r)") during the operation; it may not have completed. "
          + "Insert it and check with tokenbridge pin status.", .tokenRemoved
      )
    case .unknownReader(let r): return ("Reader \(r) is gone.", .tokenRemoved)
    case .malformedResponse(let n): return ("The card sent a malformed answer (\(n) bytes).", .failure)
    case .responseTooLong: return ("The card's answer did not end.", .failure)
    case .pcsc(let st, let call):
      return ("The smart-card service failed (\(call) returned \(st)). Re-insert the token and try again.", .failure)
    }
  }

  static func recoverable(_ e: PinChangeRecoverableError, _ op: PinOperation) -> String {
    switch e {
    case .invalidNew(let v): "The new \(op.target.rawValue) cannot be used: \(v). Nothing was sent to the token."
    case .invalidCurrent(let reason): "That \(op.authorizing.rawValue) cannot be right: \(reason). Nothing was sent."
    case .wrongCurrent(let left): "Wrong \(op.authorizing.rawValue); \(Render.triesLeft(left))."
    }
  }

  static func recoverable(_ e: PinVerificationRecoverableError) -> String {
    switch e {
    case .wrongPin(let left): "Wrong PIN; \(Render.triesLeft(left))."
    case .invalidPin(let reason): "That PIN cannot be right: \(reason). Nothing was sent."
    }
  }
}

/// A failure of the CLI's own input (e.g. --pin-fd ran dry).
struct InputError: Error {
  var message: String
  var status: ExitStatus
}
