import ArgumentParser
import TokenBridge
import TokenDevices

struct Pin: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "PIN status, change and unblock.",
    subcommands: [PinStatusCommand.self, PinChangeCommand.self, PinUnblock.self])
}

struct Puk: ParsableCommand {
  static let configuration = CommandConfiguration(abstract: "PUK change.", subcommands: [PukChange.self])
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
      let token = try options.chooseToken(options.prompter(), includePUK: true)
      if options.json {
        print(Render.json(Report(token: token.info.id, pin: token.info.pin, puk: token.info.puk)))
      } else {
        print("\(token.info.name) (\(token.info.id))")
        print("  PIN: \(Render.tries(token.info.pin))")
        print("  PUK: \(Render.tries(token.info.puk))")
      }
    }
  }
}

/// Shared by pin change, puk change and pin unblock.
func runPinOperation(_ operation: PinOperation, _ options: GlobalOptions) throws {
  try options.execute {
    let prompter = options.prompter()
    let token = try options.chooseToken(prompter, includePUK: operation.authorizing == .puk)
    try PinChange(operation: operation).run(on: token, changer: prompter)
    let done =
      switch operation {
      case .changePIN: "PIN changed."
      case .changePUK: "PUK changed."
      case .unblockPIN: "PIN unblocked and set."
      }
    if options.json { print(Render.json(["result": done, "token": token.info.id])) } else { print(done) }
  }
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
