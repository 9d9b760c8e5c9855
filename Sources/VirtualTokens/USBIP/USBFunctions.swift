import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Queues data for an IN endpoint (number without the direction bit) of the attached device.
public typealias USBInQueue = @Sendable (_ endpoint: UInt8, _ data: [UInt8]) -> Void

/// The FIDO HID interface: CTAPHID reports on interrupt OUT/IN endpoint 1, and the key behind them: the built-in
/// virtual key (an engine), or an external key reached on its key socket (a Unix SOCK_SEQPACKET socket, one datagram
/// = one 64-byte report, as `virtual-token fido2 --socket` serves one): every report goes there unchanged and every
/// report it sends comes back on the IN endpoint, so the guest talks to firmware we did not write.
/// Each attach is a power-up: new channels, new key agreement key, the reset window starts (built-in), or a new
/// connection to the key socket (external: a key whose socket is not there cannot be attached). When the external
/// key drops the connection (it was replugged or stopped), the USB device is unplugged: the guest sees it go.
public final class FIDOHIDFunction: Sendable {
  public enum Key: Sendable {
    case builtIn(CTAPHIDEngine)
    case external(socket: String)
  }

  static let endpoint: UInt8 = 1
  static let reportSize = 64
  public let key: Key
  let log: @Sendable (String) -> Void
  /// What an attach set up (`attach`, `output` and `detach` come from the URB reader; the key's reports from the
  /// key's threads).
  let attached = Mutex(Attached())

  struct Attached {
    var port: CTAPHIDEngine.Port?
    var link: ExternalKeyLink?
    /// The lab's pull sweep (nil: off); `unplug` takes the device off the bus, `muted` drops what the key still says.
    var pullSwitch: PullSwitch?
    var unplug: (@Sendable () -> Void)?
    var muted = false
  }

  /// The lab's pull sweep (see `PullSwitch`); set before serving.
  var pullSwitch: PullSwitch? {
    get { attached.withLock { $0.pullSwitch } }
    set { attached.withLock { $0.pullSwitch = newValue } }
  }

  public init(engine: CTAPHIDEngine) {
    key = .builtIn(engine)
    log = { _ in }
  }

  public init(externalSocket path: String, log: @escaping @Sendable (String) -> Void) {
    key = .external(socket: path)
    self.log = log
  }

  /// False when the key cannot be powered up (an external key whose socket does not answer).
  func attach(_ queue: @escaping USBInQueue, unplug: @escaping @Sendable () -> Void) -> Bool {
    attached.withLock {
      $0.unplug = unplug
      $0.muted = false
    }
    switch key {
    case .builtIn(let engine):
      engine.powerCycle()
      let port = engine.openPort { [self] report in
        if !attached.withLock({ $0.muted }) { queue(Self.endpoint, report) }
      }
      attached.withLock { $0.port = port }
      return true
    case .external(let path):
      guard let link = ExternalKeyLink(path: path, log: log) else { return false }
      attached.withLock { $0.link = link }
      let log = self.log
      link.start(
        report: { [self] report in if !attached.withLock({ $0.muted }) { queue(Self.endpoint, report) } },
        dropped: {
          log("the external key at \(path) closed the connection (replugged or stopped): unplugged")
          unplug()
        })
      return true
    }
  }

  func detach() {
    let (port, link) = attached.withLock { a in
      defer {
        a.port = nil
        a.link = nil
      }
      return (a.port, a.link)
    }
    port?.close()
    link?.close()
  }

  /// One output report (interrupt OUT transfer or SET_REPORT).
  func output(_ report: [UInt8]) {
    let (port, link, pull) = attached.withLock { ($0.port, $0.link, $0.pullSwitch) }
    if let pull, let mode = pull.request(PullSwitch.describeReport(report)) {
      // Pulled at this report: the key hears it or not (mode), and nothing it answers reaches the host.
      let unplug = attached.withLock {
        $0.muted = true
        return $0.unplug
      }
      if mode == .processed {
        port?.receive(report)
        port?.worker.sync {}  // a request that completes here has run to its end
        link?.send(report)
      }
      unplug?()
      return
    }
    port?.receive(report)
    link?.send(report)
  }
}

