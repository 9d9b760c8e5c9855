import ArgumentParser
import Dispatch
import Foundation
import VirtualTokens

#if canImport(Glibc)
  import Glibc
#endif

@main
struct VirtualToken: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "virtual-token",
    abstract: "Simulated hardware tokens for tests and demos.",
    subcommands: [PIV.self, FIDO2.self, USBIP.self])
}

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

  func validate() throws {
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
    link.inserted = !removed

    let sources = handleSignals(
      [
        (SIGUSR1, { link.inserted = false }), (SIGUSR2, { link.inserted = true }),
        (SIGTERM, { link.stop() }), (SIGINT, { link.stop() }),
      ], pidFile: pidFile)
    log("virtual PIV card (serial \(initial.serial), state \(state)) for vpcd at \(host):\(port)")
    link.run()
    withExtendedLifetime(sources) {}
    log("stopped")
  }
}

func log(_ s: String) {
  FileHandle.standardError.write(Data("virtual-token: \(s)\n".utf8))
}

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
  @Option(help: "User presence: auto (touch at once), deny, timeout, wait (touch with SIGUSR2).")
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

  func validate() throws {
    guard UserPresence(rawValue: presence) != nil else {
      throw ValidationError("--presence must be auto, deny, timeout or wait")
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
    let sources = handleSignals(
      [
        (SIGUSR1, { server.replug() }), (SIGUSR2, { key.touchNow() }), (SIGTERM, { server.stop() }),
        (SIGINT, { server.stop() }),
      ], pidFile: pidFile)
    log("virtual FIDO2 key on \(socket) (state \(state), profile \(key.profile.name))")
    do { try server.run() } catch { throw ValidationError("cannot listen on \(socket): \(error)") }
    withExtendedLifetime(sources) {}
  }
}

