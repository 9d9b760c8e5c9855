import ArgumentParser
import FoundationEssentials
import Platform
import Prompts
import TokenBridge

struct FIDO2Command: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "fido2",
    abstract: "FIDO2 key maintenance: what the key supports, its discoverable credentials, reset.",
    subcommands: [FIDO2InfoCommand.self, FIDO2Credentials.self, FIDO2Reset.self])
}

extension GlobalOptions {
  func fido2Key(_ prompter: Prompter) throws -> DiscoveredFIDO2 {
    try selection(includeFIDO2: true).chooseFIDO2(
      id: token, selector: prompter.terminal.map(TerminalTokenSelector.init))
  }
}

struct FIDO2InfoCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "info",
    abstract: "Versions, extensions, options, PIN/UV tries, minimum PIN length, room for discoverable credentials.",
    discussion: "Reads getInfo and the tries left (spends no try); what `fido2-token -I` shows.")
  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let key = try options.fido2Key(options.prompter())
      let r = try FIDO2Maintenance.report(key)
      if options.json {
        print(Render.json(r))
        return
      }
      func yesNo(_ b: Bool?) -> String { b == true ? "yes" : "no" }
      print("\(displayable(r.name)) (\(r.token))")
      print("  AAGUID: \(r.aaguid)")
      print("  versions: \(r.versions.map(displayable).joined(separator: ", "))")
      print("  extensions: \(r.extensions.isEmpty ? "none" : r.extensions.map(displayable).joined(separator: ", "))")
      if let fw = r.firmwareVersion { print("  firmware: \(fw)") }
      print("  PIN: \(r.options["clientPin"] == nil ? "not supported" : r.options["clientPin"]! ? "set" : "not set")")
      if let n = r.pinRetries, r.options["clientPin"] == true {
        print("  PIN tries left: \(n) (of 8)\(r.powerCycleRequired == true ? Render.coolingDown : "")")
      }
      if let n = r.uvRetries { print("  built-in verification (UV) tries left: \(n)") }
      print("  minimum PIN length: \(r.minPINLength)\(r.forcePINChange ? " (the key asks for a new PIN)" : "")")
      print("  PIN protocols: \(r.pinProtocols.map(String.init).joined(separator: ", "))")
      print("  discoverable credentials: \(yesNo(r.options["rk"]))", terminator: "")
      if let n = r.remainingDiscoverableCredentials { print(", room for \(n) more") } else { print("") }
      print("  credential management: \(yesNo(r.supportsCredentialManagement))")
      if let m = r.maxMsgSize { print("  largest message: \(m) bytes") }
      let names = r.options.keys.sorted().map { "\(displayable($0))=\(r.options[$0]! ? "true" : "false")" }
      print("  options: \(names.joined(separator: ", "))")
    }
  }
}

struct FIDO2Credentials: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "credentials",
    abstract: "List the discoverable (resident) credentials on the key (needs the PIN).",
    discussion: "With --pin-fd N: the PIN on descriptor N.",
    subcommands: [FIDO2CredentialsList.self, FIDO2CredentialsDelete.self],
    defaultSubcommand: FIDO2CredentialsList.self)
}

struct FIDO2CredentialsList: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "list", abstract: "List the discoverable credentials: RP, user, credential id, made by TokenBridge.")
  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let prompter = try options.prompter()
      let env = try UAFEnvironment()
      UAFContext.finishInterrupted(env, options, prompter)
      let key = try options.fido2Key(prompter)
      let list = try FIDO2Maintenance(environment: env, interactionTimeout: options.timeout).credentials(
        key, verifier: prompter)
      if options.json {
        print(Render.json(list))
        return
      }
      if list.isEmpty { print("No discoverable credentials on \(key.info.id).") }
      for c in list { print(Render.credential(c)) }
    }
  }
}

struct FIDO2CredentialsDelete: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "delete",
    abstract: "Delete one discoverable credential (after typing its RP id to confirm).",
    discussion: "With --pin-fd N: the PIN, then the confirmation (the RP id), one per line, on descriptor N.")
  @OptionGroup var options: GlobalOptions
  @Argument(help: "The credential id (as `fido2 credentials` lists it: base64url, or hex).")
  var id: String

  func run() throws {
    try options.execute {
      let prompter = try options.prompter()
      let env = try UAFEnvironment()
      UAFContext.finishInterrupted(env, options, prompter)
      let key = try options.fido2Key(prompter)
      let gone = try FIDO2Maintenance(environment: env, interactionTimeout: options.timeout).deleteCredential(
        key, id: id, verifier: prompter
      ) { c in
        prompter.say(Render.credential(c))
        if !c.registrations.isEmpty {
          prompter.say(
            "  Its UAF registration(s) stop working and are forgotten here: \(c.registrations.joined(separator: ", "))")
        }
        let rp = c.credential.rpID
        let typed = try prompter.typedAnswer("To delete it for good, type its RP id (\(displayable(rp))): ")
        return typed == rp
      }
      if options.json {
        print(Render.json(["deleted": gone.id]))
      } else {
        print("Deleted \(gone.id).")
      }
    }
  }
}

struct FIDO2Reset: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "reset",
    abstract: "Reset a FIDO2 key (the only way back from a blocked PIN): erases every credential on it.",
    discussion: """
      Names the key and lists what the reset destroys (the UAF registrations in local data that depend on it), \
      asks for the key id typed in full, then asks you to remove and re-insert the key: a key takes a reset only \
      within a few seconds of being plugged in, and wants a touch. The key that comes back is checked to be the \
      same one. Afterwards its registrations are deregistered at their servers and removed from local data. \
      With --pin-fd N the confirmation (the key id) is read from descriptor N.
      """)
  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let prompter = try options.prompter()
      let env = try UAFEnvironment()
      UAFContext.finishInterrupted(env, options, prompter)
      let key = try options.fido2Key(prompter)
      let results = try FIDO2Maintenance(environment: env, interactionTimeout: options.timeout).reset(
        key, interaction: prompter)
      if options.json {
        struct Out: Encodable {
          var reset: String
          var deregistered: [String]
          var failed: [String: String]
        }
        print(
          Render.json(
            Out(
              reset: key.info.id, deregistered: results.filter { $0.failure == nil }.map(\.record.keyID),
              failed: Dictionary(
                uniqueKeysWithValues: results.compactMap { r in r.failure.map { (r.record.keyID, $0.message) } }))))
        return
      }
      print("\(key.info.id) was reset: it holds no credentials and no PIN now (set one: tokenbridge pin set).")
      for r in results {
        let what = "\(displayable(r.record.username)) at \(displayable(r.record.server)) (\(r.record.aaid))"
        if let f = r.failure {
          print("  \(what): not deregistered at the server (\(f.message)); removed here.")
        } else {
          print("  \(what): deregistered at the server and removed here.")
        }
      }
    }
  }
}

extension Render {
  static func credential(_ c: FIDO2CredentialListing) -> String {
    let cr = c.credential
    let rp = displayable(cr.rpID) + (cr.rpName.map { " (\(displayable($0)))" } ?? "")
    let user = displayable(cr.userName ?? "") + (cr.userDisplayName.map { " (\(displayable($0)))" } ?? "")
    return "\(c.id)\n  RP: \(rp)\n  user: \(user.isEmpty ? "(no name)" : user)\n  made by TokenBridge: "
      + (c.createdByTokenBridge ? "yes" : "no")
      + (c.registrations.isEmpty ? "" : "\n  UAF registrations: \(c.registrations.joined(separator: ", "))")
  }
}