/// One connection to an external key's socket, for one attach: a thread reads the key's reports until the key or
/// `close()` ends the connection.
final class ExternalKeyLink: Sendable {
  let fd: Int32
  /// Whether the reading thread was started, and whether `close` is ending the connection (not the key).
  let state = Mutex((started: false, closing: false))
  let finished = DispatchSemaphore(value: 0)

  init?(path: String, log: (String) -> Void) {
    let s = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
    guard s >= 0 else { return nil }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
      Glibc.close(s)
      log("the external key's socket path is too long: \(path)")
      return nil
    }
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in
      for (i, b) in bytes.enumerated() { raw[i] = b }
    }
    let rc = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0 else {
      let reason = String(cString: strerror(errno))
      Glibc.close(s)
      log("no external key at \(path) (\(reason)): not attached")
      return nil
    }
    fd = s
  }

  func start(report: @escaping @Sendable ([UInt8]) -> Void, dropped: @escaping @Sendable () -> Void) {
    state.withLock { $0.started = true }
    let fd = self.fd
    Thread { [self] in
      var buf = [UInt8](repeating: 0, count: 128)
      while true {
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 128, 0) }
        if n <= 0 { break }
        report(Self.report(Array(buf[0..<n])))
      }
      if !state.withLock({ $0.closing }) { dropped() }
      finished.signal()
    }.start()
  }

  /// Exactly one 64-byte report: a hidraw-style leading report ID 0 (65 bytes) is dropped, a short one padded.
  static func report(_ data: [UInt8]) -> [UInt8] {
    let body = data.count == FIDOHIDFunction.reportSize + 1 && data[0] == 0 ? Array(data.dropFirst()) : data
    return Array(body.prefix(FIDOHIDFunction.reportSize))
      + [UInt8](repeating: 0, count: max(0, FIDOHIDFunction.reportSize - body.count))
  }

  func send(_ data: [UInt8]) {
    let report = Self.report(data)
    _ = report.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, report.count, Int32(MSG_NOSIGNAL)) }
  }

  /// Ends the connection and waits for the reading thread (no report is delivered after this returns).
  func close() {
    let wait = state.withLock {
      $0.closing = true
      return $0.started
    }
    shutdown(fd, Int32(SHUT_RDWR))
    if wait { finished.wait() }
    Glibc.close(fd)
  }
}

/// The CCID interface (CCID 1.1): one slot holding the virtual PIV card. Bulk OUT 2 carries PC_to_RDR
/// messages, bulk IN 2 the RDR_to_PC answers, interrupt IN 3 slot-change notifications.
/// Every card operation runs on one serial queue, holding the slot; the card is never touched from two threads.
public final class CCIDFunction: Sendable {
  static let bulkOut: UInt8 = 2
  static let bulkIn: UInt8 = 2
  static let interruptIn: UInt8 = 3
  static let maxMessage = 3072

  let work = DispatchQueue(label: "ccid-slot")
  let log: @Sendable (String) -> Void
  /// The slot and its card (the work items on `work` hold it, one after the other).
  let slot: Mutex<Slot>
  /// What the URB reader thread keeps between transfers: the bytes of a message not complete yet, and the lab's pull
  /// sweep (nil: off; set before the first attach).
  let reader = Mutex((pendingOut: [UInt8](), pullSwitch: PullSwitch?.none))

  /// How often a long command (RSA key generation) asks the host for more time (bmCommandStatus 2).
  public var timeExtensionInterval: Double {
    get { slot.withLock { $0.timeExtensionInterval } }
    set { slot.withLock { $0.timeExtensionInterval = newValue } }
  }
  /// How long the card takes to answer each APDU (`LatencyProfile`; none by default); set before the first attach.
  public var latency: LatencyProfile {
    get { slot.withLock { $0.latency } }
    set { slot.withLock { $0.latency = newValue } }
  }
  var pullSwitch: PullSwitch? {
    get { reader.withLock { $0.pullSwitch } }
    set { reader.withLock { $0.pullSwitch = newValue } }
  }

