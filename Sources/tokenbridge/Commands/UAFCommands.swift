import ArgumentParser
import Foundation
import TokenBridge
import TokenDevices
import UAFCore

/// Options of commands that talk to a server.
struct ServerOptions: ParsableArguments {
  @Option(help: "Server base URL (https://…; http:// only on loopback). Default: \"server\" in the configuration.")
  var server: String?

  @Option(help: "This client's facet ID. Default: the configuration's facetID, else the server's origin.")
  var facetId: String?
}

/// What every UAF command sets up: configuration, local data (repaired), tokens.
struct UAFContext {
  let configuration: Configuration
  let localData: LocalData
  let prompter: Prompter

  static func loadConfiguration() throws(OperationError) -> Configuration {
    do { return try Configuration.load() } catch { throw .configuration(error) }
  }

  init(_ options: GlobalOptions) throws {
    configuration = try Self.loadConfiguration()
    do { localData = try LocalData() } catch { throw OperationError.localData(error) }
    // A registration cut off (crash, kill -9, pulled token) left a pending record: the slot stays ours.
    if let repaired = try? localData.repairInterrupted(), !repaired.isEmpty {
      FileHandle.standardError.write(
        Data(
          "tokenbridge: \(repaired.count) interrupted registration(s) cleaned up; their slots will be reused.\n".utf8))
    }
    prompter = Prompter(pinFD: options.pinFd, assumeYes: options.yes, timeout: options.timeout)
  }

  /// Tokens present, PIV cards and FIDO2 keys (only the one named by --token, when given). FIDO2 keys say when
  /// they wait for a touch, and Ctrl-C then cancels the operation on the key (CTAPHID_CANCEL).
  func tokens(_ options: GlobalOptions) throws -> (piv: [DiscoveredToken], fido2: [DiscoveredFIDO2]) {
    let result = try TokenDiscovery(trace: options.traceSink, includePUK: false).discover()
    let p = prompter
    for k in result.fido2Found { k.session.touchCue = { p.say("Touch your key (\(k.info.id)).") } }
    if !result.fido2Found.isEmpty { CancelOnInterrupt.install() }
    guard let id = options.token else { return (result.found, result.fido2Found) }
    let piv = result.found.filter { $0.info.id == id }
    let fido2 = result.fido2Found.filter { $0.info.id == id }
    if piv.isEmpty && fido2.isEmpty, let u = result.unusableCards.first(where: { $0.id == id }) { throw u.reason }
    if piv.isEmpty && fido2.isEmpty { throw OperationError.tokenNotFound(id, available: result.tokens) }
    return (piv, fido2)
  }

  func server(_ s: ServerOptions) throws -> String {
    guard let server = s.server ?? configuration.server else { throw OperationError.configuration(.noServer) }
    return server
  }

  func operations(_ options: GlobalOptions, _ s: ServerOptions) throws -> ServerOperations {
    let (piv, fido2) = try tokens(options)
    var ops = try ServerOperations(
      configuration: configuration, server: try server(s), facetID: s.facetId, localData: localData, tokens: piv,
      fido2Keys: fido2)
    if prompter.canAsk { ops.client.authenticatorSelector = TerminalAuthenticatorSelector(prompter: prompter) }
    return ops
  }
}

struct TerminalAccountSelector: AccountSelector {
  let prompter: Prompter
  func selectAccount(from accounts: [AuthenticatorRecord]) throws -> AuthenticatorRecord {
    guard let terminal = prompter.terminal else { throw OperationError.ambiguousAccount(accounts) }
    let i = try terminal.choose(
      "Several accounts can sign in:", accounts.map { "\(TransactionContent.sanitized($0.username))  (\($0.tokenID))" })
    return accounts[i]
  }
}

/// Lists every token with whether it can be used, and asks for one of the usable ones.
struct TerminalAuthenticatorSelector: AuthenticatorSelector {
  let prompter: Prompter
  func selectAuthenticator(from items: [AuthenticatorItem]) throws -> AuthenticatorItem {
    guard let terminal = prompter.terminal else { throw InteractionError.cancelled }
    let lines = items.map { it in
      "\(it.token.id)  \(it.token.name)"
        + (it.isPolicyCompliant ? "" : "  (not allowed: \(it.reasons.joined(separator: "; ")))")
    }
    return items[try terminal.choose("Several tokens can be registered:", lines) { items[$0].isPolicyCompliant }]
  }
}

