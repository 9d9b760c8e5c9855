import ArgumentParser
import FoundationEssentials
import Glibc
import Platform
import Prompts
import TokenBridge

@main
struct TokenBridgeCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "tokenbridge",
    abstract: "Hardware tokens (PIV smart cards, FIDO2 keys) as authenticators: list them, manage PINs and keys.",
    discussion: "PINs are never taken as arguments: they are asked on the terminal, or read from --pin-fd.",
    version: TokenBridgeVersion.string,
    subcommands: [
      Tokens.self, Pin.self, Puk.self, Key.self, Register.self, Authenticate.self, Deregister.self, Accounts.self,
      Authenticators.self, Local.self, Info.self, Metadata.self, UAF.self, OutOfBand.self, Pending.self, Device.self,
      FIDO2Command.self, InstallDesktop.self, Enroll.self, DoctorCommand.self, WatchCommand.self, ServeCommand.self,
      ExitCodes.self, BrowserHostCommand.self, Provision.self,
    ])

  /// swift-argument-parser's `main()`, except for what a command did not report itself (`GlobalOptions.execute`
  /// reports token commands' errors): that is `ErrorReport`'s message and exit status, not the parser's "Error:"
  /// line and exit 1.
  static func main() {
    refuseUnknownHelpTopic(CommandLine.arguments.dropFirst())
    var command: any ParsableCommand
    do {
      command = try parseAsRoot()
    } catch {
      exit(withError: error)  // help, --version, usage errors (exit 64)
    }
    do {
      try command.run()
    } catch  where isParserError(error) {
      exit(withError: error)  // a group run without a subcommand (its help), `help bogus`, ExitCode, ValidationError
    } catch {
      let report = ErrorReport(error)
      FileIO.writeError("tokenbridge: \(report.message)\n")
      exit(withError: ExitCode(report.status.rawValue))
    }
  }

  /// `tokenbridge help bogus` is a usage error naming the word, as a mistyped command is (the parser's `help`
  /// shows the help of the last command it recognised, exit 0).
  static func refuseUnknownHelpTopic(_ args: ArraySlice<String>) {
    guard args.first == "help" else { return }
    var command: any ParsableCommand.Type = Self.self
    for word in args.dropFirst() where !word.hasPrefix("-") {
      guard let next = command.configuration.subcommands.first(where: { $0.configuration.commandName == word })
      else { exit(withError: ValidationError("Unknown command '\(word)'")) }
      command = next
    }
  }

  /// An error of swift-argument-parser's (its `help` command throws its own, internal, error type), which its
  /// `exit(withError:)` prints and maps to an exit status.
  static func isParserError(_ error: any Error) -> Bool {
    error is ExitCode || error is CleanExit || error is ValidationError
      || String(reflecting: type(of: error)).hasPrefix("ArgumentParser.")
  }
}

/// Options every token command shares.
struct GlobalOptions: ParsableArguments {
  @Option(help: "The token to use (an id from `tokenbridge tokens`).")
  var token: String?

  @Flag(
    help: ArgumentHelp(
      "No token (or not the one named by --token)? Wait for it to be inserted, up to --timeout seconds, "
        + "instead of failing (exit 14 when the time runs out)."))
  var wait = false

  @Flag(help: "Machine-readable output.")
  var json = false

  @Flag(help: "Print APDUs to stderr (PIN, PUK and management-key bytes are redacted).")
  var trace = false

  @Option(help: "Read PINs/PUKs from this file descriptor, one per line, instead of the terminal.")
  var pinFd: Int32?

  @Flag(help: "Answer yes to confirmations (e.g. using the last PIN try). Use with care.")
  var yes = false

  @Option(
    name: .customLong("timeout"),
    help: ArgumentHelp(
      "Seconds to wait for the user (prompt, pinentry, --pin-fd, touch; 1-86400). Default: interactionTimeout "
        + "in the configuration, else 240."))
  var timeoutOption: Double?

  @Option(
    help: ArgumentHelp(
      "How to ask for PINs: terminal, pinentry or auto (the terminal, else pinentry). Default: \"prompt\" in "
        + "the configuration, else auto."))
  var prompt: String?

