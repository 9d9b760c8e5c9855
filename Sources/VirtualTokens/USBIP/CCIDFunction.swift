import Foundation
import Synchronization

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