struct Register: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Register a token for a user at the server (a new key on the token; asks the PIN).")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions
  @Option(help: "The username at the server.") var username: String

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let keyID = try ctx.operations(options, serverOptions).register(username: username, verifier: ctx.prompter)
      if options.json {
        print(Render.json(["result": "registered", "username": username, "keyID": keyID]))
      } else {
        print("Registered \(username) (KeyID \(keyID)).")
      }
    }
  }
}

struct Authenticate: ParsableCommand {
  static let configuration = CommandConfiguration(
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
      let ops = try ctx.operations(options, serverOptions)
      do {
        let who = try ops.authenticate(
          username: username, transactionText: transaction, verifier: ctx.prompter,
          accountSelector: TerminalAccountSelector(prompter: ctx.prompter))
        if options.json {
          print(Render.json(["result": "authenticated", "username": who]))
        } else {
          print("Authenticated as \(TransactionContent.sanitized(who)).")
        }
      } catch OperationError.backend(.uafStatus(1481, let d)) {
        try offerLocalDelete(ctx, ops)
        throw OperationError.backend(.uafStatus(1481, description: d))
      }
    }
  }

  /// 1481: the server forgot the key. Offer to forget it here too (never silently).
  func offerLocalDelete(_ ctx: UAFContext, _ ops: ServerOperations) throws {
    let mine = (try? ctx.localData.authenticators(server: ops.backend.origin, username: username)) ?? []
    guard !mine.isEmpty else { return }
    let ids = mine.map(\.keyID).joined(separator: " ")
    if ctx.prompter.canAsk || options.yes,
      (try? ctx.prompter.confirm("The server no longer knows this registration. Delete it locally?")) == true
    {
      for r in mine { try? ctx.localData.delete(r.keyID) }
      ctx.prompter.say("Deleted locally: \(ids)")
    } else {
      ctx.prompter.say("To delete it locally: tokenbridge local delete \(ids)")
    }
  }
}

struct Deregister: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Deregister a user's registrations at the server and destroy their keys on the token.")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions
  @Option(help: "The username.") var username: String
  @Option(help: "Only this KeyID (default: all of the user's).") var keyId: String?

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let removed = try ctx.operations(options, serverOptions).deregister(
        username: username, keyID: keyId, verifier: ctx.prompter)
      if options.json {
        print(Render.json(["removed": removed]))
      } else {
        print(
          removed.isEmpty ? "Nothing was registered here for \(username)." : "Deregistered \(removed.count) key(s).")
      }
    }
  }
}

struct Accounts: ParsableCommand {
  static let configuration = CommandConfiguration(abstract: "List the accounts registered on this machine.")
  @OptionGroup var options: GlobalOptions
  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let accounts = try ctx.localData.accounts()
      if options.json {
        print(Render.json(accounts))
      } else {
        if accounts.isEmpty { print("No accounts.") }
        for a in accounts { print("\(TransactionContent.sanitized(a.username))  at \(a.server)") }
      }
    }
  }
}

struct Authenticators: ParsableCommand {
  static let configuration = CommandConfiguration(abstract: "List the registrations (keys on tokens) kept locally.")
  @OptionGroup var options: GlobalOptions
  @Flag(help: "Also show pending and abandoned slots.") var all = false

  struct Row: Encodable {
    var keyID, aaid, username, server, token, slot, state: String
    var signCounter: Int
  }

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let rows = try ctx.localData.authenticators(includeAll: all).map {
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
            "\(r.keyID)  \(r.aaid)  \(TransactionContent.sanitized(r.username))  \(r.token) slot \(r.slot)  \(r.state)  counter \(r.signCounter)"
          )
        }
      }
    }
  }
}

struct Local: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Local data only (the server is not told).", subcommands: [LocalDelete.self])
}

