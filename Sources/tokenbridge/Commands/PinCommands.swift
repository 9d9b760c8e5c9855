import ArgumentParser
import Prompts
import TokenBridge

struct Pin: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "pin",
    abstract: "PIN status, change and unblock.",
    subcommands: [PinStatusCommand.self, PinSet.self, PinChangeCommand.self, PinUnblock.self])
}

struct Puk: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "puk", abstract: "PUK change.", subcommands: [PukChange.self])
}

struct PinStatusCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "status", abstract: "Show PIN and PUK tries left (spends no try).")
  @OptionGroup var options: GlobalOptions

  struct Report: Encodable {
    var token: String
    var pin: PINStatus?
    var puk: PINStatus?
  }

  func run() throws {
    try options.execute {
      let prompter = try options.prompter()
      // The PUK's line is read too, as `tokens` shows it: a status without it would read as "unknown".
      let info = try options.selection(includePUK: true, includeFIDO2: true).chooseAny(
        id: options.token, selector: prompter.terminal.map(TerminalTokenSelector.init)
      ).info
      if options.json {
        print(Render.json(Report(token: info.id, pin: info.pin, puk: info.puk)))
      } else {
        print("\(displayable(info.name)) (\(info.id))")
        for line in Render.pinLines(info) { print("  " + line) }
      }
    }
  }
}

/// Shared by pin set, pin change, puk change and pin unblock.
func runPinOperation(_ operation: PinOperation, _ options: GlobalOptions) throws {
  try options.execute {
    let prompter = try options.prompter()
    // The id is shown only in --json: a script's plain run does not ask a lone card for its serial.
    let chosen = try options.selection(
      includePUK: operation.authorizing == .puk, includeFIDO2: true, identify: options.json
    ).chooseAny(
      id: options.token, selector: prompter.terminal.map(TerminalTokenSelector.init))
    try operation.run(on: chosen, changer: prompter, interactionTimeout: options.timeout)
    let done =
      switch operation {
      case .changePIN: "PIN changed."
      case .changePUK: "PUK changed."
      case .unblockPIN: "PIN unblocked and set."
      case .setPIN: "PIN set."
      }
    if options.json { print(Render.json(["result": done, "token": chosen.info.id])) } else { print(done) }
  }
}

struct PinSet: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "set",
    abstract: "Set the first PIN of a FIDO2 key (new PIN and confirmation).",
    discussion: "With --pin-fd N: the new PIN on descriptor N.")
  @OptionGroup var options: GlobalOptions
  func run() throws { try runPinOperation(.setPIN, options) }
}

struct PinChangeCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "change",
    abstract: "Change the PIN: current PIN, new PIN, confirmation.",
    discussion: "With --pin-fd N: the current PIN and the new PIN, one per line, on descriptor N.")
  @OptionGroup var options: GlobalOptions
  func run() throws { try runPinOperation(.changePIN, options) }
}

struct PinUnblock: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "unblock",
    abstract: "Unblock the PIN with the PUK and set a new PIN.",
    discussion: "With --pin-fd N: the PUK and the new PIN, one per line, on descriptor N.")
  @OptionGroup var options: GlobalOptions
  func run() throws { try runPinOperation(.unblockPIN, options) }
}

struct PukChange: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "change",
    abstract: "Change the PUK: current PUK, new PUK, confirmation.",
    discussion: "With --pin-fd N: the current PUK and the new PUK, one per line, on descriptor N.")
  @OptionGroup var options: GlobalOptions
  func run() throws { try runPinOperation(.changePUK, options) }
}
