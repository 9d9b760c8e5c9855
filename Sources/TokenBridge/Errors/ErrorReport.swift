import FoundationEssentials
import Glibc
import Platform
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

  static func qrImage(_ q: QRImageProblem) -> ErrorReport {
    if case .libraryMissing(let why) = q {
      return .init(
        status: .failure,
        message: "QR images cannot be read: \(shown(why)) (Debian: apt install libzbar0 libpng16-16 libjpeg62-turbo).")
    }
    let m =
      switch q {
      case .notAnImage: "The file is not a PNG or JPEG image; give the QR code as a PNG or JPEG file."
      case .unreadableImage: "The image cannot be decoded (truncated or damaged); save or photograph it again."
      case .tooLarge: "The image is larger than \(QRImage.maxPixels) pixels; crop it to the QR code."
      case .noQRCode: "No QR code was found in the image; crop it to the QR code, or use a sharper picture."
      case .severalQRCodes(let n): "The image holds \(n) QR codes; crop it to the one to use."
      case .libraryMissing: ""
      }
    return .init(status: .payloadMalformed, message: m + " Nothing was done.")
  }

  static func input(_ e: InputError) -> ErrorReport {
    switch e {
    case .noMoreInput(let what):
      return .init(status: .usage, message: "--pin-fd: expected \(expected(what)); the input ended.")
    case .lineTooLong(let limit):
      return .init(
        status: .usage, message: "--pin-fd: a line is longer than \(limit) bytes; nothing of it was used or sent.")
    case .unreadable(let fd, let errno):
      return .init(status: .usage, message: "File descriptor \(fd) cannot be read.", code: "errno \(errno)")
    case .noTerminal(let what):
      return .init(
        status: .usage,
        message: "No terminal to ask for \(expected(what)). Pass it on a file descriptor: --pin-fd N.")
    case .notConfirmed(let c):
      return .init(status: .cancelled, message: "\(warning(c)) Not confirmed: run on a terminal, or add --yes.")
    case .badChannelBinding:
      return .init(status: .usage, message: "--channel-binding must be a ChannelBinding JSON object.")
    case .badManagementKey:
      return .init(status: .usage, message: "--management-key-fd: the key must be hex (48, 48 or 64 digits).")
    case .file(let path, let errno):
      return .init(
        status: .usage, message: "Cannot use \(path): \(String(cString: strerror(errno))).", code: "errno \(errno)")
    case .pinentry(let p): return pinentry(p)
    }
  }

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

  static func pinentry(_ e: PinentryError) -> ErrorReport {
    switch e {
    case .cannotStart(let program, let errno):
      return .init(
        status: .configuration,
        message: "Cannot start the pinentry program \(shown(program)) (\(String(cString: strerror(errno)))): install "
          + "one (e.g. pinentry-tty, pinentry-gnome3) or name it with PINENTRY_PROGRAM or \"pinentry\" in the "
          + "configuration; nothing was sent to the token.", code: "errno \(errno)")
    case .ended(let program, let command):
      return .init(
        status: .failure,
        message: "The pinentry program \(shown(program)) ended before answering (\(command)); nothing was sent to "
          + "the token.")
    case .refused(let program, let command, let code):
      return .init(
        status: .failure,
        message: "The pinentry program \(shown(program)) "
          + (code == nil ? "answered \(command) with something that is not Assuan" : "refused \(command)")
          + "; nothing was sent to the token.", code: code.map { "Assuan ERR \($0)" })
    }
  }

  static func expected(_ e: ExpectedInput) -> String {
    switch e {
    case .pin: "the PIN"
    case .managementKey: "the management key (hex)"
    case .currentAndNew(let c, let n):
      c == n
        ? "the current \(c.rawValue) and the new \(n.rawValue), one per line"
        : "the \(c.rawValue) and the new \(n.rawValue), one per line"
    case .newPIN: "the new PIN"
    case .answer: "an answer"
    }
  }

  /// The warning a confirmation is about.
  public static func warning(_ c: Confirmation) -> String {
    switch c {
    case .lastAttempt(let k):
      "Only one \(k.rawValue) try is left: if this \(k.rawValue) is wrong, the \(k.rawValue) will be blocked."
    case .overwriteSlot(let s): "Slot \(s) already holds a key; generating replaces it for good."
    case .forgetLocally: "The server no longer knows this registration. Delete it locally?"
    case .outOfBand(let op, let server): "About to run a \(name(op)) at \(shown(server)), as the QR code or link asks."
    case .deviceSync(let deletions): "The sync will delete \(deletions) item(s) as listed above."
    case .enroll(let token, let server, let username):
      "Token \(shown(token)) was plugged in: register it for \(shown(username)) at \(shown(server))?"
    }
  }

  static func localData(_ e: LocalDataError) -> ErrorReport {
    switch e {
    case .unavailable(let path, let reason):
      return .init(status: .localData, message: "Local data \(path) cannot be used: \(reason)")
    case .notFound(let k): return .init(status: .unknownKey, message: "No local registration with KeyID \(shown(k)).")
    case .insecure(let path, let reason): return .init(status: .localData, message: insecure(path, reason))
    case .libraryMissing(let l): return library(l)
    }
  }

  /// A system library loaded at first use (not at start-up) is missing or too old: which, why, what to install.
  static func library(_ l: LibraryUnavailable) -> ErrorReport {
    let needs =
      switch l.library {
      case .fido2: "FIDO2 keys need it"
      case .pcsclite: "smart cards (PC/SC) need it"
      case .sqlite3: "the local data needs it"
      case .usb: "USB hotplug needs it"
      case .crypto: "the PIV management key needs it"
      }
    return .init(
      status: .failure,
      message: "\(l.library.soname) cannot be loaded (\(shown(l.reason))); \(needs) (Debian: apt install "
        + "\(l.library.debianPackage)). Nothing was done.")
  }

  /// Local data refused because someone else could change it: what was found and how to fix it.
  static func insecure(_ path: String, _ reason: LocalDataError.InsecureReason) -> String {
    let found: String
    let fix: String
    switch reason {
    case .symbolicLink:
      found = "is a symbolic link"
      fix = "replace the link with the real directory or file, or set XDG_DATA_HOME to a directory of yours"
    case .notADirectory: (found, fix) = ("is not a directory", "move it away; it is made again (0700)")
    case .notARegularFile: (found, fix) = ("is not a regular file", "move it away")
    case .writableByOthers(let mode):
      found = "is writable by other users (mode \(String(mode, radix: 8)))"
      fix = "run: chmod go-w '\(path)'"
    case .ownedByAnotherUser(let uid):
      found = "belongs to another user (uid \(uid))"
      fix = "use a data directory of your own (XDG_DATA_HOME), or chown it to yourself if it is yours"
    }
    return "Local data \(path) \(found), so it is not used. To fix: \(fix)."
  }

  static func configuration(_ c: ConfigurationError) -> ErrorReport {
    switch c {
    case .noFacetID:
      return .init(
        status: .usage, message: "uaf process needs --facet-id (or \"facetID\" in the configuration).")
    case .noServer:
      return .init(
        status: .configuration, message: "No server: pass --server URL or set \"server\" in the configuration file.")
    case .insecureServer(let s):
      return .init(
        status: .configuration,
        message: "\(shown(s)): only https:// servers (http:// only on this machine's loopback: 127.0.0.0/8, ::1, "
          + "localhost).")
    case .invalidServer(let s): return .init(status: .configuration, message: "\(shown(s)) is not a server URL.")
    case .unreadable(let path, let reason):
      return .init(status: .configuration, message: "The configuration \(path) cannot be read: \(reason).")
    case .notJSON(let path):
      return .init(
        status: .configuration, message: "The configuration \(path) is not a JSON object; fix or remove the file.")
    case .unknownKey(let path, let key, let known):
      return .init(
        status: .configuration,
        message: "The configuration \(path) has an unknown key \"\(shown(key))\". Known keys: "
          + known.joined(separator: ", ") + ".")
    case .invalidValue(let path, let key, let value, let allowed):
      return .init(
        status: .configuration,
        message: "The configuration \(path): \"\(key)\" is \(shown(value)); allowed: \(allowed).")
    }
  }

  static func message(_ m: UAFMessageError) -> ErrorReport {
    switch m {
    case .malformed(let d): return .init(status: .badMessage, message: "The UAF message is malformed: \(shown(d)).")
    case .unsupportedVersion(let v):
      return .init(
        status: .badMessage,
        message: "No request in a UAF version this client speaks (1.0, 1.1); got "
          + v.map { "\($0.major).\($0.minor)" }.joined(separator: ", ") + ".")
    case .tooLarge(let n): return .init(status: .badMessage, message: "The UAF message is too large (\(n) bytes).")
    case .unexpectedOperation(let expected, let got):
      return .init(
        status: .badMessage,
        message: "The server answered a \(name(expected)) request with a \(name(got)) message; it was refused and "
          + "nothing was processed. Check the server URL.")
    case .mixedOperations(let ops):
      return .init(
        status: .badMessage,
        message: "The UAF message mixes operations (\(ops.map(\.rawValue).joined(separator: ", "))); nothing was "
          + "processed.")
    case .duplicateVersion(let v):
      return .init(
        status: .badMessage,
        message: "The UAF message holds two requests for UAF \(v.major).\(v.minor); nothing was processed.")
    case .invalidField(let i, let field, let rule):
      return .init(
        status: .badMessage,
        message: "The UAF request (entry \(i)) is refused: \(field) \(fieldRule(rule)); nothing was signed.")
    }
  }

  /// What a UAF field must be, as a phrase.
  static func fieldRule(_ rule: UAFFieldRule) -> String {
    switch rule {
    case .base64URL(let min, let max?): "must be base64url of \(min) to \(max) bytes"
    case .base64URL(let min, nil): "must be base64url of at least \(min) byte\(min == 1 ? "" : "s")"
    case .length(let min, let max): "must be \(min) to \(max) characters long"
    case .aaid: "must be an AAID (4 hex digits, #, 4 hex digits)"
    case .vendorID: "must be 4 hex digits"
    case .range(let min, let max): "must be a number from \(min) to \(max)"
    case .keyIDWithoutAAID: "must be empty when aaid is empty"
    case .wildcardNeedsUAF11: "needs both aaid and keyID in UAF 1.0"
    }
  }

  static func backend(_ b: BackendError) -> ErrorReport {
    switch b {
    case .uafStatus(1481, _):
      return .init(
        status: .unknownKey, message: "The server does not know this key any more (1481): \(UAFStatus.meaning(1481)).",
        code: "UAF 1481")
    case .uafStatus(let code, let d):
      return .init(
        status: .serverRefused,
        message: "The server refused: \(code) \(UAFStatus.meaning(code))\(d.map { " (\(shown($0)))" } ?? "").",
        code: "UAF \(code)")
    case .http(let code):
      return .init(status: .serverUnreachable, message: "The server answered HTTP \(code).", code: "HTTP \(code)")
    case .timedOut(let url):
      return .init(status: .serverUnreachable, message: "The server did not answer in time (\(shown(url))).")
    case .unreachable(let why):
      return .init(status: .serverUnreachable, message: "The server cannot be reached: \(shown(why))")
    case .malformedAnswer(let why):
      return .init(
        status: .serverUnreachable, message: "The server's answer is not what the protocol says: \(shown(why)).")
    case .answerTooLarge(let limit):
      return .init(
        status: .serverUnreachable,
        message: "The server's answer is longer than \(limit) bytes; nothing of it was used.")
    case .insecureURL(let url):
      return .init(
        status: .serverUnreachable,
        message: "Not contacted: \(shown(url)) is plain http, allowed only on this machine's loopback.")
    case .httpLibraryMissing(let why):
      return .init(
        status: .serverUnreachable,
        message: "Not contacted: \(shown(why)); HTTP needs libcurl 7.85 or newer (Debian: apt install libcurl4).")
    }
  }

  static func smartCard(_ e: SmartCardError) -> ErrorReport {
    switch e {
    case .serviceUnavailable:
      return .init(
        status: .serviceUnavailable,
        message: "The PC/SC service (pcscd) is not running. Start it (sudo systemctl start pcscd.socket, or run "
          + "pcscd as root) and try again.")
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
}
