import Dispatch
import FoundationEssentials
import Glibc
import Platform
import Synchronization
import TokenDevices
import UAFCore

/// One line of `tokenbridge watch`.
public struct WatchEvent: Encodable, Sendable, Equatable {
  public enum Kind: String, Encodable, Sendable {
    /// A token present when the watch started.
    case present
    case added
    case removed
    /// A token's interfaces changed (e.g. the second interface of a composite device came late).
    case changed
    /// A card the watch could not identify (no PIV application, or it did not answer).
    case unusable
    case readerAdded = "reader-added"
    case readerRemoved = "reader-removed"
    /// pcscd went away; the watch waits for it (event-driven) and says so once.
    case pcscdUnavailable = "pcscd-unavailable"
    case pcscdBack = "pcscd-back"
  }

  public var event: Kind
  /// The physical token's id: one of `ids` (the PIV card's when there is one, as it is stable across replugs),
  /// the same for every interface of one USB device.
  public var token: String?
  /// Every id `tokens` prints for it (one per interface; `--token` takes any).
  public var ids: [String]?
  public var capabilities: [String]?
  /// The USB device (`USBIdentity.key`), when the token is on USB.
  public var device: String?
  /// The reader (PC/SC) or the device node.
  public var source: String?
  public var detail: String?

  /// The human line.
  public var line: String {
    var parts = [event.rawValue]
    if let token { parts.append(token) }
    if let caps = capabilities, !caps.isEmpty { parts.append("capabilities=" + caps.joined(separator: ",")) }
    if let ids, ids.count > 1 { parts.append("ids=" + ids.joined(separator: ",")) }
    if let device { parts.append("device=" + device) }
    if let source { parts.append("source=\"\(UntrustedText.displayable(source))\"") }
    if let detail { parts.append("(\(detail))") }
    return parts.joined(separator: " ")
  }
}

/// `tokenbridge watch`: PC/SC reader and card events (`SCardGetStatusChange`, pcscd restarts survived), USB
/// hotplug (libusb) and FIDO2 device nodes (inotify), folded into one event per physical token: the interfaces
/// of one USB device (CCID + FIDO HID) are one token, announced once when both are there (or after
/// `settleSeconds`), removed once.
public final class TokenWatch: Sendable {
  enum Input {
    case pcsc(PCSCEvent)
    case node(FIDONodeEvent)
    case usb(USBHotplugEvent)
  }

  struct Interface {
    var id: String
    var capability: String
    var usbKey: String?
    var busPath: String? = nil
    /// What the USB device's interfaces promise (sysfs): CCID → piv, HID → fido2.
    var expected: Set<String> = []
  }

  static func expected(_ usb: USBIdentity?) -> Set<String> {
    guard let usb else { return [] }
    var out: Set<String> = []
    if usb.interfaceClasses.contains("0b") { out.insert("piv") }
    if usb.interfaceClasses.contains("03") { out.insert("fido2") }
    return out
  }

  struct Group {
    var interfaces: [String: Interface] = [:]  // by source (reader name or node path)
    var token: String?
    var emittedIDs: [String]?
    var device: String?
    /// sysfs name of the USB device (`1-1`), when known.
    var busPath: String?
    /// An announced token lost an interface: wait until then for the rest of the device to go (one `removed`)
    /// before reporting it as `changed`.
    var lossDeadline: DispatchTime?
    /// Capabilities the USB device's interfaces promise (CCID → piv, HID → fido2).
    var expected: Set<String> = []
    var deadline: DispatchTime = .now()
    var ids: [String] { Set(interfaces.values.map(\.id)).sorted() }
    var capabilities: [String] { Set(interfaces.values.map(\.capability)).sorted() }
    /// The PIV card's id when there is one (stable across replugs), else the first id.
    var preferredID: String? { ids.first { $0.hasPrefix("piv-") } ?? ids.first }
  }

