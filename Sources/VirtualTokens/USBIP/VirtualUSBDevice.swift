import Foundation

/// A virtual token as one USB device: a FIDO HID interface, a CCID interface, or both (composite, FIDO first,
/// as a YubiKey's FIDO+CCID mode); or the FIDO HID interface in front of an external key (fido-external: firmware
/// reached on its key socket). Its state outlives attaches; each attach is a power-up.
public final class VirtualUSBDevice: Sendable {
  public enum Kind: String, CaseIterable, Sendable {
    case fido, ccid, composite
    case fidoExternal = "fido-external"
  }

  public let kind: Kind
  public let fido: FIDOHIDFunction?
  public let ccid: CCIDFunction?
  public let serial: String
  /// False: the device descriptor names no serial string (iSerialNumber 0); `serial` is then only the PIV serial.
  public let usbSerial: Bool
  let strings: [String]
  let configuration: [UInt8]
  let fidoInterface: UInt8?

  public init(kind: Kind, serial: String, usbSerial: Bool = true, fido: FIDOHIDFunction?, ccid: CCIDFunction?) {
    precondition((fido != nil) == (kind != .ccid) && (ccid != nil) == (kind == .ccid || kind == .composite))
    self.kind = kind
    self.fido = fido
    self.ccid = ccid
    self.serial = serial
    self.usbSerial = usbSerial
    var interfaces: [[UInt8]] = []
    if fido != nil { interfaces.append(USBDescriptors.fidoInterface(0)) }
    if ccid != nil { interfaces.append(USBDescriptors.ccidInterface(UInt8(interfaces.count))) }
    fidoInterface = fido != nil ? 0 : nil
    configuration = USBDescriptors.configuration(interfaces: interfaces)
    let product =
      switch kind {
      case .fido: "Virtual FIDO2 Key"
      case .fidoExternal: "External FIDO2 Key"
      case .ccid: "Virtual PIV Card"
      case .composite: "Virtual FIDO2 Key and PIV Card"
      }
    strings = ["TokenBridge", product, serial, "FIDO", "CCID"]
  }

  /// (class, subclass, protocol) per interface, for OP_REP_DEVLIST.
  var interfaceClasses: [(UInt8, UInt8, UInt8)] {
    (fido != nil ? [(0x03, 0, 0)] : []) + (ccid != nil ? [(0x0B, 0, 0)] : [])
  }

  /// Powers the device up for a new attach; false when it cannot be (its external key is not there), and then
  /// nothing is attached. `unplug` takes the device off the bus (the external key went away).
  func attach(_ queue: @escaping USBInQueue, unplug: @escaping @Sendable () -> Void) -> Bool {
    if let fido, !fido.attach(queue, unplug: unplug) { return false }
    ccid?.attach(queue, unplug: unplug)
    return true
  }

  /// The lab's pull sweep: unplugs this device at a chosen request (see `PullSwitch`); set before serving.
  public var pullSwitch: PullSwitch? {
    get { fido.map(\.pullSwitch) ?? ccid?.pullSwitch }
    set {
      fido?.pullSwitch = newValue
      ccid?.pullSwitch = newValue
    }
  }

  func detach() {
    fido?.detach()
    ccid?.detach()
  }

  /// An OUT transfer on a non-control endpoint.
  func output(endpoint: UInt8, _ data: [UInt8]) {
    switch endpoint {
    case FIDOHIDFunction.endpoint where fido != nil: fido?.output(data)
    case CCIDFunction.bulkOut where ccid != nil: ccid?.output(data)
    default: break
    }
  }

  public enum ControlResult: Equatable, Sendable {
    case data([UInt8])
    case stall
  }

  /// A control transfer on endpoint 0 (USB 2.0 §9.4 standard requests, HID and CCID class requests).
  /// SET_ADDRESS and port resets never arrive: vhci-hcd handles them.
  public func control(setup: [UInt8], data: [UInt8]) -> ControlResult {
    guard setup.count == 8 else { return .stall }
    let requestType = setup[0]
    let request = setup[1]
    let value = UInt16(setup[2]) | UInt16(setup[3]) << 8
    let index = UInt16(setup[4]) | UInt16(setup[5]) << 8
    let length = Int(UInt16(setup[6]) | UInt16(setup[7]) << 8)
    func reply(_ bytes: [UInt8]) -> ControlResult { .data(Array(bytes.prefix(length))) }
    switch (requestType, request) {
    case (0x80, 0x06):  // GET_DESCRIPTOR (device)
      switch value >> 8 {
      case 0x01: return reply(USBDescriptors.device(serial: usbSerial))
      case 0x02: return reply(configuration)
      case 0x03:
        let i = Int(value & 0xFF)
        if i == 0 { return reply([4, 0x03, 0x09, 0x04]) }  // LANGID en-US
        return i <= strings.count ? reply(USBDescriptors.string(strings[i - 1])) : .stall
      default: return .stall  // device qualifier, other-speed, BOS: a full-speed USB 2.0 device has none
      }
    case (0x81, 0x06):  // GET_DESCRIPTOR (interface): HID class descriptors
      guard let f = fidoInterface, index == UInt16(f) else { return .stall }
      switch value >> 8 {
      case 0x21: return reply(USBDescriptors.hid())
      case 0x22: return reply(USBDescriptors.fidoReport)
      default: return .stall
      }
    case (0x80, 0x00), (0x81, 0x00), (0x82, 0x00): return reply([0, 0])  // GET_STATUS
    case (0x80, 0x08): return reply([1])  // GET_CONFIGURATION
    case (0x81, 0x0A): return reply([0])  // GET_INTERFACE
    case (0x00, 0x09), (0x01, 0x0B), (0x00, 0x01), (0x02, 0x01), (0x00, 0x03), (0x02, 0x03):
      return .data([])  // SET_CONFIGURATION, SET_INTERFACE, CLEAR/SET_FEATURE
    case (0x21, 0x0A), (0x21, 0x0B):  // HID SET_IDLE, SET_PROTOCOL
      return fidoInterface.map { index == UInt16($0) } == true ? .data([]) : .stall
    case (0x21, 0x09):  // HID SET_REPORT (output): a report sent through the control pipe
      guard let f = fidoInterface, index == UInt16(f) else { return .stall }
      fido?.output(data)
      return .data([])
    case (0x21, 0x01): return ccid != nil ? .data([]) : .stall  // CCID ABORT
    default: return .stall  // GET_REPORT, CCID GET_CLOCK_FREQUENCIES/GET_DATA_RATES (none listed), vendor
    }
  }
}
