import ArgumentParser
import TokenBridge

struct Tokens: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "tokens",
    abstract: "List tokens: id, kind, reader, capabilities, PIN and PUK tries (reading them spends no try).",
    discussion: "With --token ID, only that token (exit 4 when it is not there).")

  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let listing = try TokenListing(trace: options.traceSink, wait: options.tokenWait, id: options.token)
      if options.json {
        print(Render.json(listing.tokens))
        return
      }
      if listing.tokens.isEmpty {
        print(listing.readerCount == 0 ? "No smart-card reader found." : "No token found.")
      }
      for t in listing.tokens {
        print("\(t.id)  \(displayable(t.name))")
        let kinds = (t.kinds ?? [t.kind]).map(\.rawValue).joined(separator: " + ")
        print("  kind: \(kinds)   capabilities: \(t.capabilities.joined(separator: ", "))")
        if let ids = t.ids { print("  ids: \(ids.joined(separator: ", ")) (one USB device; --token takes either)") }
        if let r = t.reader { print("  reader: \(displayable(r))") }
        if let s = t.serial { print("  serial: \(s)") }
        guard t.kinds?.count ?? 1 > 1, let ids = t.ids else {
          for line in Render.pinLines(t) { print("  " + line) }
          continue
        }
        // A PIV card and a FIDO2 key in one: the card's PIN and PUK, then the key's PIN (each its own).
        var card = t
        card.fido2 = nil
        for line in Render.pinLines(card) { print("  PIV " + line) }
        var key = t
        key.id = ids.first(where: { $0.hasPrefix("fido2-") }) ?? t.id
        key.pin = t.fido2PIN
        for line in Render.pinLines(key) { print("  FIDO2 " + line) }
      }
      for r in listing.emptyReaders { print("(\(displayable(r)): no card)") }
      for p in listing.problems { print("(\(p))") }
    }
  }
}
