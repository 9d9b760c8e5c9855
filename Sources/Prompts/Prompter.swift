import FoundationEssentials
import Platform
import TokenBridge

/// Implements the library's interaction protocols for the CLI: the terminal when there is one, a pinentry
/// program (`--prompt pinentry`, the configuration's "prompt", or no terminal and a pinentry to use), or
/// `--pin-fd` for scripts (then nothing is asked on the terminal; confirmations need `--yes`).
package final class Prompter: PinChanger, PinUserVerifier {
  package let terminal: Terminal?
  package let reader: SecretLineReader?
  package let pinentry: Pinentry?
  package let assumeYes: Bool
  /// Dialogs in a row whose previous answer was refused without reaching the token (empty, too short...): a
  /// pinentry that keeps answering so would be asked forever (no try is ever spent to end it).
  package var refusedInARow = 0
  /// How many such re-asks a pinentry gets; then the refusal itself ends the command, as with --pin-fd.
  package static let maxRefusedInARow = 5

  /// Lines every pinentry dialog shows after its own (the service: the calling app and the server).
  package var dialogContext: [String] = []

  /// Pinentry only, no terminal and no descriptor: `tokenbridge serve`, which has neither.
  package init(pinentry: Pinentry) {
    reader = nil
    terminal = nil
    assumeYes = false
    self.pinentry = pinentry
  }

  package init(
    pinFD: Int32?, assumeYes: Bool, timeout: Double, mode: PromptMode = .terminal, pinentryProgram: String? = nil
  ) {
    reader = pinFD.map { SecretLineReader(fd: $0, timeout: timeout) }
    // The terminal (when there is one) still shows notices and asks which token, with pinentry too.
    let terminal = pinFD == nil ? Terminal(timeout: timeout) : nil
    self.terminal = terminal
    self.assumeYes = assumeYes
    let env = Environment.value
    // auto: pinentry only without a terminal, and only when one is named or a graphical session can show it
    // (a terminal pinentry cannot work without a terminal; the "no terminal" error says more then).
    let graphical = env("DISPLAY").map { !$0.isEmpty } == true || env("WAYLAND_DISPLAY").map { !$0.isEmpty } == true
    let usePinentry =
      pinFD == nil && (mode == .pinentry || (mode == .auto && terminal == nil && (pinentryProgram != nil || graphical)))
    if usePinentry {
      let tty = Terminal.name()
      pinentry = Pinentry(
        program: pinentryProgram ?? "pinentry", timeout: timeout, ttyName: tty, ttyType: tty == nil ? nil : env("TERM"),
        lcCtype: env("LC_ALL") ?? env("LC_CTYPE") ?? env("LANG"))
    } else {
      pinentry = nil
    }
  }

  /// Can this prompter ask the user to choose among tokens?
  package var canAsk: Bool { terminal != nil }

  package static let title = "TokenBridge"

  package func say(_ s: String) {
    if let terminal { terminal.write(s + "\n") } else { FileIO.writeError((s + "\n")) }
  }

  /// Reads a secret. `notice` (e.g. "Wrong PIN; 2 tries left.") is shown first on a terminal (pinentry: as its
  /// error line, with `about` as the description); with --pin-fd it is shown only once another line is there
  /// (else the error that ends the run says it, once).
  package func secret(_ prompt: String, expected: ExpectedInput, notice: String? = nil, about: String = "") throws
    -> Secret
  {
    if let reader {
      guard let line = try reader.next() else { throw InputError.noMoreInput(expected: expected) }
      if let notice { say(notice) }
      return line
    }
    if let pinentry {
      return try Interrupts.shared.duringPinentry(pinentry.cancellation) {
        try pinentry.getPin(
          PinentryDialog(title: Self.title, description: about, prompt: pinentryPrompt(prompt), error: notice))
      }
    }
    if let notice { say(notice) }
    guard let terminal else { throw InputError.noTerminal(expected: expected) }
    terminal.write(prompt)
    return Secret(try terminal.readLine(echo: false))
  }

  package func pinentryPrompt(_ p: String) -> String { Trim.whitespace(p, newlines: false) }

  /// Counts a pinentry round asked again after a refusal that cost no try; past `maxRefusedInARow` ends the input
  /// (the attempt engine then ends the command with that refusal).
  package func countRefusal(_ last: PinRecoverableError?, expected: ExpectedInput) throws {
    guard pinentry != nil, reader == nil else { return }
    switch last {
    case .invalidCurrent, .invalidNew:
      refusedInARow += 1
      if refusedInARow > Self.maxRefusedInARow { throw InputError.noMoreInput(expected: expected) }
    case .wrong, nil: refusedInARow = 0
    }
  }

  /// A new secret, typed twice on a terminal or in pinentry (read once from --pin-fd).
  package func newSecret(
    _ name: String, expected: ExpectedInput, notice: String? = nil, about: String = "", hint: String? = nil
  ) throws -> Secret {
    if let pinentry, reader == nil {
      return try Interrupts.shared.duringPinentry(pinentry.cancellation) {
        try pinentry.getPin(
          PinentryDialog(
            title: Self.title, description: about, prompt: "New \(name):", error: notice,
            repeatPrompt: "Repeat new \(name):", repeatError: "The two entries differ.", constraintsHint: hint))
      }
    }
    var notice = notice
    for _ in 0..<3 {
      let first = try secret("New \(name): ", expected: expected, notice: notice)
      notice = nil
      if reader != nil { return first }
      let again = try secret("Repeat new \(name): ", expected: expected)
      if first.bytes == again.bytes { return first }
      say("The two entries differ; please type the new \(name) again.")
    }
    throw InteractionError.cancelled
  }

  /// What a pinentry shows about the token: its name, the tries left, whether the secret is still the default,
  /// and a warning when the next try is the last.
  package func describe(_ token: TokenInfo, _ status: PINStatus, _ protection: ProtectionStatus, lines extra: [String])
    -> String
  {
    // Appended line by line: `joined(separator:)`'s first use costs generic witness lookups (docs/performance.md).
    var text = "\(displayable(token.name)) (\(token.id))\n\(status.kind.rawValue): \(TriesText.of(status))"
    if protection.isLastAttempt {
      text += "\nThis is the last try: a wrong \(status.kind.rawValue) now blocks it."
    }
    for line in extra { text += "\n" + line }
    return text
  }

  package func confirm(_ about: Confirmation) throws -> Bool {
    let warning = ErrorReport.warning(about)
    if assumeYes {
      say(warning + " Continuing (--yes).")
      return true
    }
    if let pinentry, reader == nil {
      return try Interrupts.shared.duringPinentry(pinentry.cancellation) {
        try pinentry.confirm(
          title: Self.title, description: ([warning] + dialogContext).joined(separator: "\n"), ok: "Continue",
          cancel: "Cancel")
      }
    }
    guard let terminal else { throw InputError.notConfirmed(about) }
    terminal.write(warning + " Type yes to continue: ")
    var answer = try terminal.readLine(echo: true)
    defer { wipe(&answer) }
    return Trim.whitespace(String(decoding: answer, as: UTF8.self), newlines: false).lowercased() == "yes"
  }

  // MARK: PinChanger

  package func providePins(_ context: PinChangeContext) throws -> PinChangeAnswer {
    let op = context.operation
    try countRefusal(
      context.lastRecoverableError,
      expected: op == .setPIN ? .newPIN : .currentAndNew(current: op.authorizing, new: op.target))
    let token = "\(displayable(context.token.name)) (\(context.token.id))"
    let quiet = pinentry != nil && reader == nil  // the pinentry dialog shows all of it
    if op == .setPIN, context.lastRecoverableError == nil, !quiet { say("\(token) has no PIN yet.") }
    let notice = context.lastRecoverableError.map(ErrorReport.notice)
    if notice == nil && op != .setPIN && !quiet { say(TriesText.line(context.token, context.authorizingStatus)) }
    let rules = "The \(op.target.rawValue): \(context.policy.summary)."
    if op == .setPIN {  // nothing to authorise it: only the new PIN
      if notice == nil && !quiet { say(rules) }
      let about = "\(token) has no PIN yet.\n\(rules)"
      return PinChangeAnswer(
        current: Secret([]),
        new: try newSecret(
          op.target.rawValue, expected: .newPIN, notice: notice, about: about, hint: context.policy.summary))
    }
    let expected = ExpectedInput.currentAndNew(current: op.authorizing, new: op.target)
    let prompt = op == .changePIN ? "Current PIN" : op == .changePUK ? "Current PUK" : "PUK"
    let about = describe(context.token, context.authorizingStatus, context.protection, lines: [])
    let cur = try secret("\(prompt): ", expected: expected, notice: notice, about: about)
    let new = try newSecret(
      op.target.rawValue, expected: expected, about: "\(token)\n\(rules)", hint: context.policy.summary)
    return PinChangeAnswer(current: cur, new: new)
  }

  package func confirmLastAttempt(_ context: PinChangeContext) throws -> Bool {
    try confirm(.lastAttempt(context.operation.authorizing))
  }

  // MARK: PinUserVerifier

  package func providePin(_ context: PinVerificationContext) throws -> Secret {
    try countRefusal(context.lastRecoverableError, expected: .pin)
    let notice = context.lastRecoverableError.map(ErrorReport.notice)
    let purpose = "PIN to \(displayable(context.purpose))"
    if pinentry != nil && reader == nil {
      var extra = ["To \(displayable(context.purpose))."]
      if let text = context.transactionText { extra.append("Confirm: \(text)") }
      extra += dialogContext
      let about = describe(context.token, context.status, context.protection, lines: extra)
      return try secret("PIN:", expected: .pin, notice: notice, about: about)
    }
    if notice == nil { say(TriesText.line(context.token, context.status)) }
    if let text = context.transactionText { say("Confirm: \(text)") }
    return try secret("\(purpose): ", expected: .pin, notice: notice)
  }

  package func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool {
    try confirm(.lastAttempt(.pin))
  }
}

/// Asks which token on the terminal (only when there is one).
package struct TerminalTokenSelector: TokenSelector {
  package let terminal: Terminal

  package init(terminal: Terminal) { self.terminal = terminal }

  package func selectToken(from tokens: [TokenInfo]) throws -> TokenInfo {
    let i = try terminal.choose(
      "Several tokens are present:",
      tokens.map { "\($0.id)  \(displayable($0.name))  (\(displayable($0.reader ?? "")))" })
    return tokens[i]
  }
}

extension Prompter: ReinsertionNotifier {
  package func reinsertionNeeded(_ token: TokenInfo) {
    say("Too many wrong PINs in a row: remove and re-insert your key (\(token.id)). Waiting for it…")
  }
  package func reinserted(_ token: TokenInfo) { say("The key is back.") }
}

extension Prompter: EnrollmentInteraction {}
