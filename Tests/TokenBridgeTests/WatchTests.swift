import Foundation
import Testing

@testable import TokenBridge
@testable import TokenDevices

/// How `TokenWatch` folds the events of one USB device into one token, on a sysfs tree built in a scratch
/// directory (the PC/SC half needs pcscd: Tests/cli/test_watch.py and the lab cover it).
@Suite struct WatchTests {
  /// sysfs with USB device 1-1 (1209:0001, serial S1) whose interfaces are `classes`; the first is HID with hidraw7.
  func sysfs(classes: [String]) throws -> URL {
    let fm = FileManager.default
    let root = fm.temporaryDirectory.appendingPathComponent("watch-sys-\(UUID().uuidString)")
    let device = root.appendingPathComponent("devices/usb1/1-1")
    try fm.createDirectory(at: device, withIntermediateDirectories: true)
    for (name, value) in [("idVendor", "1209"), ("idProduct", "0001"), ("serial", "S1")] {
      try Data((value + "\n").utf8).write(to: device.appendingPathComponent(name))
    }
    for (i, c) in classes.enumerated() {
      let interface = device.appendingPathComponent("1-1:1.\(i)")
      try fm.createDirectory(at: interface, withIntermediateDirectories: true)
      try Data((c + "\n").utf8).write(to: interface.appendingPathComponent("bInterfaceClass"))
    }
    let hidraw = device.appendingPathComponent("1-1:1.0/0003:1209:0001.0001/hidraw/hidraw7")
    try fm.createDirectory(at: hidraw, withIntermediateDirectories: true)
    try fm.createDirectory(at: root.appendingPathComponent("class/hidraw"), withIntermediateDirectories: true)
    try fm.createDirectory(at: root.appendingPathComponent("bus/usb/devices"), withIntermediateDirectories: true)
    try fm.createSymbolicLink(at: root.appendingPathComponent("class/hidraw/hidraw7"), withDestinationURL: hidraw)
    try fm.createSymbolicLink(at: root.appendingPathComponent("bus/usb/devices/1-1"), withDestinationURL: device)
    return root
  }

  func watch(_ sys: URL) -> TokenWatch.Fold {
    var w = TokenWatch.Fold()
    w.sys = sys.path
    return w
  }

  func run(_ w: inout TokenWatch.Fold, _ inputs: [TokenWatch.Input]) -> [WatchEvent] {
    var out: [WatchEvent] = []
    for i in inputs { w.handle(i) { out.append($0) } }
    w.settle { out.append($0) }
    return out
  }

  let left = USBHotplugEvent(arrived: false, busPath: "1-1", vendorID: 0x1209, productID: 1, interfaceClasses: [3, 11])

