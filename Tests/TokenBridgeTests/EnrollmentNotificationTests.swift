import Foundation
import Testing

@testable import TokenBridge

/// The enrollment's desktop notification without notify-send: `busctl --user call … Notify` on a real session bus
/// (a private dbus-daemon), read back by dbus-monitor. Skipped where dbus-daemon, dbus-monitor or busctl is missing.
@Suite struct EnrollmentNotificationTests {
  static let tools = ["/usr/bin/dbus-daemon", "/usr/bin/dbus-monitor", "/usr/bin/busctl"]

  func spawn(_ path: String, _ args: [String], env: [String: String], out: URL) throws -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = args
    p.environment = env
    _ = FileManager.default.createFile(atPath: out.path, contents: nil)
    p.standardOutput = try FileHandle(forWritingTo: out)
    p.standardError = p.standardOutput
    try p.run()
    return p
  }

  /// Waits (bounded: a hang guard, not a timing assertion) until `file` contains `text`.
  func waitFor(_ text: String, in file: URL) -> String {
    for _ in 0..<200 {
      let s = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
      if s.contains(text) { return s }
      usleep(50_000)
    }
    return (try? String(contentsOf: file, encoding: .utf8)) ?? ""
  }

  @Test(.enabled(if: tools.allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }))
  func busctlFallbackSendsNotifyOnTheSessionBus() throws {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let address = "unix:path=\(dir.path)/bus"
    let env = ["PATH": "/usr/bin:/bin", "DBUS_SESSION_BUS_ADDRESS": address]
    let daemon = try spawn(
      "/usr/bin/dbus-daemon", ["--session", "--nofork", "--address=\(address)"], env: env,
      out: dir.appendingPathComponent("daemon.log"))
    defer { daemon.terminate() }
    for _ in 0..<200 where !FileManager.default.fileExists(atPath: "\(dir.path)/bus") { usleep(50_000) }
    let monitorLog = dir.appendingPathComponent("monitor.log")
    let monitor = try spawn(
      "/usr/bin/dbus-monitor", ["--session", "interface='org.freedesktop.Notifications',member='Notify'"], env: env,
      out: monitorLog)
    defer { monitor.terminate() }
    _ = waitFor("NameAcquired", in: monitorLog)  // it is a monitor now

    let notifier = DesktopNotifier(notifySend: dir.appendingPathComponent("no-notify-send").path, environment: env)
    let event = DesktopNotifier.Event.declined(tokenID: "fido2-hidraw0", key: "usb-1209-0001-20000001")
    #expect(notifier.command(event)?.first == "/usr/bin/busctl")
    notifier.send(event)

    let seen = waitFor("int32 -1", in: monitorLog)
    #expect(seen.contains("member=Notify"))
    #expect(seen.contains("string \"TokenBridge\""))
    #expect(seen.contains("string \"Token not enrolled\""))
    #expect(
      seen.contains(
        "string \"fido2-hidraw0 was declined; tokenbridge enroll --reset usb-1209-0001-20000001 asks again.\""))
  }

  @Test func noClientNoCommand() {
    let n = DesktopNotifier(notifySend: "/nonexistent/notify-send", busctl: "/nonexistent/busctl")
    #expect(n.command(.enrolled(tokenID: "t", username: "u", server: "https://s")) == nil)
  }

  @Test func notifySendWhenInstalled() {
    let n = DesktopNotifier(notifySend: "/bin/sh")  // any executable stands for notify-send here
    #expect(
      n.command(.enrolled(tokenID: "fido2-hidraw0", username: "alice", server: "https://example.org"))
        == [
          "/bin/sh", "--app-name=TokenBridge", "--", "Token enrolled",
          "fido2-hidraw0 is registered for alice at https://example.org.",
        ])
  }
}
