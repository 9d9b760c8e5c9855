import ArgumentParser
import TokenBridge

struct DoctorCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "doctor",
    abstract: "Check pcscd, readers, card access, FIDO key access, udev rules, the enrollment unit, libfido2, "
      + "the configuration and the data directory; each problem with its fix. Exit 0 only when all pass.")
  @Flag(help: "Machine-readable output.")
  var json = false

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