  /// How long a USB device's first interface waits for its others before the token is announced anyway (see
  /// `Fold.settleSeconds`).
  public var settleSeconds: Double {
    get { fold.withLock { $0.settleSeconds } }
    set { fold.withLock { $0.settleSeconds = newValue } }
  }
  /// How long an announced token that lost one interface waits for the rest of its USB device to go (see
  /// `Fold.departureSeconds`).
  public var departureSeconds: Double {
    get { fold.withLock { $0.departureSeconds } }
    set { fold.withLock { $0.departureSeconds = newValue } }
  }
  public var sys: String {
    get { fold.withLock { $0.sys } }
    set { fold.withLock { $0.sys = newValue } }
  }
  /// How USB hotplug is followed ("libusb"), or why it is not.
  public var hotplug: String { hotplugSource.withLock { $0 } }
  private let hotplugSource: Mutex<String>

  /// What the watchers reported and `run` has not handled yet, and whether `stop` was called (the watchers and
  /// `stop` run on other threads than `run`).
  private let queue = Mutex((inputs: [Input](), stopped: false))
  private let pending = DispatchSemaphore(value: 0)
  /// The tokens as the events so far make them: `run` folds each batch of events into it.
  let fold = Mutex(Fold())

  let pcsc: PCSCWatcher
  let nodes: FIDONodeEvents
  let usb: USBHotplug?

  public init(virtualFIDO2Paths: [String]? = nil) {
    // Watchers first, then the state: nothing that happens in between is lost.
    var usbProblem: String?
    var hotplug: USBHotplug?
    do { hotplug = try USBHotplug() } catch { usbProblem = error.explanation }
    usb = hotplug
    hotplugSource = Mutex(usbProblem.map { "none (libusb: \($0))" } ?? "libusb")
    pcsc = PCSCWatcher()
    nodes = FIDONodeEvents(virtualPaths: virtualFIDO2Paths)
  }

  /// Whether pcscd was reachable at the start.
  public var pcscAvailable: Bool { pcsc.available }

  func push(_ input: Input) {
    queue.withLock { $0.inputs.append(input) }
    pending.signal()
  }

  /// Ends `run` (from a signal handler's queue, or a test).
  public func stop() {
    queue.withLock { $0.stopped = true }
    pending.signal()
  }

  /// Reports the tokens present (`present`), then every change, until `stop`. `emit` runs on the calling thread.
  public func run(_ emit: (WatchEvent) -> Void) {
    let (pcsc, nodes) = (self.pcsc, self.nodes)
    fold.withLock { f in
      f.pcscUp = pcsc.available
      for reader in pcsc.cards { f.cardInserted(reader, emit) }
      for path in nodes.initial { f.nodeAdded(path) }
      f.announcePresent(emit)
    }
    pcsc.start { [self] e in push(.pcsc(e)) }
    nodes.start { [self] e in push(.node(e)) }
    if let usb {
      do { try usb.start { [self] e in push(.usb(e)) } } catch {
        hotplugSource.withLock { $0 = "none (libusb: \(error.explanation))" }
      }
    }
    defer {
      pcsc.stop()
      nodes.stop()
      usb?.stop()
    }
    while true {
      let next = fold.withLock { $0.nextDeadline }
      if let next { _ = pending.wait(timeout: next) } else { pending.wait() }
      let (batch, done) = queue.withLock { queue -> ([Input], Bool) in
        defer { queue.inputs.removeAll() }
        return (queue.inputs, queue.stopped)
      }
      if done { return }
      fold.withLock { f in
        for input in batch { f.handle(input, emit) }
        f.settle(emit)
      }
    }
  }
}

extension TokenWatch {
  /// The events folded into physical tokens: the interfaces of one USB device are one token. Kept by one thread at a
  /// time (`run`, through `TokenWatch.fold`).
  struct Fold {
    /// How long a USB device's first interface waits for its others before the token is announced anyway (pcscd
    /// lists a CCID interface's reader after udev and libccid had it: about 2.5 s after the hidraw node in the TCG
    /// lab guest, over 10 s once when the machine under it was loaded). Only a CCID interface that never becomes a
    /// reader waits this long; while pcscd cannot be reached nothing waits for one.
    var settleSeconds = 20.0
    /// How long an announced token that lost one interface waits for the rest of its USB device to go (the kernel
    /// removes the hidraw node before the device; pcscd and libusb hear of it through udev, later).
    var departureSeconds = 3.0
    var sys = "/sys"

