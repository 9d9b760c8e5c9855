import Foundation
import Testing

@testable import TokenBridgeService

/// The facet ID of a `tokenbridge serve` caller (docs/dbus-api.md, "Who is calling"), on a /proc tree built in a
/// scratch directory: a Flatpak app only in a root of its own, a snap by its cgroup, anything else by its executable.
@Suite struct CallerIdentityTests {
  func proc() throws -> URL {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("proc-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir
  }

  func process(_ proc: URL, _ pid: Int, exe: String, root: String = "/", cgroup: String = "0::/user.slice\n") throws {
    let d = proc.appendingPathComponent("\(pid)")
    try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: d.appendingPathComponent("exe").path, withDestinationPath: exe)
    try FileManager.default.createSymbolicLink(atPath: d.appendingPathComponent("root").path, withDestinationPath: root)
    try cgroup.write(to: d.appendingPathComponent("cgroup"), atomically: true, encoding: .utf8)
  }

  @Test func anUnsandboxedProgramIsItsExecutable() throws {
    let p = try proc()
    try process(p, 100, exe: "/usr/bin/foo")
    #expect(CallerIdentity.of(pid: 100, proc: p.path)?.facetID == "unix:exe:/usr/bin/foo")
  }

  @Test func aFlatpakAppIsItsAppIDOnlyInARootOfItsOwn() throws {
    let p = try proc()
    let sandbox = p.appendingPathComponent("sandbox")
    try FileManager.default.createDirectory(at: sandbox, withIntermediateDirectories: true)
    try "[Application]\nname=org.example.Bank\nruntime=x\n".write(
      to: sandbox.appendingPathComponent(".flatpak-info"), atomically: true, encoding: .utf8)
    try process(p, 200, exe: "/app/bin/bank", root: sandbox.path)
    #expect(CallerIdentity.of(pid: 200, proc: p.path)?.facetID == "flatpak:app-id:org.example.Bank")
    // The same file seen through our own root is not a sandbox's: that process is its executable.
    try process(p, 201, exe: "/usr/bin/pretender", root: "/")
    #expect(CallerIdentity.of(pid: 201, proc: p.path)?.facetID == "unix:exe:/usr/bin/pretender")
    // An app id that is not a plain name is no identity.
    try "[Application]\nname=org.example/../x\n".write(
      to: sandbox.appendingPathComponent(".flatpak-info"), atomically: true, encoding: .utf8)
    #expect(CallerIdentity.of(pid: 200, proc: p.path)?.kind == .executable)
  }

  /// The caller chooses what its root holds: a FIFO, a link or a huge file at /.flatpak-info is no app id, and
  /// reading it does not block.
  @Test func aFlatpakInfoThatIsNotASmallRegularFileIsNoAppID() throws {
    let p = try proc()
    let sandbox = p.appendingPathComponent("sandbox")
    try FileManager.default.createDirectory(at: sandbox, withIntermediateDirectories: true)
    let info = sandbox.appendingPathComponent(".flatpak-info")
    try process(p, 210, exe: "/usr/bin/chrooted", root: sandbox.path)
    #expect(mkfifo(info.path, 0o600) == 0)
    #expect(CallerIdentity.of(pid: 210, proc: p.path)?.facetID == "unix:exe:/usr/bin/chrooted")
    try FileManager.default.removeItem(at: info)
    let real = p.appendingPathComponent("real-info")
    try "[Application]\nname=org.example.Bank\n".write(to: real, atomically: true, encoding: .utf8)
    try FileManager.default.createSymbolicLink(atPath: info.path, withDestinationPath: real.path)
    #expect(CallerIdentity.of(pid: 210, proc: p.path)?.kind == .executable)
    try FileManager.default.removeItem(at: info)
    try ("[Application]\nname=org.example.Bank\n" + String(repeating: "#", count: 70_000)).write(
      to: info, atomically: true, encoding: .utf8)
    #expect(CallerIdentity.of(pid: 210, proc: p.path)?.kind == .executable)
  }

  @Test func aSnapIsItsNameFromItsCgroup() throws {
    let p = try proc()
    try process(
      p, 300, exe: "/snap/firefox/1/usr/lib/firefox/firefox",
      cgroup: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/snap.firefox.firefox-1234.scope\n")
    #expect(CallerIdentity.of(pid: 300, proc: p.path)?.facetID == "snap:name:firefox")
  }

  @Test func aDeletedExecutableOrAGoneProcessIsNoIdentity() throws {
    let p = try proc()
    try process(p, 400, exe: "/usr/bin/old (deleted)")
    #expect(CallerIdentity.of(pid: 400, proc: p.path) == nil)
    #expect(CallerIdentity.of(pid: 401, proc: p.path) == nil)
  }

  @Test func theStartTimeIsField22() throws {
    let p = try proc()
    let d = p.appendingPathComponent("500")
    try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
    let fields = (3...22).map { String($0 * 10) }.joined(separator: " ")
    try "500 (a) b) c) \(fields) 230 240\n".write(
      to: d.appendingPathComponent("stat"), atomically: true, encoding: .utf8)
    // Field 3 is "30" after the last ")", so field 22 is "220".
    #expect(CallerIdentity.startTime(pid: 500, proc: p.path) == 220)
  }
}
