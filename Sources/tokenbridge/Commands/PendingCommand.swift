import ArgumentParser
import FoundationEssentials
import Platform
import TokenBridge

struct Pending: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "pending",
    abstract: "List the out-of-band operations waiting for this device (neither processed nor timed out); run one.",
    discussion: """
      The servers are asked with a signed request (Device-Signature). On a terminal you pick one to run; --run=ID \
      runs that one (with "=": an id may start with "-"). It runs as tokenbridge oob would run its QR code: shown and confirmed first (--yes).
      """)
  @OptionGroup var options: GlobalOptions
  @Option(help: "Also ask this server (default: every server this device has accounts at).")
  var server: String?
  @Option(name: .customLong("run"), help: "Run the pending operation with this id.")
  var runID: String?
  @Flag(help: "Print the x-callback target instead of opening it (as oob --no-open).")
  var noOpen = false

  struct Entry: Encodable {
    var id, server: String
    var operation: String?
    var creationTimeInEpochMillis: Int64
    var dispatchChannel, dispatchInformation, data, error: String?
  }
  struct Output: Encodable {
    var operations: [Entry]
    var errors: [ErrorEntry]
  }

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let device = ctx.env.device
      let (ops, errors) = try device.pending(servers: try device.servers(including: server))
      if let id = runID {
        guard let op = ops.first(where: { $0.id == id }) else {
          for (s, e) in errors { say("could not ask \(s): \(ErrorReport(e).message)") }
          throw errors.first?.error ?? DeviceServiceError.operationNotFound(id)
        }
        return try runOperation(op)
      }
      if options.json {
        print(
          Render.json(
            Output(operations: ops.map(entry), errors: errors.map { ErrorEntry(server: $0.server, $0.error) })))
      } else {
        for (s, e) in errors { say("could not ask \(s): \(ErrorReport(e).message)") }
        if ops.isEmpty { print("No pending operations.") }
        for op in ops { print(line(op)) }
      }
      if !options.json, !ops.isEmpty, let terminal = ctx.prompter.terminal {
        let i = try terminal.choose("Run which operation?", ops.map(line))
        return try runOperation(ops[i])
      }
      if let e = errors.first?.error { throw ExitCode(ErrorReport(e).status.rawValue) }
    }
  }

  func say(_ s: String) { FileIO.writeError("tokenbridge: \(s)\n") }

  func entry(_ op: PendingOutOfBandOperation) -> Entry {
    var data: String?
    var error: String?
    switch op.payload {
    case .success(let p): data = p.data
    case .failure(let e): error = ErrorReport(OperationError.outOfBand(e)).message
    }
    return Entry(
      id: op.id, server: op.server, operation: op.operationName,
      creationTimeInEpochMillis: op.creationTimeInEpochMillis,
      dispatchChannel: op.dispatchChannel, dispatchInformation: op.dispatchInformation, data: data, error: error)
  }

  func line(_ op: PendingOutOfBandOperation) -> String {
    let when = Date(timeIntervalSince1970: Double(op.creationTimeInEpochMillis) / 1000).formatted(.iso8601)
    var s = "\(displayable(op.id))  \(op.operationName ?? "(unreadable payload)") at \(op.server)  \(when)"
    if let c = op.dispatchChannel { s += "  via \(displayable(c))" }
    if case .success(let p) = op.payload, let d = p.data { s += "  \"\(displayable(d))\"" }
    return s
  }

  /// Runs the operation's payload exactly as `tokenbridge oob --qr-text` runs a scanned QR code.
  func runOperation(_ op: PendingOutOfBandOperation) throws {
    var args = ["--qr-text=" + op.qrText]  // "=": a value that starts with "-" stays a value
    if let t = options.token { args += ["--token", t] }
    if options.json { args.append("--json") }
    if options.trace { args.append("--trace") }
    if let fd = options.pinFd { args += ["--pin-fd", String(fd)] }
    if options.yes { args.append("--yes") }
    args += ["--timeout", String(options.timeout)]
    if let p = options.prompt { args += ["--prompt", p] }
    if noOpen { args.append("--no-open") }
    let oob = try OutOfBand.parse(args)
    try oob.run()
  }
}
