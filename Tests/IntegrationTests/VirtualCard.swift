import Foundation
import Testing
import TokenDevices

#if canImport(Glibc)
  import Glibc
#endif

/// True inside `Tools/with-pcscd` (private pcscd with the vpcd reader); `Tools/test` runs the suite there.
let hasPrivatePCSCD = ProcessInfo.processInfo.environment["TB_IN_NAMESPACE"] == "1"

/// A `virtual-token piv` process on one vpcd slot, with its own state file; stopped by pid.
final class VirtualCard: Sendable {
  static let binDir: URL = {
    if let bin = ProcessInfo.processInfo.environment["TB_BIN"] { return URL(fileURLWithPath: bin) }
    return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent().appendingPathComponent(".build/debug")
  }()

  let process = Process()
  let statePath: String
  let reader: String

  /// Slot 0 is `Virtual PCD 00 00` on port 35963, slot 1 `Virtual PCD 00 01` on 35964.
  init(slot: Int = 0, serial: UInt32 = 4_200_000, arguments: [String] = []) throws {
    statePath = NSTemporaryDirectory() + "vcard-\(UUID().uuidString).json"
    reader = "Virtual PCD 00 0\(slot)"
    process.executableURL = Self.binDir.appendingPathComponent("virtual-token")
    process.arguments =
      ["piv", "--state", statePath, "--vpcd", "127.0.0.1:\(35963 + slot)", "--serial", "\(serial)"] + arguments
    process.standardError = FileHandle.nullDevice
    try process.run()
    try waitFor(present: !arguments.contains("--removed"))
  }

  deinit { stop() }

  func stop() {
    guard process.isRunning else { return }
    process.terminate()
    process.waitUntilExit()
    try? waitFor(present: false)
    try? FileManager.default.removeItem(atPath: statePath)
  }

  func remove() throws {
    kill(process.processIdentifier, SIGUSR1)
    try waitFor(present: false)
  }

  func insert() throws {
    kill(process.processIdentifier, SIGUSR2)
    try waitFor(present: true)
  }

  /// pcscd polls vpcd every 400 ms: wait until the reader shows the card (or its absence).
  func waitFor(present: Bool) throws {
    for _ in 0..<100 {
      if let ctx = try? PCSCContext(), let st = try? ctx.readerState(reader), st.present == present { return }
      usleep(100_000)
    }
    throw CardTimeout(reader: reader, present: present)
  }

  func open() throws -> PIVSession {
    try PIVSession.open(transport: try PCSCContext().connect(reader))
  }
}

struct CardTimeout: Error {
  let reader: String
  let present: Bool
}
