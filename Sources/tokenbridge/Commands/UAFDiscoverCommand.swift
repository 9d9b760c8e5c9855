import ArgumentParser
import TokenBridge

struct UAFDiscover: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "discover",
    abstract: "discover: the client's DiscoveryData (UAF versions, vendor, version, authenticators present).",
    discussion: """
      --json prints the FIDO UAF Client API's DiscoveryData dictionary, as the D-Bus Discover and the browser's \
      navigator.fido.uaf.discover() answer it. Never prompts, never touches a key. `tokenbridge tokens` tells \
      which tokens are usable and why not.
      """)
  @OptionGroup var options: GlobalOptions

  func run() throws {
    try options.execute {
      let configuration = try Configuration.load()
      let listing = try TokenListing(trace: options.traceSink, wait: options.tokenWait, id: options.token)
      let data = AuthenticatorProfile.discoveryData(listing.tokens, configuration: configuration)
      if options.json {
        print(Render.json(data))
        return
      }
      let versions = data.supportedUAFVersions.map { "\($0.major).\($0.minor)" }.joined(separator: ", ")
      print("\(data.clientVendor) \(data.clientVersion.major).\(data.clientVersion.minor), UAF \(versions)")
      if data.availableAuthenticators.isEmpty { print("No authenticator (no token) is present.") }
      for a in data.availableAuthenticators {
        print("\(a.aaid)  \(displayable(a.title))")
        print("  \(displayable(a.description))")
      }
    }
  }
}
