import Foundation
import Testing

@testable import Prompts
import TokenBridge

/// The Assuan client against the scripted pinentry (Tests/cli/scripted_pinentry.py, a real program on pipes).
@Suite(.serialized) struct PinentryTests {
  static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("cli/scripted_pinentry.py").path

  /// A scenario file for the scripted pinentry (named in the environment: this suite runs its tests one at a
  /// time, and no other suite reads that variable).
  func scenario(_ answers: [String], refuse: [String] = []) throws -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pinentry-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    let path = dir.appendingPathComponent("scenario.json").path
    let json = try JSONSerialization.data(withJSONObject: ["answers": answers, "refuse": refuse])
    try json.write(to: URL(fileURLWithPath: path))
    return path
  }

  /// The script itself is the program (nothing executable is written here: a file being written while another
  /// test forks could not be executed, ETXTBSY).
  func pinentry(_ scenarioPath: String, timeout: Double = 10) throws -> Pinentry {
    setenv("SCRIPTED_PINENTRY_SCENARIO", scenarioPath, 1)
    return Pinentry(program: Self.script, timeout: timeout)
  }

  func log(_ scenarioPath: String) -> [String] {
    ((try? String(contentsOfFile: scenarioPath + ".log", encoding: .utf8)) ?? "").split(separator: "\n").map(
      String.init)
  }

  let dialog = PinentryDialog(title: "T", description: "line 1\nline 2 100%", prompt: "PIN:", error: "Wrong PIN")

  @Test func decodesSplitPercentEncodedDataLines() throws {
    let s = try scenario(["a%b\nc12"])
    let pin = try pinentry(s).getPin(dialog)
    #expect(pin.bytes == Array("a%b\nc12".utf8))
    let lines = log(s)
    #expect(lines.contains("SETDESC line 1%0Aline 2 100%25"))
    #expect(lines.contains("SETERROR Wrong PIN") && lines.contains("SETTITLE T") && lines.contains("GETPIN"))
  }

  @Test func cancelIsTheUsersCancel() throws {
    let s = try scenario(["@cancel"])
    #expect(throws: InteractionError.cancelled) { try pinentry(s).getPin(dialog) }
  }

  @Test func missingProgram() throws {
    let p = Pinentry(program: "/nonexistent/pinentry", timeout: 5)
    #expect(throws: InputError.pinentry(.cannotStart(program: "/nonexistent/pinentry", errno: ENOENT))) {
      try p.getPin(dialog)
    }
  }

  @Test func programEndingMidDialog() throws {
    let s = try scenario(["@die"])
    let p = try pinentry(s)
    #expect(throws: InputError.pinentry(.ended(program: p.program, command: "GETPIN"))) { try p.getPin(dialog) }
  }

  @Test func programKilledByCtrlCIsTheUsersCancel() throws {
    let s = try scenario(["@sigint"])
    #expect(throws: InteractionError.cancelled) { try pinentry(s).getPin(dialog) }
  }

  @Test func notAssuan() throws {
    let s = try scenario(["@garbage"])
    let p = try pinentry(s)
    #expect(throws: InputError.pinentry(.refused(program: p.program, command: "GETPIN", code: nil))) {
      try p.getPin(dialog)
    }
  }

  @Test func noAnswerTimesOut() throws {
    let s = try scenario(["@hang"])
    #expect(throws: InteractionError.timedOut) { try pinentry(s, timeout: 1).getPin(dialog) }
  }

  @Test func withoutSetRepeatAsksTwiceAndCompares() throws {
    var d = dialog
    d.repeatPrompt = "Again:"
    let s = try scenario(["1234", "9999", "5678", "5678"], refuse: ["SETREPEAT"])
    let pin = try pinentry(s).getPin(d)
    #expect(pin.bytes == Array("5678".utf8))
    let lines = log(s)
    #expect(lines.filter { $0 == "GETPIN" }.count == 4)
    #expect(lines.contains("SETERROR The two entries differ."))
  }

  @Test func confirmOkAndCancel() throws {
    #expect(try pinentry(try scenario(["@ok"])).confirm(title: "T", description: "Sure?", ok: "Yes", cancel: "No"))
    #expect(
      try !pinentry(try scenario(["@cancel"])).confirm(title: "T", description: "Sure?", ok: "Yes", cancel: "No"))
  }

  @Test func configurationKeys() throws {
    let c = try Configuration.parse(Array(#"{"prompt": "pinentry", "pinentry": "pinentry-tty"}"#.utf8), path: "/c")
    #expect(c.prompt == .pinentry && c.pinentry == "pinentry-tty")
    #expect(
      throws: ConfigurationError.invalidValue(
        path: "/c", key: "prompt", value: "\"gui\"", allowed: "\"terminal\", \"pinentry\" or \"auto\"")
    ) { try Configuration.parse(Array(#"{"prompt": "gui"}"#.utf8), path: "/c") }
  }
}