struct USBIP: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "usbip",
    abstract: "Serve virtual tokens as USB devices over USB/IP (for vhci-hcd: usbip attach -r HOST -b 1-N).",
    discussion: """
      Each --device is one USB device, bus id 1-1, 1-2, ... in order: fido (FIDO HID interface, the virtual \
      CTAP 2.1 key), ccid (CCID interface, the virtual PIV card in its slot), composite (both in one device) or \
      fido-external (a FIDO HID interface in front of an external key: every 64-byte report goes to the key socket \
      of the next --fido-socket, a Unix SOCK_SEQPACKET socket with one report per datagram as `virtual-token fido2 \
      --socket` serves, and its reports come back). Device 1-N keeps its state in --state-dir as 1-N.fido.json / \
      1-N.piv.json (created factory-fresh). Each attach is a power-up (the FIDO2 reset window starts; an external \
      key gets a new connection, and a key whose socket is not there cannot be attached); an external key that \
      drops the connection (replugged or stopped) unplugs its device. Signals: SIGUSR1 takes the cards out of their \
      CCID slots, SIGUSR2 puts them back, SIGHUP unplugs every attached device, SIGTERM/SIGINT stop.

      Pulling a token at a chosen step (the lab's pull sweep; every device has its own count): a request is one \
      CCID PC_to_RDR_XfrBlock (an APDU, or a part of a chained one) or one CTAPHID output report. \
      --unplug-after-request K unplugs the device at its K-th request since the start, once; --unplug-control FILE \
      arms it at run time: a file holding "K [processed|dropped]" is read and removed at the next request, which is \
      then request 1 ("0" disarms). processed (--unplug-mode, the default): the token runs the K-th request, keeps \
      what it changed, and its answer is lost; dropped: the request never reaches the token. The device leaves the \
      host as when pulled out; its state stays in --state-dir and it can be attached again. --request-log FILE \
      appends one line per request (CCID: level and APDU header CLA INS P1 P2; CTAPHID: channel, init + command \
      (+ CTAP command, clientPIN subcommand) or cont + sequence; never the data: no PIN), so a flow's requests can be \
      counted; a line of the request that unplugged ends with "unplug=MODE". Both files are device 1-1's; device \
      1-N (N > 1) uses FILE.1-N.
      """)

  @Option(help: "Address to listen on: loopback only (127.0.0.0/8 or [::1]), port 3240 by default.")
  var listen = "127.0.0.1:3240"
  @Option(help: "A device to serve: fido, ccid, composite or fido-external (repeat for several).")
  var device: [String] = []
  @Option(help: "Key socket of each fido-external device, in order (repeat for several).")
  var fidoSocket: [String] = []
  @Option(help: "Directory of the devices' state files.") var stateDir: String
  @Option(help: "User presence of FIDO keys: auto, deny, timeout, wait (touch with SIGUSR2 of the fido2 command).")
  var presence = "auto"
  @Option(help: "Seconds after attach during which a FIDO2 reset is allowed.") var resetWindow: Double = 10
  @Option(help: "Serial number of device 1-1 (PIV serial; the USB serial string); later devices count up.")
  var serial: UInt32 = 20_000_001
  @Flag(
    name: .customLong("no-usb-serial"),
    help: "Devices without a USB serial string (iSerialNumber 0); the PIV serial stays.")
  var noUSBSerial = false
  @Option(help: "Write the process id here once listening.") var pidFile: String?
  @Option(help: "Unplug each device at its K-th request (CCID XfrBlock or CTAPHID report), once (see below).")
  var unplugAfterRequest: Int?
  @Option(help: "What the unplugging request does: processed (the token runs it; its answer is lost) or dropped.")
  var unplugMode = "processed"
  @Option(help: "A file that arms the unplug at run time: \"K [processed|dropped]\" (see below).")
  var unplugControl: String?
  @Option(help: "Append one line per request to this file (headers only, never data; see below).")
  var requestLog: String?

  func validate() throws {
    guard PullSwitch.Mode(rawValue: unplugMode) != nil else {
      throw ValidationError("--unplug-mode must be processed or dropped")
    }
    if let k = unplugAfterRequest, k < 1 { throw ValidationError("--unplug-after-request must be 1 or more") }
    guard USBIPServer.loopbackAddress(listen) != nil else {
      throw ValidationError("--listen must be a loopback HOST:PORT (127.0.0.1:3240 or [::1]:3240)")
    }
    guard !device.isEmpty else {
      throw ValidationError("name at least one --device (fido, ccid, composite or fido-external)")
    }
    for d in device where VirtualUSBDevice.Kind(rawValue: d) == nil {
      throw ValidationError("unknown device '\(d)': fido, ccid, composite or fido-external")
    }
    let external = device.filter { $0 == VirtualUSBDevice.Kind.fidoExternal.rawValue }.count
    guard fidoSocket.count == external else {
      throw ValidationError(
        "give one --fido-socket per fido-external device (\(external) devices, \(fidoSocket.count) sockets)")
    }
    guard UserPresence(rawValue: presence) != nil else {
      throw ValidationError("--presence must be auto, deny, timeout or wait")
    }
  }

  func run() throws {
    let dir = URL(fileURLWithPath: stateDir)
    var devices: [VirtualUSBDevice] = []
    var sockets = fidoSocket[...]
    for (i, name) in device.enumerated() {
      let kind = VirtualUSBDevice.Kind(rawValue: name)!
      let bus = USBIPServer.busID(i)
      let number = serial + UInt32(i)
      var fido: FIDOHIDFunction?
      var ccid: CCIDFunction?
      if kind == .fidoExternal {
        fido = FIDOHIDFunction(externalSocket: sockets.removeFirst(), log: log)
      } else if kind != .ccid {
        let url = dir.appendingPathComponent("\(bus).fido.json")
        let state: FIDO2State
        do {
          state = try FIDO2State.load(url) ?? .factory()
          try state.save(url)
        } catch { throw ValidationError("cannot use state file \(url.path): \(error.localizedDescription)") }
        let key = VirtualFIDO2Key(state: state)
        key.presence = UserPresence(rawValue: presence)!
        key.resetWindow = resetWindow
        key.onStateChange = { s in
          do { try s.save(url) } catch { log("cannot save state: \(error)") }
        }
        fido = FIDOHIDFunction(engine: CTAPHIDEngine(key: key, log: log))
      }
      if kind == .ccid || kind == .composite {
        let url = dir.appendingPathComponent("\(bus).piv.json")
        let state: PIVCardState
        do {
          state = try PIVCardState.load(url) ?? .factory(serial: number, version: [5, 4, 3], managementAlgorithm: 0x03)
          try state.save(url)
        } catch { throw ValidationError("cannot use state file \(url.path): \(error.localizedDescription)") }
        let card = VirtualPIVCard(state: state)
        card.onStateChange = { s in
          do { try s.save(url) } catch { log("cannot save state: \(error)") }
        }
        ccid = CCIDFunction(card: card, log: log)
      }
      let device = VirtualUSBDevice(
        kind: kind, serial: String(number), usbSerial: !noUSBSerial, fido: fido, ccid: ccid)
      if unplugAfterRequest != nil || unplugControl != nil || requestLog != nil {
        device.pullSwitch = PullSwitch(
          unplugAfter: unplugAfterRequest, mode: PullSwitch.Mode(rawValue: unplugMode)!,
          controlPath: unplugControl.map { devices.isEmpty ? $0 : "\($0).\(bus)" },
          logPath: requestLog.map { devices.isEmpty ? $0 : "\($0).\(bus)" })
      }
      devices.append(device)
    }
    let server = USBIPServer(devices: devices, log: log)
    let cards = devices.compactMap(\.ccid)
    let sources = handleSignals(
      [
        (SIGUSR1, { cards.forEach { $0.setPresent(false) } }), (SIGUSR2, { cards.forEach { $0.setPresent(true) } }),
        (SIGHUP, { server.unplugAll() }), (SIGTERM, { server.stop() }), (SIGINT, { server.stop() }),
      ], pidFile: nil)
    let address = USBIPServer.loopbackAddress(listen)!
    log(
      "USB/IP on \(listen): "
        + devices.enumerated().map { "\(USBIPServer.busID($0)) \($1.kind.rawValue)" }.joined(separator: ", "))
    do {
      try server.run(
        listen: address,
        ready: {
          if let pidFile { try? "\(getpid())\n".write(toFile: pidFile, atomically: true, encoding: .utf8) }
        })
    } catch { throw ValidationError("cannot listen on \(listen): \(error)") }
    withExtendedLifetime(sources) {}
  }
}