  @Test func aFIDOOnlyDeviceIsAnnouncedAtOnce() throws {
    let sys = try sysfs(classes: ["03"])
    defer { try? FileManager.default.removeItem(at: sys) }
    var w = watch(sys)
    let events = run(&w, [.node(.added(path: "/dev/hidraw7"))])
    #expect(
      events == [
        WatchEvent(
          event: .added, token: "fido2-hidraw7", ids: ["fido2-hidraw7"], capabilities: ["fido2"],
          device: "usb-1209-0001-S1", source: "/dev/hidraw7")
      ])
  }

  @Test func aCompositeDeviceWaitsForItsCardThenIsAnnouncedWithWhatCame() throws {
    let sys = try sysfs(classes: ["03", "0b"])
    defer { try? FileManager.default.removeItem(at: sys) }
    var w = watch(sys)
    w.settleSeconds = 600
    w.pcscUp = true
    #expect(run(&w, [.node(.added(path: "/dev/hidraw7"))]) == [])  // CCID promised: the card may follow
    w.groups["usb-1209-0001-S1"]?.deadline = .now()  // the wait is over (no clock in the test)
    #expect(run(&w, []).map(\.event) == [.added])  // the card did not come: announced with the FIDO half
  }

  @Test func withoutPcscdACompositeDeviceWaitsForNoCard() throws {
    let sys = try sysfs(classes: ["03", "0b"])
    defer { try? FileManager.default.removeItem(at: sys) }
    var w = watch(sys)
    w.settleSeconds = 600
    w.pcscUp = true
    _ = run(&w, [.pcsc(.serviceLost)])
    // pcscd went away: no reader can come for the CCID interface, so the FIDO half is the whole token now.
    #expect(run(&w, [.node(.added(path: "/dev/hidraw7"))]).map(\.event) == [.added])
  }

  @Test func aDeviceLeavingIsOneRemovalWhateverTheOrder() throws {
    let sys = try sysfs(classes: ["03", "0b"])
    defer { try? FileManager.default.removeItem(at: sys) }
    var w = watch(sys)
    w.settleSeconds = 0
    #expect(run(&w, [.node(.added(path: "/dev/hidraw7"))]).map(\.event) == [.added])
    // libusb's "left" first: removed at once; the node's removal afterwards adds nothing.
    #expect(
      run(&w, [.usb(left)]) == [
        WatchEvent(event: .removed, token: "fido2-hidraw7", ids: ["fido2-hidraw7"], device: "usb-1209-0001-S1")
      ])
    #expect(run(&w, [.node(.removed(path: "/dev/hidraw7"))]) == [])
  }

  @Test func aLostInterfaceWaitsForTheRestOfTheDevice() throws {
    let sys = try sysfs(classes: ["03", "0b"])
    defer { try? FileManager.default.removeItem(at: sys) }
    var w = watch(sys)
    w.settleSeconds = 0
    w.departureSeconds = 600
    // Two FIDO nodes on the device stand in for two interfaces (the PIV half needs pcscd).
    _ = run(&w, [.node(.added(path: "/dev/hidraw7"))])
    w.add(
      TokenWatch.Interface(id: "piv-1", capability: "piv", usbKey: "usb-1209-0001-S1", busPath: "1-1"), source: "R")
    #expect(run(&w, []).map(\.event) == [.changed])
    #expect(run(&w, [.node(.removed(path: "/dev/hidraw7"))]) == [])  // waiting: the device may be going
    // The device is gone from sysfs: one removal, with every id it had.
    try FileManager.default.removeItem(at: sys.appendingPathComponent("bus/usb/devices/1-1"))
    #expect(
      run(&w, []) == [
        WatchEvent(
          event: .removed, token: "fido2-hidraw7", ids: ["fido2-hidraw7", "piv-1"], device: "usb-1209-0001-S1")
      ])
  }

  @Test func aLostInterfaceOfADeviceThatStaysIsAChangeAfterTheWait() throws {
    let sys = try sysfs(classes: ["03", "0b"])
    defer { try? FileManager.default.removeItem(at: sys) }
    var w = watch(sys)
    w.settleSeconds = 0
    w.departureSeconds = 600
    _ = run(&w, [.node(.added(path: "/dev/hidraw7"))])
    w.add(
      TokenWatch.Interface(id: "piv-1", capability: "piv", usbKey: "usb-1209-0001-S1", busPath: "1-1"), source: "R")
    _ = run(&w, [])
    w.removeInterface(source: "R")  // the card pulled from the reader, the device stays
    #expect(run(&w, []) == [])
    w.groups["usb-1209-0001-S1"]?.lossDeadline = .now()  // the wait is over
    #expect(run(&w, []).map(\.event) == [.changed])
  }
}

/// What a failure of the node watcher or of libusb hotplug says: the OS's words, never the enum's text.
@Test func watcherFailuresReadAsSentences() {
  #expect(DeviceNodeWatcher.WaitError.unavailable(EMFILE).explanation == "Too many open files")
  #expect(USBHotplug.StartError.noHotplug.explanation == "this libusb has no hotplug support")
  #expect(USBHotplug.StartError.initFailed(-3).explanation == "libusb_init failed (libusb error -3)")
}