    var groups: [String: Group] = [:]
    /// pcscd answers (as far as the PC/SC watcher knows): a CCID interface is waited for only then.
    var pcscUp = false
    /// USB devices seen arriving: bus path → key.
    var usbDevices: [String: String] = [:]

    /// The tokens present at the start, each announced once (`present`).
    mutating func announcePresent(_ emit: (WatchEvent) -> Void) {
      for key in groups.keys.sorted() {
        guard var g = groups[key], let token = g.preferredID else { continue }
        g.token = token
        g.emittedIDs = g.ids
        groups[key] = g
        emit(event(.present, g))
      }
    }

    /// When the next group's wait ends (announced anyway, or its loss reported as a change); nil: none waits.
    var nextDeadline: DispatchTime? {
      groups.values.compactMap { $0.token == nil ? $0.deadline : $0.lossDeadline }.min()
    }

    /// TOKENBRIDGE_WATCH_DEBUG=1: every raw input on stderr (what PC/SC, inotify and libusb reported, and when).
    let debug = Environment.value("TOKENBRIDGE_WATCH_DEBUG") == "1"

    mutating func handle(_ input: Input, _ emit: (WatchEvent) -> Void) {
      if debug {
        FileIO.writeError("watch: \(DispatchTime.now().uptimeNanoseconds / 1_000_000) \(input)\n")
      }
      switch input {
      case .pcsc(.cardInserted(let reader)): cardInserted(reader, emit)
      case .pcsc(.cardRemoved(let reader)): removeInterface(source: reader)
      case .pcsc(.readerAdded(let reader)):
        // A USB device's reader is listed: its card follows; the token waits for it (bounded) from now.
        if let key = USBIdentity.forReader(reader, sys: sys)?.key, groups[key]?.token == nil {
          groups[key]?.deadline = .now() + settleSeconds
        }
        emit(WatchEvent(event: .readerAdded, source: reader))
      case .pcsc(.readerRemoved(let reader)): emit(WatchEvent(event: .readerRemoved, source: reader))
      case .pcsc(.serviceLost):
        pcscUp = false
        emit(WatchEvent(event: .pcscdUnavailable, detail: "waiting for pcscd to come back"))
      case .pcsc(.serviceBack):
        pcscUp = true
        emit(WatchEvent(event: .pcscdBack))
      case .node(.added(let path)): nodeAdded(path)
      case .node(.changed): break
      case .node(.removed(let path)): removeInterface(source: path)
      case .usb(let e): usbEvent(e, emit)
      }
    }

    mutating func cardInserted(_ reader: String, _ emit: (WatchEvent) -> Void) {
      let info: TokenInfo
      do { info = try TokenDiscovery.identifyCard(in: reader) } catch {
        emit(WatchEvent(event: .unusable, source: reader, detail: ErrorReport.unusable(error)))
        return
      }
      let usb = USBIdentity.forReader(reader, sys: sys)
      if let usb { usbDevices[usb.busPath] = usb.key }
      add(
        Interface(
          id: info.id, capability: "piv", usbKey: usb?.key, busPath: usb?.busPath, expected: TokenWatch.expected(usb)),
        source: reader)
    }

    mutating func nodeAdded(_ path: String) {
      let name = PathString.last(path)
      let usb = name.hasPrefix("hidraw") && path.hasPrefix("/dev/") ? try? USBIdentity.of(name, sys: sys) : nil
      if let usb { usbDevices[usb.busPath] = usb.key }
      add(
        Interface(
          id: TokenDiscovery.fido2ID(path: path), capability: "fido2", usbKey: usb?.key, busPath: usb?.busPath,
          expected: TokenWatch.expected(usb)),
        source: path)
    }

    mutating func add(_ interface: Interface, source: String) {
      let key = interface.usbKey ?? "id:" + interface.id
      var g = groups[key] ?? Group(device: interface.usbKey, deadline: .now() + settleSeconds)
      g.interfaces[source] = interface
      g.busPath = g.busPath ?? interface.busPath
      g.expected.formUnion(interface.expected)
      groups[key] = g
    }

    mutating func removeInterface(source: String) {
      for key in groups.keys where groups[key]?.interfaces[source] != nil {
        groups[key]?.interfaces[source] = nil
      }
    }

