import ArgumentParser
import Dispatch
import Foundation
import VirtualTokens

#if canImport(Glibc)
  import Glibc
#endif

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
  @Option(help: "User presence of FIDO keys: auto, deny, timeout, wait, wait-ignoring-cancel (as for fido2).")
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
  @Option(
    help: "Answer as slowly as a real token: none (default) or yubikey5 (the keys and cards this command serves).")
  var latency = "none"

  func validate() throws {
    guard LatencyProfile.named(latency) != nil else {
      throw ValidationError("--latency must be one of: \(LatencyProfile.all.map(\.name).joined(separator: ", "))")
    }
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
      throw ValidationError("--presence must be auto, deny, timeout, wait or wait-ignoring-cancel")
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
        let engine = CTAPHIDEngine(key: key, log: log)
        engine.latency = LatencyProfile.named(latency)!
        fido = FIDOHIDFunction(engine: engine)
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
        ccid?.latency = LatencyProfile.named(latency)!
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
        (SIGUSR1, { @Sendable in cards.forEach { $0.setPresent(false) } }),
        (SIGUSR2, { @Sendable in cards.forEach { $0.setPresent(true) } }),
        (SIGHUP, { @Sendable in server.unplugAll() }), (SIGTERM, { @Sendable in server.stop() }),
        (SIGINT, { @Sendable in server.stop() }),
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
