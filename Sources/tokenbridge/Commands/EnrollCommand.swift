import ArgumentParser
import FoundationEssentials
import Prompts
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
  @Option(help: "The udev device (%k): hidrawN, or a USB interface such as 1-1:1.1.")
  var device: String?
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
      let ctx = try UAFContext(options)
      var enrollment = try Enrollment(device: device!, settings: ctx.env.configuration.enroll)
      let result = try enrollment.run(
        environment: ctx.env, interaction: prompter, interactionTimeout: options.timeout, trace: options.traceSink,
        touchCue: { info in prompter.say("Touch your key (\(info.id)).") })
      render(result, prompter)
    }
  }

  func render(_ result: EnrollmentResult, _ prompter: Prompter) {
    switch result {
    case .notConfigured:
      prompter.say("tokenbridge enroll: no \"enroll\" in the configuration; nothing done, nothing recorded.")
    case .off:
      prompter.say("tokenbridge enroll: onInsert is off; nothing done.")
    case .busy:
      return  // another udev event of the same token is enrolling it
    case .remembered(let key, let state):
      prompter.say("tokenbridge enroll: \(key) was \(state) before; `tokenbridge enroll --reset \(key)` asks again.")
    case .declined(let key, _):
      prompter.say("Not enrolled; \(key) will not be asked again (tokenbridge enroll --reset \(key)).")
    case .enrolled(let key, let tokenID, let keyID, let username, let server):
      if options.json {
        print(
          Render.json(["result": "enrolled", "token": tokenID, "key": key, "keyID": keyID, "username": username]))
      } else {
        print("Enrolled \(tokenID) (\(key)) for \(displayable(username)) at \(displayable(server)) (KeyID \(keyID)).")
      }
    }
  }
}
