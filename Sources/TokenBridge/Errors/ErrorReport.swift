import FoundationEssentials
import TokenDevices
import UAFCore

/// What a front end shows for an error (the one error model, ARCHITECTURE.md): a stable exit status, a
/// sentence for the user that says what to do, and the raw code underneath (status word, CTAP/libfido2 code,
/// UAF status, HTTP status) when there is one. Every message about a failure is made here, in the library, so
/// the CLI, the enrollment service and any later front end say the same thing. Text that came from a token or a
/// server is passed through `TransactionContent.sanitized` first: it is never interpreted by a terminal.
public struct ErrorReport: Equatable, Sendable {
  public var status: ExitStatus
  public var message: String
  /// The code underneath, e.g. "SW 6A82", "libfido2 -7", "UAF 1498", "HTTP 503".
  public var code: String?

  public init(status: ExitStatus, message: String, code: String? = nil) {
    self.status = status
    self.message = message
    self.code = code
  }

  public init(_ error: Error) {
    switch error {
    case let e as OperationError: self = Self.operation(e)
    case let e as TokenError: self = Self.token(e)
    case let e as SmartCardError: self = Self.smartCard(e)
    case let e as InputError: self = Self.input(e)
    case let e as ConfigurationError: self = Self.configuration(e)
    case let e as BackendError: self = Self.backend(e)
    case let e as LocalDataError: self = Self.localData(e)
    case let e as DeviceServiceError: self = Self.device(e)
    case let e as MetadataError: self = Self.metadata(e)
    case InteractionError.cancelled: self.init(status: .cancelled, message: "Cancelled.")
    case InteractionError.timedOut:
      self.init(status: .timedOut, message: "No answer within the time allowed; nothing was changed.")
    default:
      self.init(
        status: .failure, message: "Unexpected error (\(type(of: error))). Please report it with the command you ran.")
    }
  }

  /// Server or token text, made safe to show.
  static func shown(_ s: String) -> String { UntrustedText.displayable(s) }

