import ArgumentParser
import Foundation
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
      Authenticators.self, Local.self, Info.self, UAF.self, OutOfBand.self, Pending.self, Device.self,
      FIDO2Command.self, InstallDesktop.self, Enroll.self, DoctorCommand.self, ExitCodes.self,
    ])
}

enum TokenBridgeVersion {
  static let string = "0.3.0"
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

  @Option(help: "Seconds to wait for an answer at a prompt or on --pin-fd (1-86400).")
  var timeout: Double = 240

  func validate() throws {
    if let fd = pinFd, fd < 0 || fcntl(fd, F_GETFD) < 0 {
      throw ValidationError("--pin-fd \(fd) is not an open file descriptor")
    }
    guard timeout.isFinite, timeout >= 1, timeout <= 86_400 else {
      throw ValidationError("--timeout must be a number of seconds from 1 to 86400")
    }
  }

  var traceSink: TraceSink? {
    guard trace else { return nil }
    return { line in FileHandle.standardError.write(Data("apdu \(displayable(line))\n".utf8)) }
  }

  func prompter() -> Prompter { Prompter(pinFD: pinFd, assumeYes: yes, timeout: timeout) }

  /// PIV commands (keys): FIDO2 keys are not even enumerated.
  func selection(includePUK: Bool = false, includeFIDO2: Bool) -> TokenSelection {
    TokenSelection(trace: traceSink, includePUK: includePUK, includeFIDO2: includeFIDO2)
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
        var out = ["error": report.message, "exitCode": "\(report.status.rawValue)"]
        if let code = report.code { out["code"] = code }
        print(Render.json(out))
      } else {
        FileHandle.standardError.write(Data("tokenbridge: \(report.message)\n".utf8))
      }
      throw ExitCode(report.status.rawValue)
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
