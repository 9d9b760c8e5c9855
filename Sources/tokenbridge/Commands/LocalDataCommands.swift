import ArgumentParser
import FoundationEssentials
import TokenBridge

struct Accounts: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "accounts", abstract: "List the accounts registered on this machine.")
  @OptionGroup var options: GlobalOptions
  func run() throws {
    try options.execute {
      let accounts = try UAFContext(options).env.localData.accounts()
      if options.json {
        print(Render.json(accounts))
      } else {
        if accounts.isEmpty { print("No accounts.") }
        for a in accounts { print("\(displayable(a.username))  at \(displayable(a.server))") }
      }
    }
  }
}

struct Authenticators: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "authenticators", abstract: "List the registrations (keys on tokens) kept locally.")
  @OptionGroup var options: GlobalOptions
  @Flag(help: "Also show pending and abandoned slots.")
  var all = false

  struct Row: Encodable {
    var keyID, aaid, username, server, token, slot, state: String
    var signCounter: Int
  }

  func run() throws {
    try options.execute {
      let rows = try UAFContext(options).env.localData.authenticators(includeAll: all).map {
        Row(
          keyID: $0.keyID, aaid: $0.aaid, username: $0.username, server: $0.server, token: $0.tokenID,
          slot: $0.slot >= 0 ? String($0.slot, radix: 16) : "-", state: $0.state.rawValue, signCounter: $0.signCounter)
      }
      if options.json {
        print(Render.json(rows))
      } else {
        if rows.isEmpty { print("No registrations.") }
        for r in rows {
          print(
            "\(r.keyID)  \(displayable(r.aaid))  \(displayable(r.username))  \(r.token) slot \(r.slot)  \(r.state)  "
              + "counter \(r.signCounter)")
        }
      }
    }
  }
}

struct Local: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "local", abstract: "Local data only (the server is not told).", subcommands: [LocalDelete.self])
}

struct LocalDelete: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "delete",
    abstract: "Forget a registration locally (the server keeps it; its token slot is reused later).")
  @OptionGroup var options: GlobalOptions
  @Argument(help: "KeyID to forget.")
  var keyId: String

  func run() throws {
    try options.execute {
      try UAFContext(options).env.localData.delete(keyId)
      print("Forgotten locally: \(displayable(keyId))")
    }
  }
}
