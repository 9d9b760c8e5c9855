import ArgumentParser
import TokenBridge
import TokenDevices

struct Tokens: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "List tokens: id, kind, reader, capabilities, PIN and PUK tries (reading them spends no try).")

  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let result = try TokenDiscovery(trace: options.traceSink).discover()
      if options.json {
        print(Render.json(result.tokens))
        return
      }
      if result.tokens.isEmpty {
        print(result.readerCount == 0 ? "No smart-card reader found." : "No token found.")
      }
      for t in result.tokens {
        print("\(t.id)  \(t.name)")
        print("  kind: \(t.kind.rawValue)   capabilities: \(t.capabilities.joined(separator: ", "))")
        if let r = t.reader { print("  reader: \(r)") }
        if let s = t.serial { print("  serial: \(s)") }
        for line in Render.pinLines(t) { print("  " + line) }
      }
      for r in result.emptyReaders { print("(\(r): no card)") }
      if let p = result.pcscProblem { print("(smart cards: \(ErrorReport.smartCard(p).0))") }
      for u in result.unusableCards { print("(\(u.reader): \(ErrorReport.token(u.reason).0))") }
    }
  }
}