  public init(card: sending VirtualPIVCard, present: Bool = true, log: @escaping @Sendable (String) -> Void) {
    slot = Mutex(Slot(card: card, present: present, log: log))
    self.log = log
  }

  func attach(_ queue: @escaping USBInQueue, unplug: @escaping @Sendable () -> Void) {
    reader.withLock { $0.pendingOut = [] }
    work.sync {
      slot.withLock { s in
        s.queue = queue
        s.unplug = unplug
        s.active = false
        s.commandChain = nil
        s.responseRest = nil
        s.card.powerCycle()
      }
    }
  }

  func detach() {
    reader.withLock { $0.pendingOut = [] }
    work.sync {
      slot.withLock { s in
        s.queue = nil
        s.active = false
        s.card.powerCycle()
      }
    }
  }

  /// Takes the card out of the slot or puts it back; the host hears it on the interrupt endpoint.
  public func setPresent(_ inserted: Bool) {
    work.async { [self] in slot.withLock { $0.setPresent(inserted) } }
  }

  /// Bytes of one bulk OUT transfer; a message may span transfers (10-byte header + dwLength).
  func output(_ data: [UInt8]) {
    reader.withLock { r in
      r.pendingOut += data
      while r.pendingOut.count >= 10 {
        let p = r.pendingOut
        let length = Int(p[1]) | Int(p[2]) << 8 | Int(p[3]) << 16 | Int(p[4]) << 24
        guard length <= Self.maxMessage else {  // not a CCID message we can hold: drop what we have
          log("CCID message of \(length) bytes refused")
          r.pendingOut = []
          return
        }
        guard p.count >= 10 + length else { return }
        let message = Array(p[0..<10 + length])
        r.pendingOut.removeFirst(10 + length)
        if message[0] == 0x6F, let mode = r.pullSwitch?.request(PullSwitch.describeXfrBlock(message)) {
          // Pulled at this APDU: the card runs it or not (mode); its answer never reaches the host.
          r.pendingOut = []
          work.async { [self] in
            slot.withLock { s in
              s.queue = nil
              if mode == .processed { s.handle(message) }
              s.unplug?()
            }
          }
          return
        }
        work.async { [self] in slot.withLock { $0.handle(message) } }
      }
    }
  }
}

extension CCIDFunction {
  /// The slot: the card, whether it is present and powered, the chained command or response in progress, and where
  /// answers go. One work item at a time holds it (`CCIDFunction.slot`).
  final class Slot {
    let card: VirtualPIVCard
    let log: @Sendable (String) -> Void
    var timeExtensionInterval: Double = 1.0
    var latency = LatencyProfile.none
    var queue: USBInQueue?
    var unplug: (@Sendable () -> Void)?
    var present: Bool
    var active = false
    var commandChain: [UInt8]?
    var responseRest: [UInt8]?

    init(card: VirtualPIVCard, present: Bool, log: @escaping @Sendable (String) -> Void) {
      self.card = card
      self.present = present
      self.log = log
    }

    func setPresent(_ inserted: Bool) {
      guard inserted != present else { return }
      present = inserted
      active = false
      commandChain = nil
      responseRest = nil
      card.powerCycle()
      queue?(CCIDFunction.interruptIn, [0x50, inserted ? 0x03 : 0x02])  // RDR_to_PC_NotifySlotChange, slot 0 changed
      log(inserted ? "card inserted" : "card removed")
    }

    var iccStatus: UInt8 { present ? (active ? 0 : 1) : 2 }

    func reply(_ type: UInt8, _ m: [UInt8], status: UInt8 = 0, error: UInt8 = 0, last: UInt8 = 0, _ data: [UInt8] = [])
    {
      let header = [type] + USBDescriptors.le32(UInt32(data.count)) + [m[5], m[6], status | iccStatus, error, last]
      queue?(CCIDFunction.bulkIn, header + data)
    }

    func failed(_ m: [UInt8], _ error: UInt8) {
      // The answer type follows the command (CCID 1.1 §6.2): data blocks for power-on and XfrBlock.
      let type: UInt8 =
        switch m[0] {
        case 0x62, 0x6F: 0x80
        case 0x61, 0x6C, 0x6D: 0x82
        case 0x6B: 0x83
        default: 0x81
        }
      reply(type, m, status: 0x40, error: error)
    }

