import Foundation
import TokenBridge
import TokenDevices
import UAFCore

/// Implements the library's interaction protocols for the CLI: the terminal when there is one, or
/// `--pin-fd` for scripts (then nothing is asked on the terminal; confirmations need `--yes`).
final class Prompter: PinChanger, PinUserVerifier {
  let terminal: Terminal?
  let reader: FDLineReader?
  let assumeYes: Bool

  init(pinFD: Int32?, assumeYes: Bool, timeout: Double) {
    reader = pinFD.map(FDLineReader.init)
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
  func secret(_ prompt: String, exhausted: InputError, notice: String? = nil) throws -> Secret {
    if let reader {
      guard let line = reader.next() else { throw exhausted }
      if let notice { say(notice) }
      return Secret(line)
    }
    if let notice { say(notice) }
    guard let terminal else {
      throw InputError(
        message: "No terminal to ask for the PIN. Pass it on a file descriptor: --pin-fd N.", status: .usage)
    }
    terminal.write(prompt)
    return Secret(try terminal.readLine(echo: false))
  }

  /// A new secret, typed twice on a terminal (read once from --pin-fd).
  func newSecret(_ name: String, exhausted: InputError, notice: String? = nil) throws -> Secret {
    var notice = notice
    for _ in 0..<3 {
      let first = try secret("New \(name): ", exhausted: exhausted, notice: notice)
      notice = nil
      if reader != nil { return first }
      let again = try secret("Repeat new \(name): ", exhausted: exhausted)
      if first.bytes == again.bytes { return first }
      say("The two entries differ; please type the new \(name) again.")
    }
    throw InteractionError.cancelled
  }

  func confirm(_ warning: String) throws -> Bool {
    if assumeYes {
      say(warning + " Continuing (--yes).")
      return true
    }
    guard let terminal else {
      throw InputError(message: warning + " Not confirmed: run on a terminal, or add --yes.", status: .cancelled)
    }
    terminal.write(warning + " Type yes to continue: ")
    var answer = try terminal.readLine(echo: true)
    defer { wipe(&answer) }
    return String(decoding: answer, as: UTF8.self).trimmingCharacters(in: .whitespaces).lowercased() == "yes"
  }

  // MARK: PinChanger

  func providePins(_ context: PinChangeContext) throws -> PinChangeAnswer {
    let op = context.operation
    if op == .setPIN, context.lastRecoverableError == nil {
      say("\(context.token.name) (\(context.token.id)) has no PIN yet.")
    }
    let current = op.authorizing.rawValue
    let target = op.target.rawValue
    let notice = context.lastRecoverableError.map { ErrorReport.recoverable($0, op) }
    if notice == nil && op != .setPIN { say(Render.triesLine(context.token, context.authorizingStatus)) }
    let exhausted: InputError
    switch context.lastRecoverableError {
    case .wrongCurrent(let left)?:
      exhausted = InputError(message: "Wrong \(current); \(Render.triesLeft(left)).", status: .wrongPIN)
    case .invalidNew(let v)?:
      exhausted = InputError(message: "The new \(target) cannot be used: \(v).", status: .policyViolation)
    case .invalidCurrent(let r)?:
      exhausted = InputError(message: "The \(current) cannot be used: \(r).", status: .policyViolation)
    case nil:
      exhausted = InputError(
        message: "--pin-fd: expected the \(current) and the new \(target), one per line.", status: .usage)
    }
    if op == .setPIN {  // nothing to authorise it: only the new PIN
      if notice == nil { say("The PIN: \(context.policy.summary).") }
      return PinChangeAnswer(current: Secret([]), new: try newSecret(target, exhausted: exhausted, notice: notice))
    }
    let prompt = op == .changePIN ? "Current PIN" : op == .changePUK ? "Current PUK" : "PUK"
    let cur = try secret("\(prompt): ", exhausted: exhausted, notice: notice)
    let new = try newSecret(target, exhausted: exhausted)
    return PinChangeAnswer(current: cur, new: new)
  }

  func confirmLastAttempt(_ context: PinChangeContext) throws -> Bool {
    let k = context.operation.authorizing.rawValue
    return try confirm("Only one \(k) try is left: if this \(k) is wrong, the \(k) will be blocked.")
  }

  // MARK: PinUserVerifier

  func providePin(_ context: PinVerificationContext) throws -> Secret {
    let notice = context.lastRecoverableError.map(ErrorReport.recoverable)
    if notice == nil { say(Render.triesLine(context.token, context.status)) }
    if let text = context.transactionText { say("Confirm: \(text)") }
    var exhausted = InputError(message: "--pin-fd: expected the PIN.", status: .usage)
    if case .wrongPin(let left)? = context.lastRecoverableError {
      exhausted = InputError(message: "Wrong PIN; \(Render.triesLeft(left)).", status: .wrongPIN)
    }
    return try secret("PIN to \(context.purpose): ", exhausted: exhausted, notice: notice)
  }

  func confirmLastAttempt(_ context: PinVerificationContext) throws -> Bool {
    try confirm("Only one PIN try is left: if this PIN is wrong, the PIN will be blocked.")
  }
}

/// Asks which token on the terminal (only when there is one).
struct TerminalTokenSelector: TokenSelector {
  let terminal: Terminal

  func selectToken(from tokens: [TokenInfo]) throws -> TokenInfo {
    let i = try terminal.choose(
      "Several tokens are present:", tokens.map { "\($0.id)  \($0.name)  (\($0.reader ?? ""))" })
    return tokens[i]
  }
}

extension Prompter: ReinsertionNotifier {
  func reinsertionNeeded(_ token: TokenInfo) {
    say("Too many wrong PINs in a row: remove and re-insert your key (\(token.id)). Waiting for it…")
  }
  func reinserted(_ token: TokenInfo) { say("The key is back.") }
}
