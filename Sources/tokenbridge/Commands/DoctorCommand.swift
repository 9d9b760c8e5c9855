import CommandLineCore
import TokenBridge

struct DoctorCommand: CLICommand {
  static let jsonArg = ArgumentSpec.flag("json", help: "Machine-readable output.")
  static let spec = CommandSpec(
    name: "doctor",
    abstract: "Check pcscd, readers, card access, FIDO key access, udev rules, the enrollment unit, libfido2, "
      + "the configuration and the data directory; each problem with its fix. Exit 0 only when all pass.",
    arguments: [jsonArg], run: invoke)
  var json = false
  init(_ p: Parsed) { json = p.flag(Self.jsonArg) }

  func run() throws {
    let checks = Doctor().run()
    if json {
      print(Render.json(checks))
    } else {
      for c in checks {
        print("\(c.ok ? "ok  " : "FAIL") \(c.name): \(c.detail)")
        if let fix = c.fix, !c.ok { print("     fix: \(fix)") }
      }
    }
    if checks.contains(where: { !$0.ok }) { throw ExitCode(ExitStatus.doctorFoundProblems.rawValue) }
  }
}