/// Turns signals into actions, run one at a time on a thread of their own that waits for them (sigwait), and writes
/// the pid file. The signals are blocked in this thread before the waiter starts, and so in the waiter (pthread_create
/// hands on the mask; Foundation's Thread does not) and in every thread started after: none can take one past the
/// waiter. (Dispatch signal sources lost them: a SIGTERM caught by a thread that did not block it went to
/// libdispatch's handler and never reached the source, and a card the tests stopped kept running.)
func handleSignals(_ actions: [(Int32, () -> Void)], pidFile: String?) -> SignalWaiter {
  let waiter = SignalWaiter(actions)
  var blocked = waiter.set
  pthread_sigmask(SIG_BLOCK, &blocked, nil)
  var thread = pthread_t()
  let context = Unmanaged.passRetained(waiter).toOpaque()
  let rc = pthread_create(
    &thread, nil,
    { context in
      let waiter = Unmanaged<SignalWaiter>.fromOpaque(context!).takeRetainedValue()
      var set = waiter.set
      while true {
        var sig: Int32 = 0
        guard sigwait(&set, &sig) == 0 else { continue }
        waiter.actions[sig]?()
      }
    }, context)
  precondition(rc == 0, "virtual-token: no thread for the signals (\(rc))")
  pthread_detach(thread)
  if let pidFile { try? "\(getpid())\n".write(toFile: pidFile, atomically: true, encoding: .utf8) }
  return waiter
}

/// The signals `handleSignals` waits for and what each does.
final class SignalWaiter: @unchecked Sendable {
  let actions: [Int32: () -> Void]
  let set: sigset_t
  init(_ actions: [(Int32, () -> Void)]) {
    self.actions = Dictionary(actions, uniquingKeysWith: { first, _ in first })
    var set = sigset_t()
    sigemptyset(&set)
    for (sig, _) in actions { sigaddset(&set, sig) }
    self.set = set
  }
}
