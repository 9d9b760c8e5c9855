import ArgumentParser
import FoundationEssentials
import Platform
import TokenBridge

struct InstallDesktop: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "install-desktop",
    abstract: "Make clicked tokenbridge:// links (x-callback-urls) open `tokenbridge oob` in a terminal.",
    discussion: """
      Writes tokenbridge.desktop (MimeType x-scheme-handler/tokenbridge) into $XDG_DATA_HOME/applications \
      (~/.local/share/applications), makes it the default handler with xdg-mime and updates the directory's \
      MIME cache with update-desktop-database. --print shows the entry and installs nothing.
      """)
  @Flag(name: .customLong("print"), help: "Print the desktop entry and install nothing.")
  var printOnly = false
  @Option(help: "The tokenbridge executable the entry runs (default: this one).")
  var executable: String?

  func run() throws {
    let handler = DesktopHandler(executable: executable ?? DesktopHandler.currentExecutable)
    do {
      if printOnly {
        print(try handler.entry(), terminator: "")
        return
      }
      let done = try handler.install()
      print("Installed \(done.file)")
      if let link = done.link {
        print(
          "It runs \(link), a link to \(handler.executable) (xdg-open cannot start a program path that needs quoting).")
      }
      print(
        done.defaultHandler.map { "Not made the default handler: \($0)" } ?? "Default handler of tokenbridge: links.")
      if let d = done.database { print("MIME cache not updated: \(d)") }
    } catch {
      let report = ErrorReport(error)
      FileIO.writeError("tokenbridge: \(report.message)\n")
      throw ExitCode(report.status.rawValue)
    }
  }
}
