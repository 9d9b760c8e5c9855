import Foundation

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
public final class FIDOHIDFunction: @unchecked Sendable {
  public enum Key: Sendable {
    case builtIn(CTAPHIDEngine)
    case external(socket: String)
  }

  static let endpoint: UInt8 = 1
  static let reportSize = 64
  public let key: Key
  let log: (String) -> Void
  let lock = NSLock()
  var port: CTAPHIDEngine.Port?
  var link: ExternalKeyLink?
  /// The lab's pull sweep (nil: off); `unplug` takes the device off the bus, `muted` drops what the key still says.
  var pullSwitch: PullSwitch?
  var unplug: (@Sendable () -> Void)?
  var muted = false

  public init(engine: CTAPHIDEngine) {
    key = .builtIn(engine)
    log = { _ in }
  }

  public init(externalSocket path: String, log: @escaping (String) -> Void) {
    key = .external(socket: path)
    self.log = log
  }

  /// False when the key cannot be powered up (an external key whose socket does not answer).
  func attach(_ queue: @escaping USBInQueue, unplug: @escaping @Sendable () -> Void) -> Bool {
    lock.withLock {
      self.unplug = unplug
      muted = false
    }
    switch key {
    case .builtIn(let engine):
      engine.powerCycle()
      let port = engine.openPort { [self] report in
        if !lock.withLock({ muted }) { queue(Self.endpoint, report) }
      }
      lock.withLock { self.port = port }
      return true
    case .external(let path):
      guard let link = ExternalKeyLink(path: path, log: log) else { return false }
      lock.withLock { self.link = link }
      link.start(
        report: { [self] report in if !lock.withLock({ muted }) { queue(Self.endpoint, report) } },
        dropped: { [self] in
          log("the external key at \(path) closed the connection (replugged or stopped): unplugged")
          unplug()
        })
      return true
    }
  }

  func detach() {
    let (port, link) = lock.withLock {
      defer {
        self.port = nil
        self.link = nil
      }
      return (self.port, self.link)
    }
    port?.close()
    link?.close()
  }

