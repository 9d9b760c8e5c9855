import ArgumentParser
import FoundationEssentials
import Platform
import TokenBridge

struct UAF: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "uaf", abstract: "The FIDO UAF client API for other programs.",
    subcommands: [UAFDiscover.self, UAFProcess.self])
}

struct UAFProcess: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "process",
    abstract: "processUAFOperation: a UAF request message on stdin, the response message on stdout.",
    discussion: """
      stdin: {"uafProtocolMessage": "<request array as a string>"} or the bare request array. stdout: \
      {"uafProtocolMessage": "<response array>"} (deregistration: an empty message). Prompts go to the \
      controlling terminal (/dev/tty) since stdin carries the request; --pin-fd for scripts.
      """)
  @OptionGroup var options: GlobalOptions
  @Option(help: "This client's facet ID (required unless set in the configuration).")
  var facetId: String?
  @Option(help: "Channel binding as JSON (ChannelBinding dictionary).")
  var channelBinding: String?

  func run() throws {
    try options.execute {
      // One byte past the limit tells "too large" without reading an endless stdin.
      let input = Array(FileIO.read(0, limit: UAFProcessLimits.maxInput + 1))
      // A message breaking a rule is refused before any token is listed or a prompt shown.
      try UAFEnvironment.validateRequest(input)
      let ctx = try UAFContext(options)
      let out = try ctx.env.processUAF(
        input: input, facetID: facetId, channelBinding: channelBinding, tokens: try ctx.tokens(),
        verifier: ctx.prompter, accountSelector: TerminalAccountSelector(prompter: ctx.prompter),
        authenticatorSelector: ctx.prompter.canAsk ? TerminalAuthenticatorSelector(prompter: ctx.prompter) : nil)
      print(out)
    }
  }
}
