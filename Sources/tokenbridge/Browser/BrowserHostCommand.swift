import ArgumentParser
import FoundationEssentials
import Glibc
import Platform
import TokenBridge
import TokenBridgeService

/// `tokenbridge browser-host`: the native-messaging host of the browser extension (browser/extension). The browser
/// starts it through a host manifest (`org.tokenbridge.uaf.json`, whose `path` runs `tokenbridge browser-host`) and
/// passes who is calling; it forwards the extension's calls to `tokenbridge serve` on the session bus with the
/// page's origin as the `origin` option (docs/dbus-api.md, "Web origins").
struct BrowserHostCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "browser-host",
    abstract: "The native-messaging host of the TokenBridge browser extension (started by the browser).",
    discussion: """
      Reads the browser's native-messaging frames on stdin and writes framed replies on stdout, nothing else. \
      Only the TokenBridge extension is served: the browser passes chrome-extension://ID/ (Chromium) or the \
      manifest path and the add-on id (Firefox). docs/web-pages.md.
      """,
    shouldDisplay: false)

  @Argument(parsing: .captureForPassthrough, help: "What the browser passes (the calling extension).")
  var browserArguments: [String] = []

  func run() throws {
    guard BrowserCaller.identify(browserArguments) != nil else {
      FileIO.writeError("tokenbridge browser-host: not started by the TokenBridge extension; refused\n")
      throw ExitCode(1)
    }
    signal(SIGPIPE, SIG_IGN)
    let status = BrowserHost().run()
    if status != 0 { throw ExitCode(status) }
  }
}
