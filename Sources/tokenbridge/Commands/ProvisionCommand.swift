import ArgumentParser
import FoundationEssentials
import Platform
import Prompts
import TokenBridge

struct Provision: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "provision",
    abstract: "Enroll a desk of tokens for a list of users: fresh sealed PINs, registrations, a resumable journal.",
    discussion: """
      Every token present is given a row of PLAN.csv (username, and optionally serial, kind, payload): rows naming \
      a serial first, then in order. A token at its factory PIN (or without one) gets a fresh random PIN, sealed \
      with age to --pin-recipient; a token with its own PIN needs it on --pin-fd. Then the row's user is \
      registered at the server (or the row's out-of-band payload is redeemed). With --wait, tokens plugged in \
      during the run take the rows still without one, until every row has one or --timeout seconds pass without \
      a token arriving. The journal makes a rerun finish only what is not done. Exit 0 when every row is done, 2 \
      when some are not.
      """)
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions
  @Option(help: "The plan: a CSV file with a header (username; serial, kind, payload optional).")
  var plan: String
  @Option(help: "The journal (SQLite, made 0600): a rerun with the same journal finishes what is not done.")
  var journal: String
  @Option(help: "Write the report (JSON) here.")
  var report: String?
  @Option(help: "Write the report's scalar fields as CSV here.")
  var csv: String?
  @Option(help: "Seal every fresh PIN to this age recipient (age1…, or an SSH public key).")
  var pinRecipient: String?
  @Option(help: "Tokens worked at once (1-32; default: the number of tokens).")
  var parallel: Int?

  func validate() throws {
    if options.token != nil { throw ValidationError("provision works on every token present: no --token") }
  }

  func run() throws {
    try options.execute {
      var configuration = try Configuration.load()
      if let t = options.timeoutOption { configuration.interactionTimeout = t }
      var current: Secret? = nil
      if let fd = options.pinFd {
        current = try SecretLineReader(fd: fd, timeout: configuration.interactionTimeout).next()
      }
      var p = Provisioning(planPath: plan, journalPath: journal, configuration: configuration)
      p.recipient = pinRecipient
      p.currentPIN = current?.bytes
      p.parallel = parallel
      if options.wait { p.waitSeconds = configuration.interactionTimeout }
      p.server = serverOptions.server
      p.facetID = serverOptions.facetId
      let json = options.json
      let result = try p.run { event in
        if json {
          FileIO.writeOutput(JSONOutput.line(event) + "\n")
        } else {
          FileIO.writeError(Self.line(event) + "\n")
        }
      }
      p.currentPIN = nil
      if let report { try ProvisionReport.write(JSONOutput.text(result) + "\n", to: report) }
      if let csv { try ProvisionReport.write(result.csv, to: csv) }
      let s = result.summary
      if json {
        FileIO.writeOutput(JSONOutput.line(["summary": s]) + "\n")
      } else {
        print("\(s.done) of \(s.rows) rows done, \(s.failed) failed, \(s.pending) pending.")
      }
      if !result.isComplete { throw ExitCode(ExitStatus.incomplete.rawValue) }
    }
  }

  /// One progress line (server and token text made displayable).
  static func line(_ e: ProvisionEvent) -> String {
    let who = [e.row.map { "row \($0)" }, e.username.map(displayable), e.token].compactMap { $0 }.joined(separator: " ")
    let what: String
    switch e.event {
    case .assigned: what = "token assigned"
    case .pinSet: what = "PIN ready"
    case .registered: what = "registered (KeyID \(e.message ?? ""))"
    case .adopted: what = "registration of an interrupted run adopted (KeyID \(e.message ?? ""))"
    case .done: what = "done"
    case .failed: what = "failed: \(e.message ?? "")"
    case .pending: what = "pending (no token for it here)"
    case .unusedToken: what = "no row for this token; left alone"
    case .waiting: what = "waiting for tokens: rows without one: \(e.message ?? "") (plug them in)"
    }
    return "provision: \(who): \(what)"
  }
}