    func handle(_ m: [UInt8]) {
      guard m[5] == 0 else { return failed(m, 0x05) }  // bSlot: only slot 0 (error = offset of the bad field)
      let data = Array(m[10...])
      switch m[0] {
      case 0x62:  // PC_to_RDR_IccPowerOn
        guard present else { return failed(m, 0xFE) }  // ICC_MUTE
        card.powerCycle()
        active = true
        reply(0x80, m, VirtualPIVCard.atr)
      case 0x63:  // PC_to_RDR_IccPowerOff
        active = false
        card.powerCycle()
        reply(0x81, m)
      case 0x65: reply(0x81, m)  // PC_to_RDR_GetSlotStatus
      case 0x6F: transfer(m, data)  // PC_to_RDR_XfrBlock
      case 0x61, 0x6C, 0x6D:  // SetParameters, GetParameters, ResetParameters: T=1 with the ATR's values
        guard present else { return failed(m, 0xFE) }
        reply(0x82, m, last: 0x01, [0x13, 0x10, 0x00, 0x4D, 0x00, 0xFE, 0x00])
      default: failed(m, 0x00)  // CMD_NOT_SUPPORTED
      }
    }

    /// XfrBlock at extended APDU level: wLevelParameter 0 = whole APDU, 1 begins / 3 continues / 2 ends a chained
    /// command, 0x10 asks for the next part of a chained response (CCID 1.1 §6.1.4, bChainParameter §6.2.1).
    func transfer(_ m: [UInt8], _ data: [UInt8]) {
      guard present else { return failed(m, 0xFE) }
      guard active else { return failed(m, 0xFB) }  // HW_ERROR: card not powered
      let level = UInt16(m[8]) | UInt16(m[9]) << 8
      switch level {
      case 0x00: respond(m, process(m, data))
      case 0x01:
        commandChain = data
        reply(0x80, m, last: 0x10)
      case 0x03, 0x02:
        guard let chain = commandChain, chain.count + data.count <= 65_544 else {
          commandChain = nil
          return failed(m, 0x08)  // bad wLevelParameter (offset 8)
        }
        if level == 0x03 {
          commandChain = chain + data
          return reply(0x80, m, last: 0x10)
        }
        commandChain = nil
        respond(m, process(m, chain + data))
      case 0x10:
        guard let rest = responseRest else { return failed(m, 0x08) }
        responseRest = nil
        respond(m, rest, continuing: true)
      default: failed(m, 0x08)
      }
    }

    func respond(_ m: [UInt8], _ response: [UInt8], continuing: Bool = false) {
      let room = CCIDFunction.maxMessage - 10
      if response.count > room {
        responseRest = Array(response[room...])
        reply(0x80, m, last: continuing ? 0x03 : 0x01, Array(response[..<room]))
      } else {
        reply(0x80, m, last: continuing ? 0x02 : 0x00, response)
      }
    }

    /// Runs the APDU; while it takes longer than `timeExtensionInterval`, the host is asked for more time.
    func process(_ m: [UInt8], _ apdu: [UInt8]) -> [UInt8] {
      let pending = TimeExtension([0x80] + USBDescriptors.le32(0) + [m[5], m[6], 0x80, 0x01, 0x00])  // ×1
      let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
      let queue = self.queue
      timer.schedule(deadline: .now() + timeExtensionInterval, repeating: timeExtensionInterval)
      timer.setEventHandler {
        pending.header.withLock { header in
          if let header { queue?(CCIDFunction.bulkIn, header) }
        }
      }
      timer.resume()
      let response = card.process(apdu)
      LatencyProfile.wait(latency.pivDelay(apdu))
      pending.header.withLock { $0 = nil }
      timer.cancel()
      return response
    }
  }

  /// The time extension a command's timer sends while the card works; nil once the command is answered, so none
  /// follows the answer.
  final class TimeExtension: Sendable {
    let header: Mutex<[UInt8]?>
    init(_ header: [UInt8]) { self.header = Mutex(header) }
  }
}