  static func operation(_ e: OperationError) -> ErrorReport {
    switch e {
    case .cancelled: return .init(status: .cancelled, message: "Cancelled; nothing was changed on the token.")
    case .timedOut:
      return .init(status: .timedOut, message: "No answer within the time allowed; nothing was changed.")
    case .blocked(let kind, let t): return blocked(kind, t)
    case .noToken(let readers, let empty, let unusable):
      if readers == 0 && unusable.isEmpty {
        return .init(status: .noToken, message: "No smart-card reader found. Plug in your token and try again.")
      }
      var lines = ["No usable token found."]
      for r in empty { lines.append("  \(shown(r)): no card") }
      for u in unusable { lines.append("  \(shown(u))") }
      // A card is there but is not one we can use: say so with its own code.
      return .init(status: unusable.isEmpty ? .noToken : .unsupportedToken, message: lines.joined(separator: "\n"))
    case .tokenNotFound(let id, let available):
      let list = available.isEmpty ? "none" : available.map(\.id).joined(separator: ", ")
      return .init(status: .noToken, message: "No token \(shown(id)). Tokens present: \(list).")
    case .ambiguous(let tokens):
      let list = tokens.map { "  \($0.id)  \(shown($0.name))  (\(shown($0.reader ?? "")))" }.joined(separator: "\n")
      return .init(status: .noToken, message: "Several tokens are present; choose one with --token ID:\n\(list)")
    case .slotOccupied(let slot):
      return .init(
        status: .slotOccupied,
        message: "Slot \(slot) already holds a key; nothing was changed. Use --force to overwrite it.")
    case .token(let t): return token(t)
    case .input(let i): return input(i)
    case .localData(let e): return localData(e)
    case .noFreeSlot(let t):
      return .init(
        status: .failure,
        message: "Every PIV slot TokenBridge may use on \(t) is taken (see pivSlots in the configuration).")
    case .configuration(let c): return configuration(c)
    case .backend(let b): return backend(b)
    case .message(let m): return message(m)
    case .facet(let f):
      switch f {
      case .untrustedFacet(let facet, let app):
        return .init(
          status: .untrustedFacet,
          message: "The server's appID \(shown(app)) does not trust this client's facet ID \(shown(facet)); "
            + "nothing was signed.")
      case .invalidAppID(let a):
        return .init(status: .untrustedFacet, message: "The appID \(shown(a)) is not an https URL; nothing was signed.")
      case .facetListUnavailable(let why):
        return .init(status: .untrustedFacet, message: "The trusted-facets list could not be read: \(shown(why))")
      }
    case .noSuitableAuthenticator(let why):
      var lines = ["No token here fits the server's policy."]
      for (k, reasons) in why.sorted(by: { $0.key < $1.key }) {
        lines.append("  \(shown(k)): " + Array(Set(reasons)).sorted().map(shown).joined(separator: "; "))
      }
      return .init(status: .noSuitableAuthenticator, message: lines.joined(separator: "\n"))
    case .transaction(let p):
      switch p {
      case .unsupportedType(let t):
        return .init(
          status: .badMessage,
          message: "The transaction to confirm is \(shown(t)), which this client cannot show; nothing was signed.")
      case .notBase64URL, .notUTF8:
        return .init(status: .badMessage, message: "The transaction text is malformed; nothing was signed.")
      }
    case .notRegistered(let what): return .init(status: .unknownKey, message: "No registration for \(shown(what)).")
    case .choiceNeeded(let accounts, let list):
      let rows = list.map { "  " + selectionLine($0) }.joined(separator: "\n")
      return .init(
        status: .noToken,
        message: accounts
          ? "Several accounts can sign in; name one with --username (or its token with --token ID):\n\(rows)"
          : "Several tokens can be registered; choose one with --token ID:\n\(rows)")
    case .ambiguousAccount(let recs):
      let list = recs.map { "  \(shown($0.username)) (\($0.tokenID))" }.joined(separator: "\n")
      return .init(status: .noToken, message: "Several accounts can sign in; name one with --username:\n\(list)")
    case .pinRefused(let r, _): return refused(r)
    case .usernameMismatch(let asked, let got):
      return .init(
        status: .badMessage,
        message: "The server's request is for the user \"\(shown(got))\", not \"\(shown(asked))\" as asked; "
          + "nothing was signed.")
    case .outOfBand(let o):
      switch o {
      case .malformedPayload(let reason):
        return .init(status: .payloadMalformed, message: "The payload cannot be used: \(reason). Nothing was done.")
      case .decryptionError:
        return .init(
          status: .payloadNotDecryptable,
          message: "The payload is encrypted for another device's key; it cannot be read here. Nothing was done.")
      case .tokenExpired:
        return .init(
          status: .payloadTokenExpired,
          message: "The server no longer knows this token (expired or unknown): ask for a new QR code or link.")
      case .alreadyRedeemed:
        return .init(
          status: .payloadAlreadyRedeemed,
          message: "This token was used already: ask for a new QR code or link.")
      case .insecureRedeemURL(let url):
        return .init(
          status: .payloadMalformed,
          message: "The payload's redeem URL \(shown(url)) is not https (http only on this machine's loopback); "
            + "nothing was contacted.")
      case .qrImage(let q): return qrImage(q)
      }
    case .device(let d): return device(d)
    case .declined: return .init(status: .declined, message: "Not confirmed; nothing was changed.")
    case .differentKey(let id, let expected, let found):
      return .init(
        status: .differentKey,
        message: expected == found
          ? "The key that came back has the same AAGUID but does not know \(id)'s credentials: it is another key of "
            + "the same model. Nothing was reset. Plug in \(id) alone and run again."
          : "The key that came back (AAGUID \(found)) is not \(id) (AAGUID \(expected)). Nothing was reset. "
            + "Plug in \(id) alone and run again.")
    case .provision(let p): return provision(p)
    case .enrollment(let e):
      switch e {
      case .device(let name, .noDevice):
        return .init(status: .noToken, message: "No device \(shown(name)) (unplugged already?); nothing enrolled.")
      case .device(let name, .notUSB):
        return .init(status: .noToken, message: "\(shown(name)) is not a USB device; nothing enrolled.")
      case .notAToken(let bus):
        return .init(
          status: .noToken, message: "USB device \(shown(bus)) has no FIDO or CCID interface; nothing enrolled.")
      case .noReader(let bus, let seconds):
        return .init(
          status: .noToken,
          message: "pcscd listed no reader with a card for USB device \(shown(bus)) within \(seconds) s (is pcscd "
            + "running? tokenbridge doctor); nothing enrolled.")
      case .readerUnknown(let bus, let number, let address, let seconds):
        let said =
          if let number, let address {
            "no PC/SC reader with a card said it is on that device (USB bus \(number), address \(address)) within "
              + "\(seconds) s"
          } else {
            "sysfs gives no bus number and address to match its reader by"
          }
        return .init(
          status: .noToken,
          message: "USB device \(shown(bus)) has no serial number, and \(said): a card in another reader is not taken "
            + "for it. Nothing enrolled, nothing remembered; enroll its card by hand (tokenbridge tokens, then "
            + "register --token ID).")
      case .state(let path):
        return .init(
          status: .localData, message: "Cannot write \(shown(path)) (enrollment lock or memory); nothing enrolled.")
      }
    case .unexpected(let type):
      return .init(status: .failure, message: "Unexpected error (\(type)). Please report it with the command you ran.")
    }
  }

