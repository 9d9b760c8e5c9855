import Foundation

/// A throw-away `/sys` tree for the tests that read hidraw report descriptors: `hidraw(name, descriptor)` adds
/// `class/hidraw/NAME/device/report_descriptor`; `remove()` deletes the tree.
struct FakeSysfs {
  let path = FileManager.default.temporaryDirectory.appendingPathComponent("sys-\(UUID().uuidString)").path

  func hidraw(_ name: String, _ descriptor: [UInt8]) throws {
    let dir = "\(path)/class/hidraw/\(name)/device"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    try Data(descriptor).write(to: URL(fileURLWithPath: "\(dir)/report_descriptor"))
  }

  func remove() { try? FileManager.default.removeItem(atPath: path) }
}