    mutating func usbEvent(_ e: USBHotplugEvent, _ emit: (WatchEvent) -> Void) {
      if e.arrived {
        guard e.isTokenCandidate else { return }
        let key =
          (try? USBIdentity.of(e.busPath, sys: sys))?.key
          ?? "usb-\(Hex.digits(e.vendorID, width: 4))-\(Hex.digits(e.productID, width: 4))-port-\(e.busPath)"
        usbDevices[e.busPath] = key
        var g = groups[key] ?? Group(device: key, deadline: .now() + settleSeconds)
        g.busPath = e.busPath
        if e.interfaceClasses.contains(0x0B) { g.expected.insert("piv") }
        if e.interfaceClasses.contains(0x03) { g.expected.insert("fido2") }
        groups[key] = g
        return
      }
      // The device left: its token goes at once, in one event, whatever its interfaces report later.
      guard let key = usbDevices.removeValue(forKey: e.busPath), let g = groups.removeValue(forKey: key) else { return }
      if g.token != nil { emit(event(.removed, g, ids: g.emittedIDs)) }
    }

    /// Announces groups that are complete (or waited long enough), reports changed and emptied ones.
    mutating func settle(_ emit: (WatchEvent) -> Void) {
      let now = DispatchTime.now()
      for key in groups.keys.sorted() {
        guard var g = groups[key] else { continue }
        if g.token == nil {
          let expected = pcscUp ? g.expected : g.expected.subtracting(["piv"])  // no pcscd: no reader will come
          let complete = !g.interfaces.isEmpty && expected.isSubset(of: Set(g.capabilities))
          if complete || now >= g.deadline {
            if let token = g.preferredID {
              g.token = token
              g.emittedIDs = g.ids
              groups[key] = g
              emit(event(.added, g))
            } else {
              groups[key] = nil  // a USB device that brought no token (e.g. a keyboard)
            }
          }
          continue
        }
        let lost = g.emittedIDs.map { !Set($0).isSubset(of: Set(g.ids)) } ?? false
        if g.interfaces.isEmpty || (lost && usbGone(g)) {
          groups[key] = nil
          emit(event(.removed, g, ids: g.emittedIDs))
        } else if lost, g.device != nil, g.lossDeadline == nil || now < g.lossDeadline! {
          // Part of a USB device went: the rest is probably going too; one `removed` then, not `changed` first.
          if g.lossDeadline == nil { groups[key]?.lossDeadline = now + departureSeconds }
        } else if g.ids != g.emittedIDs {
          g.emittedIDs = g.ids
          g.lossDeadline = nil
          groups[key] = g
          emit(event(.changed, g))
        }
      }
    }

    /// The group's USB device is gone from sysfs (unplugged).
    func usbGone(_ g: Group) -> Bool {
      guard let bus = g.busPath else { return false }
      return !FileManager.default.fileExists(atPath: "\(sys)/bus/usb/devices/\(bus)")
    }

    func event(_ kind: WatchEvent.Kind, _ g: Group, ids: [String]? = nil) -> WatchEvent {
      let sources = g.interfaces.keys.sorted()
      return WatchEvent(
        event: kind, token: g.token, ids: ids ?? g.ids, capabilities: kind == .removed ? nil : g.capabilities,
        device: g.device, source: kind == .removed || sources.isEmpty ? nil : sources.joined(separator: "; "))
    }
  }
}

extension USBHotplug.StartError {
  /// What failed, for the `watch` line that names the hotplug source.
  var explanation: String {
    switch self {
    case .initFailed(let code): "libusb_init failed (libusb error \(code))"
    case .noHotplug: "this libusb has no hotplug support"
    case .registerFailed(let code): "the hotplug callback was refused (libusb error \(code))"
    case .libraryMissing(let l): "\(l.library.soname) cannot be loaded (\(l.reason))"
    }
  }
}

extension DeviceNodeWatcher.WaitError {
  /// What went wrong watching a key's device node, as a sentence fragment (not the enum's text).
  var explanation: String {
    switch self {
    case .timedOut: "no re-insert in time"
    case .unavailable(let code): String(cString: strerror(code))
    }
  }
}
