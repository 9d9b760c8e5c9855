import ArgumentParser
import Dispatch
import FoundationEssentials
import Platform
import TokenBridge

#if canImport(Glibc)
  import Glibc
#endif

/// `tokenbridge watch`: one line (or one JSON object) per token event until Ctrl-C or SIGTERM (exit 0).
struct WatchCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "watch",
    abstract: "Follow tokens arriving and leaving: PC/SC readers and cards, USB hotplug, FIDO2 keys.",
    discussion: """
      Prints the tokens present, then one line per event (present, added, removed, changed, unusable, \
      reader-added, reader-removed, pcscd-unavailable, pcscd-back) with the token id `tokens` prints; the \
      interfaces of one USB device (CCID + FIDO HID) are one token. Survives a pcscd restart. Ends with exit 0 \
      on Ctrl-C or SIGTERM.
      """)

  @Flag(help: "One JSON object per line.")
  var json = false

  func run() throws {
    let watch = TokenWatch()
    var sources: [DispatchSourceSignal] = []
    for sig in [SIGINT, SIGTERM] {
      signal(sig, SIG_IGN)
      let src = DispatchSource.makeSignalSource(signal: sig, queue: DispatchQueue(label: "tokenbridge.watch.signal"))
      src.setEventHandler { watch.stop() }
      src.resume()
      sources.append(src)
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    FileIO.writeError(
      "tokenbridge: watching PC/SC readers and cards, FIDO2 device nodes; USB hotplug: \(watch.hotplug)\n")
    watch.run { event in
      let line =
        json ? (try? encoder.encode(event)).map { String(decoding: $0, as: UTF8.self) } ?? "{}" : event.line
      // Written at once (stdout is a pipe for a service or a script: no buffering).
      FileIO.writeOutput(line + "\n")
    }
    withExtendedLifetime(sources) {}
  }
}
