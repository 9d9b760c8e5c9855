import ArgumentParser
import FoundationEssentials
import Platform
import TokenBridge

struct Device: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "device",
    abstract: "This device's information at the servers: change its name or push token, check it, sync it.",
    subcommands: [DeviceChange.self, DeviceCheck.self, DeviceSync.self])
}

/// One error, as `--json` lists it.
struct ErrorEntry: Encodable {
  var server: String
  var what: String?
  var error: String
  var exitCode: Int32

  init(server: String, what: String? = nil, _ e: DeviceServiceError) {
    let r = ErrorReport(e)
    self.server = server
    self.what = what
    error = r.message
    exitCode = r.status.rawValue
  }
}

struct DeviceChange: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "change",
    abstract: "Set the device name and/or push token (FCM registration token) at every server, then here.")
  @OptionGroup var options: GlobalOptions
  @Option(help: "The new device name (unique among the user's devices at each server).")
  var name: String?
  @Option(help: "The new push token (FCM registration token).")
  var pushToken: String?
  @Flag(help: "Remove the push token (no push notifications).")
  var disablePush = false

  func validate() throws {
    guard name != nil || pushToken != nil || disablePush else {
      throw ValidationError("give --name, --push-token or --disable-push")
    }
    if pushToken != nil && disablePush { throw ValidationError("--push-token and --disable-push exclude each other") }
    if let name {
      guard !name.isEmpty, name.utf8.count <= 256,
        !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
      else { throw ValidationError("--name must be 1-256 bytes without control characters") }
    }
    if let pushToken {
      guard !pushToken.isEmpty, pushToken.utf8.count <= 4096,
        !pushToken.unicodeScalars.contains(where: {
          $0.properties.isWhitespace || $0.properties.generalCategory == .control
        })
      else { throw ValidationError("--push-token must be 1-4096 bytes without spaces or control characters") }
    }
  }

  struct Output: Encodable {
    var updated: [String]
    var errors: [ErrorEntry]
  }

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let push: PushTokenChange = disablePush ? .disable : pushToken.map { .set($0) } ?? .keep
      let results = try ctx.env.device.change(name: name, pushToken: push)
      let failed = results.filter { $0.error != nil }
      if options.json {
        print(
          Render.json(
            Output(
              updated: results.filter { $0.error == nil }.map(\.server),
              errors: failed.map { ErrorEntry(server: $0.server, what: $0.what, $0.error!) })))
      } else {
        for r in results {
          if let e = r.error {
            FileIO.writeError("tokenbridge: not updated at \(r.server): \(ErrorReport(e).message)\n")
          } else {
            print("Updated at \(r.server): \(displayable(r.what)).")
          }
        }
        print("Device information changed on this device.")
      }
      if let e = failed.first?.error { throw ExitCode(ErrorReport(e).status.rawValue) }
    }
  }
}

/// A mismatch as listed: its kind and fields.
func mismatchLine(_ m: DeviceInformationMismatch) -> String {
  m.kind + ": " + m.fields.keys.sorted().map { "\($0)=\(displayable(m.fields[$0]!))" }.joined(separator: " ")
}

func mismatchJSON(_ m: DeviceInformationMismatch) -> [String: String] {
  var f = m.fields
  f["kind"] = m.kind
  return f
}

struct DeviceCheck: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "check",
    abstract: "Compare this device's registrations and dispatch targets with each server's (nothing is changed).")
  @OptionGroup var options: GlobalOptions
  @Option(help: "Also check this server (default: every server this device has accounts at).")
  var server: String?

  struct Output: Encodable {
    var servers: [String]
    var mismatches: [[String: String]]
    var errors: [ErrorEntry]
  }

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let device = ctx.env.device
      let results = try device.check(servers: try device.servers(including: server))
      if options.json {
        print(
          Render.json(
            Output(
              servers: results.map(\.server), mismatches: results.flatMap(\.mismatches).map(mismatchJSON),
              errors: results.compactMap { r in r.error.map { ErrorEntry(server: r.server, $0) } })))
      } else {
        if results.isEmpty { print("No server to check: this device has no accounts.") }
        for r in results {
          if let e = r.error {
            FileIO.writeError("tokenbridge: could not check \(r.server): \(ErrorReport(e).message)\n")
          } else if r.mismatches.isEmpty {
            print("\(r.server): no mismatch.")
          } else {
            print("\(r.server): \(r.mismatches.count) mismatch(es):")
            for m in r.mismatches { print("  " + mismatchLine(m)) }
          }
        }
      }
      if let e = results.compactMap(\.error).first { throw ExitCode(ErrorReport(e).status.rawValue) }
    }
  }
}

struct DeviceSync: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "sync",
    abstract: "Fix the mismatches device check finds, best-effort; lists what it deletes on which side and asks first.")
  @OptionGroup var options: GlobalOptions
  @Option(help: "Also sync with this server (default: every server this device has accounts at).")
  var server: String?

  struct Step: Encodable {
    var server: String
    var action: String
    var deletes: Bool
    var done: Bool
    var error: String?
    var exitCode: Int32?
  }
  struct Output: Encodable {
    var steps: [Step]
    var errors: [ErrorEntry]
  }

  func run() throws {
    try options.execute {
      let ctx = try UAFContext(options)
      let device = ctx.env.device
      let checks = try device.check(servers: try device.servers(including: server))
      let checkErrors = checks.compactMap { r in r.error.map { (r.server, $0) } }
      for (s, e) in checkErrors where !options.json {
        FileIO.writeError("tokenbridge: could not check \(s): \(ErrorReport(e).message)\n")
      }
      let actions = DeviceInformationOperations.plan(checks.flatMap(\.mismatches))
      if actions.isEmpty {
        if options.json {
          print(Render.json(Output(steps: [], errors: checkErrors.map { ErrorEntry(server: $0.0, $0.1) })))
        } else {
          print("Nothing to sync.")
        }
      } else {
        ctx.prompter.say("The sync will:")
        for a in actions { ctx.prompter.say("  " + DeviceInformationOperations.describe(a)) }
        let deletions = actions.filter(\.deletes).count
        if deletions > 0, !(try ctx.prompter.confirm(.deviceSync(deletions: deletions))) {
          throw OperationError.cancelled
        }
        let results = try device.sync(actions, checks: checks)
        if options.json {
          print(
            Render.json(
              Output(
                steps: zip(actions, results).map { a, r in
                  Step(
                    server: r.server, action: r.what, deletes: a.deletes, done: r.error == nil,
                    error: r.error.map { ErrorReport($0).message },
                    exitCode: r.error.map { ErrorReport($0).status.rawValue })
                }, errors: checkErrors.map { ErrorEntry(server: $0.0, $0.1) })))
        } else {
          for r in results {
            if let e = r.error {
              FileIO.writeError("tokenbridge: failed: \(r.what): \(ErrorReport(e).message)\n")
            } else {
              print("Done: \(r.what).")
            }
          }
        }
        if let e = results.compactMap(\.error).first { throw ExitCode(ErrorReport(e).status.rawValue) }
      }
      if let e = checkErrors.first?.1 { throw ExitCode(ErrorReport(e).status.rawValue) }
    }
  }
}
