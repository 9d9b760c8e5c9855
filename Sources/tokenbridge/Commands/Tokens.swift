import ArgumentParser
import TokenBridge

struct Tokens: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "tokens",
    abstract: "List tokens: id, kind, reader, capabilities, PIN and PUK tries (reading them spends no try).")

  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let listing = try TokenListing(trace: options.traceSink)
      if options.json {
        print(Render.json(listing.tokens))
        return
      }
      if listing.tokens.isEmpty {
        print(listing.readerCount == 0 ? "No smart-card reader found." : "No token found.")
      }
      for t in listing.tokens {
        print("\(t.id)  \(displayable(t.name))")
        print("  kind: \(t.kind.rawValue)   capabilities: \(t.capabilities.joined(separator: ", "))")
        if let r = t.reader { print("  reader: \(displayable(r))") }
        if let s = t.serial { print("  serial: \(s)") }
        if let same = t.sameDeviceAs {
          print("  same USB device as: \(same.joined(separator: ", ")) (one physical token)")
        }
        for line in Render.pinLines(t) { print("  " + line) }
      }
      for r in listing.emptyReaders { print("(\(displayable(r)): no card)") }
      for p in listing.problems { print("(\(p))") }
    }
  }
}
