import ArgumentParser
import Foundation
import TokenBridge

struct Enroll: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "enroll",
    abstract: "Enroll the token behind a udev device (run by tokenbridge-enroll@.service when one is plugged in).",
    discussion: """
      Reads "enroll" in the configuration ({"server": …, "username": …, "onInsert": "ask|auto|off", \
      "prefer": "fido2|piv"}); without it, does nothing. One run per physical token (a lock per USB device); \
      what was decided is remembered, so a replug asks nothing: --reset KEY forgets it.
      """)
  @OptionGroup var options: GlobalOptions
  @Option(help: "The udev device (%k): hidrawN, or a USB interface such as 1-1:1.1.") var device: String?
  @Option(help: "Forget what was decided for this token (the key printed by enroll, e.g. usb-1209-0001-20000001).")
  var reset: String?

  func validate() throws {
    guard (device == nil) != (reset == nil) else { throw ValidationError("give --device NAME or --reset KEY") }
    if let reset, reset.isEmpty { throw ValidationError("--reset wants the key enroll printed") }
  }

  func run() throws {
    try options.execute {
      let prompter = try options.prompter()
      if let reset {
        let forgot = try Enrollment.forget(reset)
        prompter.say(
          forgot
            ? "Forgot \(displayable(reset)): the next plug-in asks again."
            : "Nothing remembered for \(displayable(reset)).")
        return
      }
      let env = try UAFEnvironment()
      guard env.configuration.enroll != nil else {
        prompter.say("tokenbridge enroll: no \"enroll\" in the configuration; nothing done, nothing recorded.")
        return
      }
      var enrollment = try Enrollment(device: device!, settings: env.configuration.enroll)
      switch try enrollment.decide() {
      case .notConfigured:
        prompter.say("tokenbridge enroll: no \"enroll\" in the configuration; nothing done, nothing recorded.")
      case .off:
        prompter.say("tokenbridge enroll: onInsert is off; nothing done.")
      case .busy:
        return  // another udev event of the same token is enrolling it
      case .remembered(let key, let state):
        prompter.say("tokenbridge enroll: \(key) was \(state) before; `tokenbridge enroll --reset \(key)` asks again.")
      case .proceed(let key, let kind, let tokenID):
        let settings = env.configuration.enroll!
        let username = settings.username ?? Enrollment.loginName
        if settings.onInsert == .ask {
          guard try prompter.confirm(.enroll(token: tokenID, server: settings.server, username: username)) else {
            try enrollment.remember("declined")
            prompter.say("Not enrolled; \(key) will not be asked again (tokenbridge enroll --reset \(key)).")
            Notification.send("Token not enrolled", "\(tokenID) was declined.")
            return
          }
        }
        var scoped = options
        scoped.token = tokenID
        if kind == .fido2 {
          let chosen = try scoped.selection(includePUK: false, includeFIDO2: true).chooseAny(id: tokenID, selector: nil)
          if chosen.info.fido2?.pinIsSet == false {
            try PinOperation.setPIN.run(on: chosen, changer: prompter, interactionTimeout: options.timeout)
          }
        }
        let ctx = try UAFContext(scoped)
        let ops = try ctx.env.operations(
          server: settings.server, facetID: nil, tokens: try ctx.tokens(), authenticatorSelector: nil)
        let keyID = try ops.register(username: username, verifier: prompter)  // one reader of --pin-fd
        try enrollment.remember("enrolled")
        Notification.send("Token enrolled", "\(tokenID) is registered for \(username) at \(settings.server).")
        if options.json {
          print(
            Render.json(["result": "enrolled", "token": tokenID, "key": key, "keyID": keyID, "username": username]))
        } else {
          print(
            "Enrolled \(tokenID) (\(key)) for \(displayable(username)) at \(displayable(settings.server)) (KeyID \(keyID))."
          )
        }
      }
    }
  }
}

/// A desktop notification through notify-send when there is one (best effort: a service may have no desktop).
enum Notification {
  static func send(_ title: String, _ body: String) {
    let path = "/usr/bin/notify-send"
    guard FileManager.default.isExecutableFile(atPath: path) else { return }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = ["--app-name=TokenBridge", title, body]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try? p.run()
    p.waitUntilExit()
  }
}
