import ArgumentParser
import FoundationEssentials
import Platform
import TokenBridge

/// Options of commands that talk to a server.
struct ServerOptions: ParsableArguments {
  @Option(help: "Server base URL (https://…; http:// only on loopback). Default: \"server\" in the configuration.")
  var server: String?
  @Option(help: "This client's facet ID. Default: the configuration's facetID, else the server's origin.")
  var facetId: String?
}

/// The library's UAF environment with this command's prompts wired in.
struct UAFContext {
  let env: UAFEnvironment
  let prompter: Prompter
  let options: GlobalOptions

  init(_ options: GlobalOptions) throws {
    var configuration = try Configuration.load()
    // --timeout bounds every wait for the user, a touch included.
    if let t = options.timeoutOption { configuration.interactionTimeout = t }
    var env = try UAFEnvironment(configuration: configuration)
    self.options = options
    let prompter = try options.prompter()
    env.dispatchTargetFailed = { e in
      prompter.say(
        "tokenbridge: the account's dispatch target at the server was not made or removed (tokenbridge device check "
          + "shows it): \(ErrorReport(e).message)")
    }
    self.env = env
    self.prompter = prompter
    if !env.repaired.isEmpty {
      prompter.say(
        "tokenbridge: \(env.repaired.count) interrupted registration(s) cleaned up; their slots will be reused.")
    }
  }

  /// `fido2Info: false`: the command only signs in (`TokenDiscovery.fido2Info`).
  func tokens(fido2Info: Bool = true) throws -> UAFTokens {
    let p = prompter
    let tokens = try env.tokens(
      id: options.token, trace: options.traceSink, details: options.pinFd == nil, fido2Info: fido2Info,
      wait: options.tokenWait
    ) { info in
      p.say("Touch your key (\(info.id)).")
    }
    Interrupts.shared.cancel(with: tokens.cancellers)
    return tokens
  }

  func operations(_ s: ServerOptions, fido2Info: Bool = true) throws -> ServerOperations {
    try env.operations(
      server: s.server, facetID: s.facetId, tokens: try tokens(fido2Info: fido2Info),
      authenticatorSelector: prompter.canAsk ? TerminalAuthenticatorSelector(prompter: prompter) : nil)
  }
}

struct TerminalAccountSelector: AccountSelector {
  let prompter: Prompter
  func selectAccount(from accounts: [AuthenticatorRecord]) throws -> AuthenticatorRecord {
    guard let terminal = prompter.terminal else { throw OperationError.ambiguousAccount(accounts) }
    let i = try terminal.choose(
      "Several accounts can sign in:", accounts.map { "\(displayable($0.username))  (\($0.tokenID))" })
    return accounts[i]
  }

  /// Lists every account with whether it can sign in here and why not; only usable ones can be chosen.
  func selectAccount(among candidates: [SelectionCandidate], usable: [AuthenticatorRecord]) throws
    -> AuthenticatorRecord
  {
    guard let terminal = prompter.terminal else { throw OperationError.choiceNeeded(accounts: true, candidates) }
    let i = try terminal.choose("Several accounts can sign in:", candidates.map(ErrorReport.selectionLine)) {
      candidates[$0].isUsable
    }
    guard let rec = usable.first(where: { $0.keyID == candidates[i].keyID }) else { throw InteractionError.cancelled }
    return rec
  }
}

/// Lists every token with whether this hardware supports it and the server's policy accepts it (and why not),
/// and asks for one of the usable ones.
struct TerminalAuthenticatorSelector: AuthenticatorSelector {
  let prompter: Prompter
  func selectAuthenticator(from items: [AuthenticatorItem]) throws -> AuthenticatorItem {
    guard let terminal = prompter.terminal else { throw InteractionError.cancelled }
    let lines = items.map { ErrorReport.selectionLine($0.candidate) }
    return items[try terminal.choose("Several tokens can be registered:", lines) { items[$0].candidate.isUsable }]
  }
}

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
      // Signing in needs nothing getInfo says before the key is used: none is sent (issue 12).
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

struct Info: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "info", abstract: "Version, facet ID, AAIDs and where data lives.")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions

  func run() throws {
    try options.execute {
      let config: Configuration
      config = try Configuration.load()
      let server = serverOptions.server ?? config.server
      let facet = serverOptions.facetId ?? config.facetID ?? server.flatMap { try? BackendClient(server: $0).origin }
      let device = try? LocalData().deviceInformation()
      let info: [String: String] = [
        "deviceID": device?.deviceID ?? "(none: no registration yet)", "deviceName": device?.name ?? "(none)",
        "devicePushToken": device.map { $0.pushToken ?? "(none: push disabled)" } ?? "(none)",
        "version": TokenBridgeVersion.string, "server": server ?? "(none)", "facetID": facet ?? "(none)",
        "pivAAID": config.pivAAID, "fido2AAID": config.fido2AAID, "configuration": Configuration.file.path,
        "localData": Configuration.dataDirectory.appendingPathComponent("tokenbridge.sqlite").path,
      ]
      if options.json {
        print(Render.json(info))
      } else {
        for k in info.keys.sorted() { print("\(k): \(displayable(info[k]!))") }
      }
    }
  }
}

struct UAF: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "uaf", abstract: "The FIDO UAF client API for other programs.", subcommands: [UAFProcess.self])
}

struct UAFProcess: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "process",
    abstract: "processUAFOperation: a UAF request message on stdin, the response message on stdout.",
    discussion: """
      stdin: {"uafProtocolMessage": "<request array as a string>"} or the bare request array. stdout: \
      {"uafProtocolMessage": "<response array>"} (deregistration: an empty message). Prompts go to the \
      controlling terminal (/dev/tty) since stdin carries the request; --pin-fd for scripts.
      """)
  @OptionGroup var options: GlobalOptions
  @Option(help: "This client's facet ID (required unless set in the configuration).")
  var facetId: String?
  @Option(help: "Channel binding as JSON (ChannelBinding dictionary).")
  var channelBinding: String?

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      // One byte past the limit tells "too large" without reading an endless stdin.
      let input = FileIO.read(0, limit: UAFProcessLimits.maxInput + 1)
      let out = try ctx.env.processUAF(
        input: Array(input), facetID: facetId, channelBinding: channelBinding, tokens: try ctx.tokens(),
        verifier: ctx.prompter, accountSelector: TerminalAccountSelector(prompter: ctx.prompter),
        authenticatorSelector: ctx.prompter.canAsk ? TerminalAuthenticatorSelector(prompter: ctx.prompter) : nil)
      print(out)
    }
  }
}
