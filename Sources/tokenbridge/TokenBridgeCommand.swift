import ArgumentParser
import Foundation
import TokenBridge
import TokenDevices

@main
struct TokenBridgeCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "tokenbridge",
    abstract: "Hardware tokens (PIV smart cards) as authenticators: list them, manage PINs and keys.",
    discussion: "PINs are never taken as arguments: they are asked on the terminal, or read from --pin-fd.",
    version: TokenBridgeVersion.string,
    subcommands: [
      Tokens.self, Pin.self, Puk.self, Key.self, Register.self, Authenticate.self, Deregister.self, Accounts.self,
      Authenticators.self, Local.self, Info.self, UAF.self, ExitCodes.self,
    ])
}

/// Options every token command shares.
struct GlobalOptions: ParsableArguments {
  @Option(name: .long, help: "The token to use (an id from `tokenbridge tokens`).")
  var token: String?

  @Flag(help: "Machine-readable output.")
  var json = false

  @Flag(help: "Print APDUs to stderr (PIN, PUK and management-key bytes are redacted).")
  var trace = false

  @Option(help: "Read PINs/PUKs from this file descriptor, one per line, instead of the terminal.")
  var pinFd: Int32?

  @Flag(help: "Answer yes to confirmations (e.g. using the last PIN try). Use with care.")
  var yes = false

  @Option(help: "Seconds to wait for an answer at a prompt.")
  var timeout: Double = 240

  func validate() throws {
    if let fd = pinFd, fd < 0 || fcntl(fd, F_GETFD) < 0 {
      throw ValidationError("--pin-fd \(fd) is not an open file descriptor")
    }
    guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
  }

  var traceSink: TraceSink? {
    guard trace else { return nil }
    return { line in FileHandle.standardError.write(Data("apdu \(line)\n".utf8)) }
  }

  func prompter() -> Prompter { Prompter(pinFD: pinFd, assumeYes: yes, timeout: timeout) }

  /// Finds the token to work on; asks on the terminal when there are several and none is named.
  /// PIV commands (keys): FIDO2 keys are not even enumerated.
  func chooseToken(_ prompter: Prompter, includePUK: Bool = false) throws -> DiscoveredToken {
    let selector = prompter.terminal.map(TerminalTokenSelector.init)
    var selection = TokenSelection(trace: traceSink, includePUK: includePUK)
    selection.discovery.includeFIDO2 = false
    return try selection.choose(id: token, selector: selector)
  }

  /// Finds a token of either kind (PIV card or FIDO2 key).
  func chooseAnyToken(_ prompter: Prompter, includePUK: Bool = true) throws -> AnyToken {
    let selector = prompter.terminal.map(TerminalTokenSelector.init)
    return try TokenSelection(trace: traceSink, includePUK: includePUK).chooseAny(id: token, selector: selector)
  }

  /// Runs `body`; a failure becomes its message (stderr, or JSON on stdout with --json) and exit code.
  func execute(_ body: () throws -> Void) throws {
    do {
      try body()
    } catch let e as ExitCode {
      throw e
    } catch let e as ValidationError {
      throw e
    } catch {
      let (message, status) = ErrorReport.describe(error)
      if json {
        print(Render.json(["error": message, "exitCode": "\(status.rawValue)"]))
      } else {
        FileHandle.standardError.write(Data("tokenbridge: \(message)\n".utf8))
      }
      throw status.code
    }
  }
}

struct ExitCodes: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "exit-codes", abstract: "List the exit codes and what they mean.")
  func run() {
    for s in ExitStatus.allCases { print("\(s.rawValue)\t\(s.meaning)") }
  }
}
