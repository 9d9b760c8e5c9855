import ArgumentParser
import FoundationEssentials
import TokenBridge

struct Register: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "register",
    abstract: "Register a token for a user at the server (a new key on the token; asks the PIN).")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions
  @Option(help: "The username at the server.")
  var username: String

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let keyID = try ctx.operations(serverOptions).register(username: username, verifier: ctx.prompter)
      if options.json {
        print(Render.json(["result": "registered", "username": username, "keyID": keyID]))
      } else {
        print("Registered \(displayable(username)) (KeyID \(keyID)).")
      }
    }
  }
}

struct Authenticate: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "authenticate",
    abstract: "Sign in at the server with a registered token (asks the PIN; shows the transaction to confirm).")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions
  @Option(help: "The username (omit for username-less sign-in: choose among the registered accounts).")
  var username: String?
  @Option(help: "Ask the server for a transaction confirmation with this text (reference server / conformance).")
  var transaction: String?

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      // Signing in needs nothing getInfo says before the key is used: none is sent beyond libfido2's own.
      let ops = try ctx.operations(serverOptions, fido2Info: false)
      do {
        let who = try ops.authenticate(
          username: username, transactionText: transaction, verifier: ctx.prompter,
          accountSelector: TerminalAccountSelector(prompter: ctx.prompter))
        if options.json {
          print(Render.json(["result": "authenticated", "username": who]))
        } else {
          print("Authenticated as \(displayable(who)).")
        }
      } catch OperationError.backend(.uafStatus(1481, let d)) {
        offerLocalDelete(ctx, ops)
        throw OperationError.backend(.uafStatus(1481, description: d))
      }
    }
  }

  /// 1481: the server forgot the key. Offer to forget it here too (never silently).
  func offerLocalDelete(_ ctx: UAFContext, _ ops: ServerOperations) {
    let mine = ctx.env.unknownRegistrations(ops, username: username)
    guard !mine.isEmpty else { return }
    let ids = mine.map(\.keyID).joined(separator: " ")
    if ctx.prompter.canAsk || options.yes, (try? ctx.prompter.confirm(.forgetLocally)) == true {
      for r in mine { try? ctx.env.localData.delete(r.keyID) }
      ctx.prompter.say("Deleted locally: \(ids)")
    } else {
      ctx.prompter.say("To delete it locally: tokenbridge local delete \(ids)")
    }
  }
}

struct Deregister: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "deregister",
    abstract: "Deregister a user's registrations at the server and destroy their keys on the token.")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions
  @Option(help: "The username.")
  var username: String
  @Option(help: "Only this KeyID (default: all of the user's).")
  var keyId: String?

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let removed = try ctx.operations(serverOptions).deregister(
        username: username, keyID: keyId, verifier: ctx.prompter)
      if options.json {
        print(Render.json(["removed": removed]))
      } else {
        print(
          removed.isEmpty
            ? "Nothing was registered here for \(displayable(username))." : "Deregistered \(removed.count) key(s).")
      }
    }
  }
}