  static func name(_ op: UAFOperation) -> String {
    switch op {
    case .reg: "registration"
    case .auth: "authentication"
    case .dereg: "deregistration"
    }
  }

  static func blocked(_ kind: PINKind, _ t: TokenInfo) -> ErrorReport {
    if kind == .puk {
      return .init(
        status: .pukBlocked,
        message: "The PUK of \(t.id) is blocked. Only a reset of the PIV application (which erases its keys) helps now."
      )
    }
    if t.kind == .fido2 {
      return .init(
        status: .pinBlocked,
        message: "The PIN of \(t.id) is blocked. A FIDO2 key has no PUK: the only way back is "
          + "`tokenbridge fido2 reset --token \(t.id)`, which erases every credential on the key (and the "
          + "registrations made with them: it lists them first and deregisters them).")
    }
    return .init(
      status: .pinBlocked,
      message: "The PIN of \(t.id) is blocked. Unblock it with the PUK: tokenbridge pin unblock --token \(t.id)")
  }

  /// The sentence for a recoverable PIN failure, shown before asking again (and as the final error when a
  /// script has no more input).
  public static func notice(_ e: PinRecoverableError) -> String {
    switch e {
    case .wrong(let k, let left): "Wrong \(k.rawValue); \(triesLeft(left))."
    case .invalidCurrent(let k, let v): "That \(k.rawValue) cannot be right: \(v). Nothing was sent; no try was spent."
    case .invalidNew(let k, let v): "The new \(k.rawValue) cannot be used: \(v). Nothing was sent; no try was spent."
    }
  }

  static func refused(_ e: PinRecoverableError) -> ErrorReport {
    .init(status: e.isWrong ? .wrongPIN : .policyViolation, message: notice(e))
  }

  public static func triesLeft(_ n: Int) -> String { n == 1 ? "1 try left" : "\(n) tries left" }

  /// One row of a choice: the token (and account), whether this hardware supports it, whether the policy
  /// accepts it, and why not.
  public static func selectionLine(_ c: SelectionCandidate) -> String {
    var s = c.token + (c.name.isEmpty ? "" : "  \(shown(c.name))") + "  \(shown(c.aaid))"
    if let u = c.username { s = "\(shown(u))  on " + s }
    if c.isUsable { return s + "  (usable)" }
    var why: [String] = []
    if !c.isSupportedByHardware {
      why.append("not supported by this hardware: " + c.hardwareReasons.map(shown).joined(separator: "; "))
    }
    if !c.isPolicyCompliant {
      why.append("not accepted by the server's policy: " + c.policyReasons.map(shown).joined(separator: "; "))
    }
    return s + "  (" + why.joined(separator: "; ") + ")"
  }

  /// The rows of a choice an error carries (for `--json`), or nil.
  public static func candidates(_ error: Error) -> [SelectionCandidate]? {
    if case OperationError.choiceNeeded(_, let list) = error { return list }
    return nil
  }

  /// The warning a confirmation is about.
  public static func warning(_ c: Confirmation) -> String {
    switch c {
    case .lastAttempt(let k):
      "Only one \(k.rawValue) try is left: if this \(k.rawValue) is wrong, the \(k.rawValue) will be blocked."
    case .overwriteSlot(let s): "Slot \(s) already holds a key; generating replaces it for good."
    case .forgetLocally: "The server no longer knows this registration. Delete it locally?"
    case .outOfBand(let op, let server):
      "About to run \(op == .auth ? "an" : "a") \(name(op)) at \(shown(server)), as the QR code or link asks."
    case .deviceSync(let deletions): "The sync will delete \(deletions) item(s) as listed above."
    case .enroll(let token, let server, let username):
      "Token \(shown(token)) was plugged in: register it for \(shown(username)) at \(shown(server))?"
    }
  }
}
