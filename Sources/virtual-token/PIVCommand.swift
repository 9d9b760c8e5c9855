import ArgumentParser
import Dispatch
import Foundation
import VirtualTokens

#if canImport(Glibc)
  import Glibc
#endif

struct PIV: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Serve a virtual PIV card to pcscd's vpcd reader.",
    discussion: """
      The card keeps its state (PIN, PUK, retries, keys, data objects) in --state, so it can be stopped and \
      started again. Signals: SIGUSR1 removes the card from the reader, SIGUSR2 inserts it again, \
      SIGTERM/SIGINT stop. Defaults: PIN 123456, PUK 12345678, 3 tries each, default management key.
      """)

  @Option(help: "vpcd address (host:port); vpcd's first slot listens on 35963.")
  var vpcd = "127.0.0.1:35963"

  @Option(help: "State file (created as a factory-fresh card if missing).")
  var state: String

  @Option(help: "Serial number for a new card.")
  var serial: UInt32 = 10_000_001

  @Option(help: "YubiKey firmware version for a new card (e.g. 5.4.3, 5.7.1).")
  var firmware = "5.4.3"

  @Option(help: "Management key algorithm for a new card: 3des or aes192.")
  var managementAlgorithm = "3des"

  @Option(help: "Write the process id here once running.")
  var pidFile: String?

  @Flag(help: "Start with the card out of the reader (insert with SIGUSR2).")
  var removed = false

  @Flag(help: "Simulate a card without a PIV application (SELECT answers 6A82).")
  var withoutPiv = false

  @Option(
    help: """
      yubikey (default: YubiKey's extensions and status words) or generic (SP 800-73-4 only: GET VERSION, \
      GET SERIAL, GET METADATA and the other Yubico instructions answer 6D00; an empty slot answers 6A88; \
      5 PIN tries; an ATR that names no vendor).
      """)
  var profile = "yubikey"

  @Option(
    help: """
      Status word for an empty key slot: 6A80, 6A82, 6A86 or 6A88 (default: the profile's); or 6985 for \
      GENERAL AUTHENTICATE alone, as CanoKey (the rest keep the profile's).
      """)
  var emptySlotStatus: String?

  @Flag(help: "GET METADATA of an empty key slot answers 9000 without an algorithm (with the yubikey profile).")
  var emptyMetadataWithoutAlgorithm = false

  @Option(help: "PIN tries of a new card, 1-15 (default: the profile's: yubikey 3, generic 5).")
  var pinTries: Int?

  @Option(help: "Test hook: cut a flow at its k-th APDU, driven through files in this directory (RequestPause).")
  var pauseDir: String?

  @Option(help: "Answer as slowly as a real token: none (default) or yubikey5 (per-command waits, HardwareNotes.md).")
  var latency = "none"

  func validate() throws {
    guard LatencyProfile.named(latency) != nil else {
      throw ValidationError("--latency must be one of: \(LatencyProfile.all.map(\.name).joined(separator: ", "))")
    }
    guard vpcdAddress != nil else { throw ValidationError("--vpcd must be HOST:PORT, e.g. 127.0.0.1:35963") }
    guard firmwareBytes != nil else { throw ValidationError("--firmware must be MAJOR.MINOR.PATCH, e.g. 5.4.3") }
    guard ["3des", "aes192"].contains(managementAlgorithm) else {
      throw ValidationError("--management-algorithm must be 3des or aes192")
    }
    _ = try cardProfile()
  }

  /// The profile the options describe.
  func cardProfile() throws -> PIVCardProfile {
    var p: PIVCardProfile
    switch profile {
    case "yubikey": p = .yubikey
    case "generic": p = .generic
    default: throw ValidationError("--profile must be yubikey or generic")
    }
    if let word = emptySlotStatus {
      guard let v = UInt16(word, radix: 16), PIVCardProfile.emptySlotWords.contains(v) else {
        throw ValidationError("--empty-slot-status must be 6A80, 6A82, 6A86, 6A88 or 6985")
      }
      if v == 0x6985 { p.signEmptySlotStatus = v } else { p.emptySlotStatus = v }
    }
    if emptyMetadataWithoutAlgorithm {
      guard p.yubicoExtensions else {
        throw ValidationError("--empty-metadata-without-algorithm needs GET METADATA: not with --profile generic")
      }
      p.emptyMetadataWithoutAlgorithm = true
    }
    if let n = pinTries {
      guard (1...15).contains(n) else { throw ValidationError("--pin-tries must be 1 to 15") }
      p.pinTries = n
    }
    return p
  }

  var vpcdAddress: (String, UInt16)? {
    let parts = vpcd.split(separator: ":")
    guard parts.count == 2, let port = UInt16(parts[1]) else { return nil }
    return (String(parts[0]), port)
  }

  var firmwareBytes: [UInt8]? {
    let parts = firmware.split(separator: ".").compactMap { UInt8($0) }
    return parts.count == 3 ? parts : nil
  }

  func run() throws {
    let url = URL(fileURLWithPath: state)
    let cardProfile = try self.cardProfile()
    let initial: PIVCardState
    do {
      initial =
        try PIVCardState.load(url)
        ?? .factory(
          serial: serial, version: firmwareBytes!, managementAlgorithm: managementAlgorithm == "aes192" ? 0x0A : 0x03,
          pinTries: cardProfile.pinTries)
      try initial.save(url)
    } catch {
      throw ValidationError("cannot use state file \(state): \(error.localizedDescription)")
    }
    let card = VirtualPIVCard(state: initial, profile: cardProfile)
    card.hasPIVApplication = !withoutPiv
    card.onStateChange = { s in
      do { try s.save(url) } catch { log("cannot save state: \(error)") }
    }
    let (host, port) = vpcdAddress!
    let link = VPCDLink(host: host, port: port, card: card, log: log)
    link.pause = pauseDir.map(RequestPause.init(directory:))
    link.latency = LatencyProfile.named(latency)!
    link.inserted = !removed

    let sources = handleSignals(
      [
        (SIGUSR1, { @Sendable in link.inserted = false }), (SIGUSR2, { @Sendable in link.inserted = true }),
        (SIGTERM, { @Sendable in link.stop() }), (SIGINT, { @Sendable in link.stop() }),
      ], pidFile: pidFile)
    log("virtual PIV card (serial \(initial.serial), state \(state)) for vpcd at \(host):\(port)")
    link.run()
    withExtendedLifetime(sources) {}
    log("stopped")
  }
}
