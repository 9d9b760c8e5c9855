import Foundation
import Testing

@testable import VirtualTokens

/// The lab's pull switch (`virtual-token usbip --unplug-*`, `--request-log`): which request unplugs, and what the
/// request log says (headers only: a VERIFY's PIN never reaches it).
@Suite struct PullSwitchTests {
  static let verify: [UInt8] =
    [0x6F, 14, 0, 0, 0, 0, 7, 0, 0, 0] + [0x00, 0x20, 0x00, 0x80, 8] + Array("123456\u{FF}\u{FF}".utf8.prefix(8))

  @Test func unplugsAtTheKthRequestOnce() {
    let p = PullSwitch(unplugAfter: 3, mode: .dropped, controlPath: nil, logPath: nil)
    #expect((1...6).map { _ in p.request("x") } == [nil, nil, .dropped, nil, nil, nil])
  }

  @Test func aControlFileArmsItAtRunTime() throws {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pull-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let control = dir.appendingPathComponent("unplug").path
    let log = dir.appendingPathComponent("requests.log").path
    let p = PullSwitch(unplugAfter: nil, mode: .processed, controlPath: control, logPath: log)
    #expect(p.request("before") == nil)
    try "2 processed\n".write(toFile: control, atomically: true, encoding: .utf8)
    #expect(p.request(PullSwitch.describeXfrBlock(Self.verify)) == nil)  // request 1 of the count
    #expect(!FileManager.default.fileExists(atPath: control))  // read and removed
    #expect(p.request("second") == .processed)
    #expect(p.request("after") == nil)
    let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
    #expect(lines == ["before", "ccid level=0 apdu=00 20 00 80", "second unplug=processed", "after"])
  }

  @Test func reportsAreLoggedByChannelAndCommand() {
    var initFrame = [UInt8](repeating: 0, count: 64)
    initFrame[0...12] = [0, 0, 0, 9, 0x90, 0, 80, 0x06, 0xA4, 0x01, 0x02, 0x02, 0x05]
    #expect(PullSwitch.describeReport(initFrame) == "hid 00000009 init 90 ctap=06 clientPIN=05")
    var cont = [UInt8](repeating: 0, count: 64)
    cont[0...4] = [0, 0, 0, 9, 1]
    #expect(PullSwitch.describeReport(cont) == "hid 00000009 cont 1")
  }
}
