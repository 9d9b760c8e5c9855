import CommandLineCore
import FoundationEssentials
import TokenBridge

struct InstallDesktop: CLICommand {
  enum Arg {
    static let print = ArgumentSpec.flag("print", help: "Print the desktop entry and install nothing.")
    static let executable = ArgumentSpec.option(
      "executable", help: "The tokenbridge executable the entry runs (default: this one).")
  }
  static let spec = CommandSpec(
    name: "install-desktop",
    abstract: "Make clicked tokenbridge:// links (x-callback-urls) open `tokenbridge oob` in a terminal.",
    discussion: """
      Writes tokenbridge.desktop (MimeType x-scheme-handler/tokenbridge) into $XDG_DATA_HOME/applications \
      (~/.local/share/applications), makes it the default handler with xdg-mime and updates the directory's \
      MIME cache with update-desktop-database. --print shows the entry and installs nothing.
      """, arguments: [Arg.print, Arg.executable], run: invoke)
  var print = false
  var executable: String?

  init(_ p: Parsed) {
    print = p.flag(Arg.print)
    executable = p.string(Arg.executable)
  }

  func run() throws {
    let handler = DesktopHandler(executable: executable ?? DesktopHandler.currentExecutable)
    do {
      if print {
        Swift.print(try handler.entry(), terminator: "")
        return
      }
      let done = try handler.install()
      Swift.print("Installed \(done.file)")
      Swift.print(
        done.defaultHandler.map { "Not made the default handler: \($0)" } ?? "Default handler of tokenbridge: links.")
      if let d = done.database { Swift.print("MIME cache not updated: \(d)") }
    } catch {
      let report = ErrorReport(error)
      FileIO.writeError("tokenbridge: \(report.message)\n")
      throw ExitCode(report.status.rawValue)
    }
  }
}
