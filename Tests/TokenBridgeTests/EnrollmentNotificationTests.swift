import Foundation
import Testing

@testable import TokenBridge

/// The enrollment's desktop notification without notify-send: `busctl --user call … Notify` on a real session bus
/// (a private dbus-daemon), read back by dbus-monitor. Skipped where dbus-daemon, dbus-monitor or busctl is missing.
@Suite struct EnrollmentNotificationTests {
  static let tools = ["/usr/bin/dbus-daemon", "/usr/bin/dbus-monitor", "/usr/bin/busctl"]

  /// A daemon of the test's own, stopped for certain (`stop`). Started with posix_spawn and every signal unblocked
  /// and at its default: Foundation's `Process` hands the child the test runner's signal mask, in which SIGTERM and
  /// SIGINT are blocked, so neither `terminate()` nor a Ctrl-C ever ended it.
  final class Daemon {
    let pid: pid_t
    private var reaped = false

    init(_ path: String, _ args: [String], env: [String: String], out: URL) throws {
      _ = FileManager.default.createFile(atPath: out.path, contents: nil)
      var actions = posix_spawn_file_actions_t()
      posix_spawn_file_actions_init(&actions)
      defer { posix_spawn_file_actions_destroy(&actions) }
      posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
      posix_spawn_file_actions_addopen(&actions, 1, out.path, O_WRONLY | O_APPEND, 0)
      posix_spawn_file_actions_adddup2(&actions, 1, 2)
      var attr = posix_spawnattr_t()
      posix_spawnattr_init(&attr)
      defer { posix_spawnattr_destroy(&attr) }
      var none = sigset_t()
      sigemptyset(&none)
      var all = sigset_t()
      sigfillset(&all)
      posix_spawnattr_setsigmask(&attr, &none)
      posix_spawnattr_setsigdefault(&attr, &all)
      posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
      let argv = ([path] + args).map { strdup($0) } + [nil]
      let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
      defer { for p in argv + envp { free(p) } }
      var pid: pid_t = 0
      let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
      guard rc == 0 else { throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EINVAL) }
      self.pid = pid
    }

    /// SIGTERM, up to 2 s for it to end, then SIGKILL; reaped either way (a bounded wait, not a timing assertion).
    func stop() {
      guard !reaped else { return }
      kill(pid, SIGTERM)
      for _ in 0..<40 {
        if waitpid(pid, nil, WNOHANG) == pid {
          reaped = true
          return
        }
        usleep(50_000)
      }
      kill(pid, SIGKILL)
      waitpid(pid, nil, 0)
      reaped = true
    }

    deinit { stop() }
  }

  func spawn(_ path: String, _ args: [String], env: [String: String], out: URL) throws -> Daemon {
    try Daemon(path, args, env: env, out: out)
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
    var daemons: [Daemon] = []
    defer { for d in daemons { d.stop() } }
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let address = "unix:path=\(dir.path)/bus"
    let env = ["PATH": "/usr/bin:/bin", "DBUS_SESSION_BUS_ADDRESS": address]
    let daemon = try spawn(
      "/usr/bin/dbus-daemon", ["--session", "--nofork", "--address=\(address)"], env: env,
      out: dir.appendingPathComponent("daemon.log"))
    daemons.append(daemon)
    for _ in 0..<200 where !FileManager.default.fileExists(atPath: "\(dir.path)/bus") { usleep(50_000) }
    let monitorLog = dir.appendingPathComponent("monitor.log")
    let monitor = try spawn(
      "/usr/bin/dbus-monitor", ["--session", "interface='org.freedesktop.Notifications',member='Notify'"], env: env,
      out: monitorLog)
    daemons.insert(monitor, at: 0)
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

  /// The daemon the test starts ends on SIGTERM (its signals are not blocked) and is reaped: nothing outlives it.
  @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon")))
  func theTestsDaemonEndsOnSIGTERM() throws {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let address = "unix:path=\(dir.path)/bus"
    let daemon = try spawn(
      "/usr/bin/dbus-daemon", ["--session", "--nofork", "--address=\(address)"], env: ["PATH": "/usr/bin:/bin"],
      out: dir.appendingPathComponent("daemon.log"))
    for _ in 0..<200 where !FileManager.default.fileExists(atPath: "\(dir.path)/bus") { usleep(50_000) }
    let status = try String(contentsOfFile: "/proc/\(daemon.pid)/status", encoding: .utf8)
    let blocked = status.split(separator: "\n").first { $0.hasPrefix("SigBlk:") }
    #expect(blocked?.hasSuffix("0000000000000000") == true, "\(blocked ?? "no SigBlk")")
    kill(daemon.pid, SIGTERM)
    var ended = false
    for _ in 0..<100 where !ended {  // a hang guard, not a timing assertion
      ended = waitpid(daemon.pid, nil, WNOHANG) == daemon.pid
      if !ended { usleep(50_000) }
    }
    #expect(ended, "dbus-daemon outlived SIGTERM")
    if !ended { daemon.stop() }
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
