import ArgumentParser
import FoundationEssentials
import Platform
import Prompts
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
    Self.finishInterrupted(env, options, prompter)
  }

  /// Finishes (or reports) what an interrupted reset, credential deletion or key overwrite left behind, and says
  /// so: plain text on stderr, or with --json one line `{"interruptedOperations":[…]}` on stderr (stdout keeps
  /// the command's own output).
  static func finishInterrupted(_ env: UAFEnvironment, _ options: GlobalOptions, _ prompter: Prompter) {
    let outcomes = env.finishInterruptedOperations(trace: options.traceSink)
    guard !outcomes.isEmpty else { return }
    if options.json {
      struct Notice: Encodable { var interruptedOperations: [IntentOutcome] }
      FileIO.writeError(JSONOutput.line(Notice(interruptedOperations: outcomes)) + "\n")
    } else {
      for o in outcomes { for line in o.lines { prompter.say("tokenbridge: " + line) } }
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