  func validate() throws {
    if let fd = pinFd, fd < 0 || fcntl(fd, F_GETFD) < 0 {
      throw ValidationError("--pin-fd \(fd) is not an open file descriptor")
    }
    if let timeout = timeoutOption, !timeout.isFinite || timeout < 1 || timeout > 86_400 {
      throw ValidationError("--timeout must be a number of seconds from 1 to 86400")
    }
    if let p = prompt, PromptMode(rawValue: p) == nil {
      throw ValidationError("--prompt must be terminal, pinentry or auto")
    }
  }

  /// Seconds to wait for the user: --timeout, else the configuration's interactionTimeout (a broken
  /// configuration is reported by the command's own loading of it), else 240.
  var timeout: Double {
    timeoutOption ?? (try? Configuration.load())?.interactionTimeout ?? Configuration().interactionTimeout
  }

  var traceSink: TraceSink? {
    guard trace else { return nil }
    return { line in FileIO.writeError("apdu \(displayable(line))\n") }
  }

  /// The prompts of this command: --prompt / "prompt", the pinentry named by $PINENTRY_PROGRAM, else the
  /// configuration's "pinentry", else `pinentry`.
  func prompter() throws -> Prompter {
    let config = try Configuration.load()
    let mode = prompt.flatMap(PromptMode.init(rawValue:)) ?? config.prompt
    let named = Environment.value("PINENTRY_PROGRAM").flatMap { $0.isEmpty ? nil : $0 }
    return Prompter(
      pinFD: pinFd, assumeYes: yes, timeout: timeoutOption ?? config.interactionTimeout, mode: mode,
      pinentryProgram: named ?? config.pinentry)
  }

  /// PIV commands (keys): FIDO2 keys are not even enumerated. With --pin-fd no prompt shows a card's version
  /// or its PIN's maximum, so discovery does not read them.
  /// `identify: false` for a command whose output never names the token (its id is read only to be shown).
  func selection(includePUK: Bool = false, includeFIDO2: Bool, identify: Bool = true) -> TokenSelection {
    var s = TokenSelection(
      trace: traceSink, includePUK: includePUK, includeFIDO2: includeFIDO2, details: pinFd == nil, identify: identify)
    s.wait = tokenWait
    return s
  }

  /// `--wait`: "insert your token" on stderr, then waits (event-driven) up to the timeout.
  var tokenWait: TokenWait? {
    guard wait else { return nil }
    let seconds = timeout
    return TokenWait(
      seconds: seconds,
      insertToken: { id in
        let which = id.map { "the token \($0)" } ?? "your token"
        FileIO.writeError("tokenbridge: insert \(which) (waiting up to \(Int(seconds)) s)…\n")
      },
      arrived: { FileIO.writeError("tokenbridge: token found.\n") })
  }

  /// Runs `body`; a failure becomes its message (stderr, or JSON on stdout with --json) and exit code.
  func execute(_ body: () throws -> Void) throws {
    Interrupts.install()
    do {
      try body()
    } catch let e as ExitCode {
      throw e
    } catch let e as ValidationError {
      throw e
    } catch {
      let report = ErrorReport(error)
      if json {
        print(
          Render.json(
            ErrorJSON(
              error: report.message, exitCode: "\(report.status.rawValue)", code: report.code,
              candidates: ErrorReport.candidates(error))))
      } else {
        FileIO.writeError("tokenbridge: \(report.message)\n")
      }
      throw ExitCode(report.status.rawValue)
    }
  }
}

/// An error with --json: the message, the exit code (a string, as always), the code underneath, and for a
/// choice nobody could make, every candidate with its reasons.
struct ErrorJSON: Encodable {
  var error: String
  var exitCode: String
  var code: String?
  var candidates: [SelectionCandidate]?
}

struct ExitCodes: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "exit-codes", abstract: "List the exit codes and what they mean.")
  func run() {
    for s in ExitStatus.allCases { print("\(s.rawValue)\t\(s.meaning)") }
  }
}