  /// One output report (interrupt OUT transfer or SET_REPORT).
  func output(_ report: [UInt8]) {
    let (port, link, pull) = lock.withLock { (self.port, self.link, self.pullSwitch) }
    if let pull, let mode = pull.request(PullSwitch.describeReport(report)) {
      // Pulled at this report: the key hears it or not (mode), and nothing it answers reaches the host.
      let unplug = lock.withLock {
        muted = true
        return self.unplug
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
final class ExternalKeyLink: @unchecked Sendable {
  let fd: Int32
  let lock = NSLock()
  var closing = false
  let finished = DispatchSemaphore(value: 0)
  var started = false

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
    lock.withLock { started = true }
    let fd = self.fd
    Thread { [self] in
      var buf = [UInt8](repeating: 0, count: 128)
      while true {
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 128, 0) }
        if n <= 0 { break }
        report(Self.report(Array(buf[0..<n])))
      }
      if !lock.withLock({ closing }) { dropped() }
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
    let wait = lock.withLock {
      closing = true
      return started
    }
    shutdown(fd, Int32(SHUT_RDWR))
    if wait { finished.wait() }
    Glibc.close(fd)
  }
}

/// The CCID interface (CCID 1.1): one slot holding the virtual PIV card. Bulk OUT 2 carries PC_to_RDR
/// messages, bulk IN 2 the RDR_to_PC answers, interrupt IN 3 slot-change notifications.
/// Every card operation runs on one serial queue; the card is never touched from two threads.
public final class CCIDFunction: @unchecked Sendable {
  static let bulkOut: UInt8 = 2
  static let bulkIn: UInt8 = 2
  static let interruptIn: UInt8 = 3
  static let maxMessage = 3072
  /// How often a long command (RSA key generation) asks the host for more time (bmCommandStatus 2).
  public var timeExtensionInterval: Double = 1.0
  /// How long the card takes to answer each APDU (`LatencyProfile`; none by default); set before the first attach.
  public var latency = LatencyProfile.none

  public let card: VirtualPIVCard
  let work = DispatchQueue(label: "ccid-slot")
  let log: (String) -> Void
  // Owned by `work`:
  var queue: USBInQueue?
  var unplug: (@Sendable () -> Void)?
  var present = true
  var active = false
  var commandChain: [UInt8]?
  var responseRest: [UInt8]?
  // Owned by the URB reader thread:
  var pendingOut: [UInt8] = []
  /// The lab's pull sweep (nil: off); set before the first attach.
  var pullSwitch: PullSwitch?

  public init(card: VirtualPIVCard, present: Bool = true, log: @escaping (String) -> Void) {
    self.card = card
    self.present = present
    self.log = log
  }

  func attach(_ queue: @escaping USBInQueue, unplug: @escaping @Sendable () -> Void) {
    pendingOut = []
    work.sync {
      self.queue = queue
      self.unplug = unplug
      active = false
      commandChain = nil
      responseRest = nil
      card.powerCycle()
    }
  }

  func detach() {
    pendingOut = []
    work.sync {
      queue = nil
      active = false
      card.powerCycle()
    }
  }

  /// Takes the card out of the slot or puts it back; the host hears it on the interrupt endpoint.
  public func setPresent(_ inserted: Bool) {
    work.async { [self] in
      guard inserted != present else { return }
      present = inserted
      active = false
      commandChain = nil
      responseRest = nil
      card.powerCycle()
      queue?(Self.interruptIn, [0x50, inserted ? 0x03 : 0x02])  // RDR_to_PC_NotifySlotChange, slot 0 changed
      log(inserted ? "card inserted" : "card removed")
    }
  }

  /// Bytes of one bulk OUT transfer; a message may span transfers (10-byte header + dwLength).
  func output(_ data: [UInt8]) {
    pendingOut += data
    while pendingOut.count >= 10 {
      let length = Int(pendingOut[1]) | Int(pendingOut[2]) << 8 | Int(pendingOut[3]) << 16 | Int(pendingOut[4]) << 24
      guard length <= Self.maxMessage else {  // not a CCID message we can hold: drop what we have
        log("CCID message of \(length) bytes refused")
        pendingOut = []
        return
      }
      guard pendingOut.count >= 10 + length else { return }
      let message = Array(pendingOut[0..<10 + length])
      pendingOut.removeFirst(10 + length)
      if message[0] == 0x6F, let mode = pullSwitch?.request(PullSwitch.describeXfrBlock(message)) {
        // Pulled at this APDU: the card runs it or not (mode); its answer never reaches the host.
        pendingOut = []
        work.async { [self] in
          queue = nil
          if mode == .processed { handle(message) }
          unplug?()
        }
        return
      }
      work.async { [self] in handle(message) }
    }
  }

  var iccStatus: UInt8 { present ? (active ? 0 : 1) : 2 }

  func reply(_ type: UInt8, _ m: [UInt8], status: UInt8 = 0, error: UInt8 = 0, last: UInt8 = 0, _ data: [UInt8] = []) {
    let header = [type] + USBDescriptors.le32(UInt32(data.count)) + [m[5], m[6], status | iccStatus, error, last]
    queue?(Self.bulkIn, header + data)
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
    let room = Self.maxMessage - 10
    if response.count > room {
      responseRest = Array(response[room...])
      reply(0x80, m, last: continuing ? 0x03 : 0x01, Array(response[..<room]))
    } else {
      reply(0x80, m, last: continuing ? 0x02 : 0x00, response)
    }
  }

  /// Runs the APDU; while it takes longer than `timeExtensionInterval`, the host is asked for more time.
  func process(_ m: [UInt8], _ apdu: [UInt8]) -> [UInt8] {
    let guardLock = NSLock()
    var done = false
    let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
    let queue = self.queue
    timer.schedule(deadline: .now() + timeExtensionInterval, repeating: timeExtensionInterval)
    timer.setEventHandler {
      guardLock.withLock {
        guard !done else { return }
        let header = [0x80] + USBDescriptors.le32(0) + [m[5], m[6], 0x80, 0x01, 0x00]  // time extension ×1
        queue?(Self.bulkIn, header)
      }
    }
    timer.resume()
    let response = card.process(apdu)
    LatencyProfile.wait(latency.pivDelay(apdu))
    guardLock.withLock { done = true }
    timer.cancel()
    return response
  }
}
