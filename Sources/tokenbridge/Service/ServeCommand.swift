import ArgumentParser
import FoundationEssentials
import Platform
import TokenBridge
import TokenBridgeService

struct ServeCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "serve",
    abstract: "The desktop service: the FIDO UAF client API on the session D-Bus (docs/dbus-api.md).",
    discussion: """
      Takes org.tokenbridge.TokenBridge1 on the session bus and serves Discover, CheckPolicy, \
      ProcessUAFOperation, NotifyUAFResult, ProcessOutOfBand and ListTokens to programs of this user; prompts go \
      through pinentry, the touch cue and results through desktop notifications. Usually started by D-Bus \
      activation; exits after --idle-timeout seconds without a request.
      """)
  @Option(help: "Seconds without a request before the service exits (0: never).")
  var idleTimeout: Double = 60
  @Option(help: "A D-Bus address to serve on instead of the session bus (tests).")
  var address: String?
  @Option(help: .hidden)
  var callTimeout: Double = 20

  func validate() throws {
    guard idleTimeout >= 0, idleTimeout <= 86_400 else { throw ValidationError("--idle-timeout: 0 to 86400") }
    guard callTimeout > 0, callTimeout <= 600 else { throw ValidationError("--call-timeout: 0 to 600") }
  }

  func run() throws {
    let configuration: Configuration
    do { configuration = try Configuration.load() } catch {
      let r = ErrorReport(OperationError.configuration(error))
      FileIO.writeError("tokenbridge serve: \(r.message)\n")
      throw ExitCode(r.status.rawValue)
    }
    do {
      let service = try DesktopService(
        address: address, configuration: configuration, idleTimeout: idleTimeout, callTimeout: callTimeout)
      try service.run()
    } catch let e as ServiceBusError {
      FileIO.writeError("tokenbridge serve: \(e.message)\n")
      throw ExitCode(1)
    } catch let e as LibraryUnavailable {
      FileIO.writeError("tokenbridge serve: \(ErrorReport(OperationError.localData(.libraryMissing(e))).message)\n")
      throw ExitCode(1)
    }
  }
}
