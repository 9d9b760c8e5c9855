import Foundation
import TokenBridge

/// Implements the library's interaction protocols for the CLI: the terminal when there is one, or
/// `--pin-fd` for scripts (then nothing is asked on the terminal; confirmations need `--yes`).
final class Prompter: PinChanger, PinUserVerifier {
  let terminal: Terminal?
  let reader: SecretLineReader?
  let assumeYes: Bool

  init(pinFD: Int32?, assumeYes: Bool, timeout: Double) {
    reader = pinFD.map { SecretLineReader(fd: $0, timeout: timeout) }
    terminal = pinFD == nil ? Terminal(timeout: timeout) : nil
    self.assumeYes = assumeYes
  }

  /// Can this prompter ask the user to choose among tokens?
  var canAsk: Bool { terminal != nil }

  func say(_ s: String) {
    if let terminal { terminal.write(s + "\n") } else { FileHandle.standardError.write(Data((s + "\n").utf8)) }
  }

  /// Reads a secret. `notice` (e.g. "Wrong PIN; 2 tries left.") is shown first on a terminal; with --pin-fd it
  /// is shown only once another line is there (else the error that ends the run says it, once).
  func secret(_ prompt: String, expected: ExpectedInput, notice: String? = nil) throws -> Secret {
    if let reader {
      guard let line = try reader.next() else { throw InputError.noMoreInput(expected: expected) }
      if let notice { say(notice) }
      return line
    }
    if let notice { say(notice) }
    guard let terminal else { throw InputError.noTerminal(expected: expected) }
    terminal.write(prompt)
    return Secret(try terminal.readLine(echo: false))
  }

  /// A new secret, typed twice on a terminal (read once from --pin-fd).
  func newSecret(_ name: String, expected: ExpectedInput, notice: String? = nil) throws -> Secret {
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

  func confirm(_ about: Confirmation) throws -> Bool {
    let warning = ErrorReport.warning(about)
    if assumeYes {
      say(warning + " Continuing (--yes).")
      return true
    }
    guard let terminal else { throw InputError.notConfirmed(about) }
    terminal.write(warning + " Type yes to continue: ")
    var answer = try terminal.readLine(echo: true)
    defer { wipeSecret(&answer) }
    return String(decoding: answer, as: UTF8.self).trimmingCharacters(in: .whitespaces).lowercased() == "yes"
  }

  // MARK: PinChanger

  func providePins(_ context: PinChangeContext) throws -> PinChangeAnswer {
    let op = context.operation
    let token = "\(displayable(context.token.name)) (\(context.token.id))"
    if op == .setPIN, context.lastRecoverableError == nil { say("\(token) has no PIN yet.") }
    let notice = context.lastRecoverableError.map(ErrorReport.notice)
    if notice == nil && op != .setPIN { say(Render.triesLine(context.token, context.authorizingStatus)) }
    if op == .setPIN {  // nothing to authorise it: only the new PIN
      if notice == nil { say("The PIN: \(context.policy.summary).") }
      return PinChangeAnswer(
        current: Secret([]), new: try newSecret(op.target.rawValue, expected: .newPIN, notice: notice))
    }
    let expected = ExpectedInput.currentAndNew(current: op.authorizing, new: op.target)
    let prompt = op == .changePIN ? "Current PIN" : op == .changePUK ? "Current PUK" : "PUK"
    let cur = try secret("\(prompt): ", expected: expected, notice: notice)
    let new = try newSecret(op.target.rawValue, expected: expected)
    return PinChangeAnswer(current: cur, new: new)
  }

  func confirmLastAttempt(_ context: PinChangeContext) throws -> Bool {
    try confirm(.lastAttempt(context.operation.authorizing))
  }

  // MARK: PinUserVerifier

  func providePin(_ context: PinVerificationContext) throws -> Secret {
    let notice = context.lastRecoverableError.map(ErrorReport.notice)
    if notice == nil { say(Render.triesLine(context.token, context.status)) }
    if let text = context.transactionText { say("Confirm: \(text)") }
    return try secret("PIN to \(displayable(context.purpose)): ", expected: .pin, notice: notice)
  }

  func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool {
    try confirm(.lastAttempt(.pin))
  }
}

/// Asks which token on the terminal (only when there is one).
struct TerminalTokenSelector: TokenSelector {
  let terminal: Terminal

  func selectToken(from tokens: [TokenInfo]) throws -> TokenInfo {
    let i = try terminal.choose(
      "Several tokens are present:",
      tokens.map { "\($0.id)  \(displayable($0.name))  (\(displayable($0.reader ?? "")))" })
    return tokens[i]
  }
}

extension Prompter: ReinsertionNotifier {
  func reinsertionNeeded(_ token: TokenInfo) {
    say("Too many wrong PINs in a row: remove and re-insert your key (\(token.id)). Waiting for it…")
  }
  func reinserted(_ token: TokenInfo) { say("The key is back.") }
}
