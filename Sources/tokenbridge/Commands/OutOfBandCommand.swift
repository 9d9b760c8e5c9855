import ArgumentParser
import FoundationEssentials
import Glibc
import Platform
import TokenBridge

struct OutOfBand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "oob",
    abstract: "Run the operation of a QR code, a link, an x-callback-url or a push notification (out-of-band).",
    discussion: """
      The payload names a server and an operation (registration, authentication, deregistration); tokenbridge \
      shows them and asks before it redeems the token. --decode-only prints the payload and does nothing. After \
      the operation an x-callback-url's target is opened (xdg-open) only when it is on callbackAllowList in the \
      configuration; --no-open prints it instead. --qr-image reads the QR code from a PNG or JPEG file. Encrypted \
      payloads (application/jose) are decrypted with this device's key (for the dispatch targets it created).
      """)
  @OptionGroup var options: GlobalOptions
  @Option(help: "The QR code's text (base64url JSON).")
  var qrText: String?
  @Option(
    help: "A PNG or JPEG image holding the QR code (a screenshot or a photo); read within --timeout, at most 30 s.")
  var qrImage: String?
  @Option(help: "A push notification's JSON: a file, or - for stdin.")
  var push: String?
  @Argument(
    help: "A link (https://…?dispatchTokenResponse=…) or an x-callback-url (tokenbridge://x-callback-url/…).")
  var link: String?
  @Flag(help: "Print the decoded payload and do nothing.")
  var decodeOnly = false
  @Flag(help: "Print the x-callback target instead of opening it.")
  var noOpen = false

  func validate() throws {
    guard [qrText != nil, qrImage != nil, push != nil, link != nil].filter({ $0 }).count == 1 else {
      throw ValidationError("give exactly one of --qr-image, --qr-text, --push or a link")
    }
  }

  struct Decoded: Encodable {
    var operation, server, redeemURL: String
    var encrypted: Bool
    var data, version, xSuccess, xError, xCancel: String?
  }

  func source() throws -> OutOfBandSource {
    if let qrText { return .qrText(qrText) }
    if let qrImage { return .scanned(try QRImage.text(file: qrImage, timeout: options.timeout)) }
    if let link { return .link(link) }
    let path = push ?? "-"
    if path == "-" { return .push(FileIO.read(0, limit: OutOfBandPayload.maxSize + 1)) }
    // The --qr-image reader: opened without blocking (a FIFO without a writer blocked open forever), a regular
    // file only, bounded; a payload over OutOfBandPayload.maxSize is refused by the parser.
    do { return .push(try QRImage.readFile(path)) } catch {
      if case .outOfBand(.qrImage(.notAFile)) = error { throw InputError.notAFile(path: path) }
      throw error
    }
  }

  func run() throws {
    try options.execute {
      let source = try source()
      let ctx = try UAFContext(options)
      let payload = try ctx.env.outOfBandPayload(source)
      let name = ["Reg": "registration", "Auth": "authentication", "Dereg": "deregistration"][
        payload.operation.rawValue]!
      if decodeOnly {
        let d = Decoded(
          operation: name, server: payload.serverOrigin, redeemURL: payload.redeemURL.absoluteString,
          encrypted: payload.encrypted, data: payload.data,
          version: payload.version, xSuccess: payload.callback?.success, xError: payload.callback?.error,
          xCancel: payload.callback?.cancel)
        if options.json {
          print(Render.json(d))
        } else {
          print("operation: \(name)\nserver: \(displayable(d.server))\nredeem URL: \(displayable(d.redeemURL))")
          if d.encrypted { print("encrypted: yes (for this device)") }
          if let data = d.data { print("data: \(displayable(data))") }
          for (k, v) in [("x-success", d.xSuccess), ("x-error", d.xError), ("x-cancel", d.xCancel)] {
            if let v { print("\(k): \(displayable(v))") }
          }
        }
        return
      }
      if let data = payload.data { ctx.prompter.say("The request says: \(displayable(data))") }
      guard try ctx.prompter.confirm(.outOfBand(payload.operation, server: payload.serverOrigin)) else {
        finish(ctx, payload.callback?.cancel)
        throw OperationError.cancelled
      }
      let tokens = try ctx.tokens()
      let result: UAFClientResult
      do {
        result = try ctx.env.redeem(
          payload, tokens: tokens,
          authenticatorSelector: ctx.prompter.canAsk ? TerminalAuthenticatorSelector(prompter: ctx.prompter) : nil,
          verifier: ctx.prompter, accountSelector: TerminalAccountSelector(prompter: ctx.prompter))
      } catch {
        let cancelled = (error as? OperationError) == .cancelled
        finish(ctx, cancelled ? payload.callback?.cancel : payload.callback?.error)
        throw error
      }
      let done =
        switch result.op {
        case .reg: "Registered \(displayable(result.username ?? "")) (KeyID \(result.pendingKeyID ?? ""))."
        case .auth: "Authenticated as \(displayable(result.username ?? ""))."
        case .dereg: "Deregistered \(result.removed.count) key(s)."
        }
      if options.json {
        print(Render.json(["result": name, "username": result.username ?? "", "server": payload.serverOrigin]))
      } else {
        print(done)
      }
      finish(ctx, payload.callback?.success)
    }
  }

  /// Opens (or prints) the x-callback target when it is allowed; names it when it is not.
  func finish(_ ctx: UAFContext, _ target: String?) {
    guard let (url, allowed) = ctx.env.callbackTarget(target) else { return }
    guard allowed else {
      ctx.prompter.say("Not opened: \(displayable(url)) is not on the callback allow-list (callbackAllowList).")
      return
    }
    if noOpen {
      ctx.prompter.say("Callback: \(displayable(url))")
      return
    }
    if Subprocess.start("/usr/bin/xdg-open", [url]) == nil {
      ctx.prompter.say("Could not open \(displayable(url)) (xdg-open); open it yourself.")
    }
  }
}
