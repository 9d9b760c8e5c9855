import CommandLineCore
import FoundationEssentials
import Glibc
import TokenBridge

@main
enum TokenBridgeCommand {
  static let spec = CommandSpec(
    group: "tokenbridge",
    abstract: "Hardware tokens (PIV smart cards, FIDO2 keys) as authenticators: list them, manage PINs and keys.",
    discussion: "PINs are never taken as arguments: they are asked on the terminal, or read from --pin-fd.",
    subcommands: [
      Tokens.spec, Pin.spec, Puk.spec, Key.spec, Register.spec, Authenticate.spec, Deregister.spec, Accounts.spec,
      Authenticators.spec, Local.spec, Info.spec, UAF.spec, OutOfBand.spec, Pending.spec, Device.spec,
      FIDO2Command.spec, InstallDesktop.spec, Enroll.spec, DoctorCommand.spec, WatchCommand.spec, ExitCodes.spec,
    ])

  static let program = Program(root: spec, version: TokenBridgeVersion.string)

  static func main() {
    program.main(Array(CommandLine.arguments.dropFirst())) { error in
      // What a command did not report itself (`GlobalOptions.execute` reports token commands' errors).
      let report = ErrorReport(error)
      FileIO.writeError("tokenbridge: \(report.message)\n")
      return report.status.rawValue
    }
  }
}

/// A command of the CLI: its spec (names, help, arguments), built from the parsed values, checked, run.
protocol CLICommand {
  static var spec: CommandSpec { get }
  /// Reads the values (a transform's refusal is a usage error); option groups validate themselves here.
  init(_ p: Parsed) throws
  /// Checks of the values together (a `ValidationError`: exit 64 with the usage line).
  func validate() throws
  func run() throws
}

extension CLICommand {
  func validate() throws {}

  /// The spec's `run`: build, validate, run.
  static func invoke(_ p: Parsed) throws {
    let command = try Self(p)
    try command.validate()
    try command.run()
  }

  /// This command from these words (its options only, no command name), validated.
  static func parse(_ words: [String]) throws -> Self {
    let command = try Self(Parser.parse(words, for: spec))
    try command.validate()
    return command
  }
}

enum TokenBridgeVersion {
  static let string = "0.3.0"
}

/// Options every token command shares.
struct GlobalOptions {
  enum Arg {
    static let token = ArgumentSpec.option("token", help: "The token to use (an id from `tokenbridge tokens`).")
    static let wait = ArgumentSpec.flag(
      "wait",
      help: "No token (or not the one named by --token)? Wait for it to be inserted, up to --timeout seconds, "
        + "instead of failing (exit 14 when the time runs out).")
    static let json = ArgumentSpec.flag("json", help: "Machine-readable output.")
    static let trace = ArgumentSpec.flag(
      "trace", help: "Print APDUs to stderr (PIN, PUK and management-key bytes are redacted).")
    static let pinFd = ArgumentSpec.option(
      "pin-fd", .int32, help: "Read PINs/PUKs from this file descriptor, one per line, instead of the terminal.")
    static let yes = ArgumentSpec.flag(
      "yes", help: "Answer yes to confirmations (e.g. using the last PIN try). Use with care.")
    static let timeout = ArgumentSpec.option(
      "timeout", .double,
      help: "Seconds to wait for the user (prompt, pinentry, --pin-fd, touch; 1-86400). Default: interactionTimeout "
        + "in the configuration, else 240.")
    static let prompt = ArgumentSpec.option(
      "prompt",
      help: "How to ask for PINs: terminal, pinentry or auto (the terminal, else pinentry). Default: \"prompt\" in "
        + "the configuration, else auto.")
  }
  static let arguments = [Arg.token, Arg.wait, Arg.json, Arg.trace, Arg.pinFd, Arg.yes, Arg.timeout, Arg.prompt]

  var token: String?
  var wait = false
  var json = false
  var trace = false
  var pinFd: Int32?
  var yes = false
  var timeoutOption: Double?
  var prompt: String?

  /// The values, validated (as an option group, before the command's own `validate()`).
  init(_ p: Parsed) throws {
    token = p.string(Arg.token)
    wait = p.flag(Arg.wait)
    json = p.flag(Arg.json)
    trace = p.flag(Arg.trace)
    pinFd = p.int32(Arg.pinFd)
    yes = p.flag(Arg.yes)
    timeoutOption = p.double(Arg.timeout)
    prompt = p.string(Arg.prompt)
    try validate()
  }

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

struct ExitCodes: CLICommand {
  static let spec = CommandSpec(
    name: "exit-codes", abstract: "List the exit codes and what they mean.", run: invoke)
  init(_ p: Parsed) {}
  func run() {
    for s in ExitStatus.allCases { print("\(s.rawValue)\t\(s.meaning)") }
  }
}
