import CUSB
import Dispatch
import FoundationEssentials
import Platform
import Synchronization

/// A USB device arriving or leaving, as libusb's hotplug reports it.
public struct USBHotplugEvent: Equatable, Sendable {
  public var arrived: Bool
  /// sysfs name of the device (`1-1`, `3-2.4`): what `USBIdentity.of` takes.
  public var busPath: String
  public var vendorID: UInt16
  public var productID: UInt16
  /// bInterfaceClass of each interface of the active configuration (0x03 HID, 0x0B CCID), from the descriptors
  /// libusb read at enumeration (no I/O to the device).
  public var interfaceClasses: [UInt8]

  public var isTokenCandidate: Bool { interfaceClasses.contains(0x0B) || interfaceClasses.contains(0x03) }
}

/// libusb hotplug callbacks on a thread of their own. libusb-1.0 (1.0.26 here, built with udev) takes its
/// hotplug events from udev's monitor, i.e. after udev processed the device; see HardwareNotes.md.
public final class USBHotplug: Sendable {
  public enum StartError: Error, Equatable, Sendable {
    /// libusb_init failed (its error code).
    case initFailed(Int32)
    /// This libusb has no hotplug support (LIBUSB_CAP_HAS_HOTPLUG is 0).
    case noHotplug
    /// libusb_hotplug_register_callback failed (its error code).
    case registerFailed(Int32)
    /// libusb cannot be loaded (it is loaded when hotplug watching starts, not at start-up).
    case libraryMissing(LibraryUnavailable)
  }

  private let context: LibUSBContext
  /// `start` sets it, the event thread reads it, `stop` (on another thread than the event loop) ends it.
  private let state = Mutex(State())
  private let done = DispatchSemaphore(value: 0)

  private struct State {
    var handle: libusb_hotplug_callback_handle = 0
    var handler: (@Sendable (USBHotplugEvent) -> Void)?
    /// Whether the event thread runs.
    var started = false
    var stopped = false
  }

  public init() throws(StartError) {
    do { try SystemLibrary.usb.load() } catch { throw .libraryMissing(error) }
    var ctx: OpaquePointer?
    let rc = libusb_init(&ctx)
    guard rc == 0, let ctx else { throw .initFailed(rc) }
    guard libusb_has_capability(UInt32(LIBUSB_CAP_HAS_HOTPLUG.rawValue)) != 0 else {
      libusb_exit(ctx)
      throw .noHotplug
    }
    context = LibUSBContext(pointer: ctx)
  }

  deinit {
    stop()
    libusb_exit(context.pointer)
  }

  /// Registers the callback (devices present now are not reported: discovery lists them) and handles events
  /// on a thread until `stop`. `handler` runs on that thread.
  public func start(_ handler: @escaping @Sendable (USBHotplugEvent) -> Void) throws(StartError) {
    state.withLock { $0.handler = handler }
    let events = Int32(LIBUSB_HOTPLUG_EVENT_DEVICE_ARRIVED.rawValue | LIBUSB_HOTPLUG_EVENT_DEVICE_LEFT.rawValue)
    let me = Unmanaged.passUnretained(self).toOpaque()
    var handle: libusb_hotplug_callback_handle = 0
    let rc = libusb_hotplug_register_callback(
      context.pointer, events, 0, LIBUSB_HOTPLUG_MATCH_ANY, LIBUSB_HOTPLUG_MATCH_ANY,
      LIBUSB_HOTPLUG_MATCH_ANY,
      { _, device, event, user in
        guard let user, let device else { return 0 }
        Unmanaged<USBHotplug>.fromOpaque(user).takeUnretainedValue().report(device, event)
        return 0
      }, me, &handle)
    guard rc == 0 else { throw .registerFailed(rc) }
    state.withLock { $0.handle = handle }
    let context = self.context
    // Not started (no thread could be made): `stop` must not wait for it.
    let started = POSIXThread.start { [self] in
      while !state.withLock({ $0.stopped }) {
        var tv = timeval(tv_sec: 3600, tv_usec: 0)
        _ = libusb_handle_events_timeout_completed(context.pointer, &tv, nil)
      }
      done.signal()
    }
    state.withLock { $0.started = started }
  }

  /// Ends the event thread (libusb_interrupt_event_handler wakes it) and waits for it.
  public func stop() {
    let (running, handle) = state.withLock { state in
      defer { state.stopped = true }
      return (!state.stopped && state.started, state.handle)
    }
    guard running else { return }
    libusb_hotplug_deregister_callback(context.pointer, handle)
    libusb_interrupt_event_handler(context.pointer)
    done.wait()
  }

  func report(_ device: OpaquePointer, _ event: libusb_hotplug_event) {
    var desc = libusb_device_descriptor()
    guard libusb_get_device_descriptor(device, &desc) == 0 else { return }
    var ports = [UInt8](repeating: 0, count: 8)
    let n = libusb_get_port_numbers(device, &ports, Int32(ports.count))
    let bus = libusb_get_bus_number(device)
    // sysfs names a root-hub port path "bus-port.port…"; a root hub itself is "usbN" (not a token).
    guard n > 0 else { return }
    let busPath = "\(bus)-" + ports.prefix(Int(n)).map { "\($0)" }.joined(separator: ".")
    var classes: [UInt8] = []
    var config: UnsafeMutablePointer<libusb_config_descriptor>?
    if libusb_get_active_config_descriptor(device, &config) == 0
      || libusb_get_config_descriptor(device, 0, &config) == 0,
      let config
    {
      for i in 0..<Int(config.pointee.bNumInterfaces) {
        let interface = config.pointee.interface[i]
        if interface.num_altsetting > 0 { classes.append(interface.altsetting[0].bInterfaceClass) }
      }
      libusb_free_config_descriptor(config)
    }
    state.withLock { $0.handler }?(
      USBHotplugEvent(
        arrived: event == LIBUSB_HOTPLUG_EVENT_DEVICE_ARRIVED, busPath: busPath, vendorID: desc.idVendor,
        productID: desc.idProduct, interfaceClasses: classes))
  }
}

/// A libusb context, which libusb guards with its own locks for use from any thread (libusb's "Multi-threaded
/// applications and asynchronous I/O"); it lives as long as the `USBHotplug` that made it.
// @unchecked: an OpaquePointer is never Sendable, and libusb's thread safety is its documentation's word, not a type.
struct LibUSBContext: @unchecked Sendable {
  let pointer: OpaquePointer
}