struct LocalDelete: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "delete",
    abstract: "Forget a registration locally (the server keeps it; its token slot is reused later).")
  @OptionGroup var options: GlobalOptions
  @Argument(help: "KeyID to forget.") var keyID: String

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      try ctx.localData.delete(keyID)
      print("Forgotten locally: \(keyID)")
    }
  }
}

struct Info: ParsableCommand {
  static let configuration = CommandConfiguration(abstract: "Version, facet ID, AAIDs and where data lives.")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions

  func run() throws {
    try options.execute {
      let config = try UAFContext.loadConfiguration()
      let server = serverOptions.server ?? config.server
      let facet = serverOptions.facetId ?? config.facetID ?? server.flatMap { try? BackendClient(server: $0).origin }
      let device = try? LocalData().deviceInformation()
      let info: [String: String] = [
        "deviceID": device?.deviceID ?? "(none: no registration yet)", "deviceName": device?.name ?? "(none)",
        "version": TokenBridgeVersion.string, "server": server ?? "(none)", "facetID": facet ?? "(none)",
        "pivAAID": config.pivAAID, "fido2AAID": config.fido2AAID,
        "configuration": Configuration.directory.appendingPathComponent("config.json").path,
        "localData": Configuration.dataDirectory.appendingPathComponent("tokenbridge.sqlite").path,
      ]
      if options.json {
        print(Render.json(info))
      } else {
        for k in info.keys.sorted() { print("\(k): \(info[k]!)") }
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
  @Option(help: "This client's facet ID (required unless set in the configuration).") var facetId: String?
  @Option(help: "Channel binding as JSON (ChannelBinding dictionary).") var channelBinding: String?

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      guard let facet = facetId ?? ctx.configuration.facetID else {
        throw InputError(message: "uaf process needs --facet-id (or facetID in the configuration).", status: .usage)
      }
      let input = FileHandle.standardInput.readData(ofLength: UAFMessageCodec.maxSize + 1)
      guard input.count <= UAFMessageCodec.maxSize else { throw OperationError.message(.tooLarge(input.count)) }
      var message = String(decoding: input, as: UTF8.self)
      if let obj = try? JSONSerialization.jsonObject(with: input) as? [String: Any] {
        guard let m = obj["uafProtocolMessage"] as? String else {
          throw OperationError.message(.malformed("no uafProtocolMessage"))
        }
        message = m
      }
      var client = UAFClient(
        configuration: ctx.configuration, facetID: facet, server: facet, localData: ctx.localData,
        tokens: try ctx.tokens(options).piv,
        fetchFacets: { url in
          try BackendClient(server: "\(url.scheme!)://\(url.host!)\(url.port.map { ":\($0)" } ?? "")").trustedFacets(
            url)
        })
      if let cb = channelBinding {
        guard let data = cb.data(using: .utf8), let v = try? JSONDecoder().decode(ChannelBinding.self, from: data)
        else {
          throw InputError(message: "--channel-binding must be a ChannelBinding JSON object.", status: .usage)
        }
        client.channelBinding = v
      }
      let result = try client.process(
        message, verifier: ctx.prompter, accountSelector: TerminalAccountSelector(prompter: ctx.prompter))
      // The caller delivers the response: as for the FIDO client API, the registration counts as made.
      if let k = result.pendingKeyID { try ctx.localData.confirmRegistration(k) }
      print(Render.json(["uafProtocolMessage": result.responseMessage ?? ""]))
    }
  }
}

enum TokenBridgeVersion {
  static let string = "0.2.0"
}

/// Ctrl-C while a FIDO2 key waits for a touch cancels that operation (the key answers KEEPALIVE_CANCEL and the
/// command ends as cancelled, exit 3); at any other moment it ends the program as usual.
enum CancelOnInterrupt {
  nonisolated(unsafe) static var source: DispatchSourceSignal?

  static func install() {
    guard source == nil else { return }
    signal(SIGINT, SIG_IGN)
    let s = DispatchSource.makeSignalSource(signal: SIGINT, queue: DispatchQueue(label: "interrupt"))
    s.setEventHandler {
      if !FIDO2Session.cancelActive() {
        FileHandle.standardError.write(Data("\ntokenbridge: interrupted\n".utf8))
        exit(130)
      }
    }
    s.resume()
    source = s
  }
}
