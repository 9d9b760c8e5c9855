import ArgumentParser
import Dispatch
import Foundation
import VirtualTokens

#if canImport(Glibc)
  import Glibc
#endif

struct FIDO2: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "fido2",
    abstract: "Serve a virtual CTAP 2.1 key (CTAPHID reports) on a Unix socket.",
    discussion: """
      Clients: libfido2 through its custom I/O hooks (tokenbridge: TOKENBRIDGE_VIRTUAL_FIDO=<socket>), \
      python-fido2 through a CtapHidConnection. No PIN at first; 8 PIN tries, 3 wrong in a row need a replug. \
      Signals: SIGUSR1 replugs (the socket file is removed, then made again: power cycle, the reset window \
      starts), SIGUSR2 touches it (--presence wait), SIGTERM/SIGINT stop.
      """)

  @Option(help: "Unix socket path to listen on.") var socket: String
  @Option(help: "State file (created factory-fresh if missing).") var state: String
  @Option(help: "User presence: auto (touch at once), deny, timeout, wait (touch with SIGUSR2), wait-ignoring-cancel.")
  var presence = "auto"
  @Option(help: "Seconds after (re)plugging during which reset is allowed.") var resetWindow: Double = 10
  @Option(help: "Write the process id here once running.") var pidFile: String?
  @Flag(help: "Log every CTAPHID request to stderr (for benchmarks).") var logRequests = false
  @Option(
    help: "Test hook: cut a flow at its k-th CTAPHID message, driven through files in this directory (RequestPause).")
  var pauseDir: String?
  @Flag(help: "Start with forcePINChange set (the PIN must be changed before it is used).") var forcePinChange = false
  @Option(
    help: """
      How the key answers where firmwares differ: ctap21 (the CTAP 2.1 spec), ctap20 (a CTAP 2.0 key: PIN \
      protocol 1, no PIN token with permissions), solo1 (as SoloKeys solo1 4.1.5: FIDO_2_1_PRE without \
      pinUvAuthToken, CTAP1_ERR_OTHER for unknown PIN subcommands, no powerCycleState, empty credential \
      management answers), canokey (as canokey-core: no powerCycleState, makeCredUvNotRqd).
      """)
  var profile = "ctap21"
  @Flag(help: "Same as --profile ctap20.") var ctap20 = false
  @Flag(help: "Leave out getPINRetries' powerCycleState, whatever the profile.") var noPowerCycleState = false
  @Option(help: "Answer as slowly as a real token: none (default) or yubikey5 (per-command waits, HardwareNotes.md).")
  var latency = "none"

  func validate() throws {
    guard LatencyProfile.named(latency) != nil else {
      throw ValidationError("--latency must be one of: \(LatencyProfile.all.map(\.name).joined(separator: ", "))")
    }
    guard UserPresence(rawValue: presence) != nil else {
      throw ValidationError("--presence must be auto, deny, timeout, wait or wait-ignoring-cancel")
    }
    guard FIDO2Profile.named(profile) != nil else {
      throw ValidationError("--profile must be one of: \(FIDO2Profile.all.map(\.name).joined(separator: ", "))")
    }
    guard !ctap20 || ["ctap21", "ctap20"].contains(profile) else {
      throw ValidationError("--ctap20 is --profile ctap20; name one profile")
    }
  }

  func run() throws {
    let url = URL(fileURLWithPath: state)
    let initial: FIDO2State
    do {
      var state = try FIDO2State.load(url) ?? .factory()
      if forcePinChange { state.forcePINChange = true }
      initial = state
      try initial.save(url)
    } catch {
      throw ValidationError("cannot use state file \(state): \(error.localizedDescription)")
    }
    let key = VirtualFIDO2Key(state: initial)
    key.presence = UserPresence(rawValue: presence)!
    key.resetWindow = resetWindow
    key.profile = FIDO2Profile.named(ctap20 ? "ctap20" : profile)!
    key.omitsPowerCycleState = noPowerCycleState
    key.onStateChange = { s in
      do { try s.save(url) } catch { log("cannot save state: \(error)") }
    }
    let server = CTAPHIDServer(key: key, path: socket, log: log)
    server.logRequests = logRequests
    server.engine.pause = pauseDir.map(RequestPause.init(directory:))
    server.engine.latency = LatencyProfile.named(latency)!
    let sources = handleSignals(
      [
        (SIGUSR1, { @Sendable in server.replug() }), (SIGUSR2, { @Sendable in key.touchNow() }),
        (SIGTERM, { @Sendable in server.stop() }),
        (SIGINT, { @Sendable in server.stop() }),
      ], pidFile: pidFile)
    log("virtual FIDO2 key on \(socket) (state \(state), profile \(key.profile.name))")
    do { try server.run() } catch { throw ValidationError("cannot listen on \(socket): \(error)") }
    withExtendedLifetime(sources) {}
  }
}
