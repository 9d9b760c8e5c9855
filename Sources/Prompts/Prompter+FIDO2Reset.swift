import Platform
import TokenBridge
import TokenDevices

/// What `fido2 reset` asks and says: the key and what the reset destroys, the typed key id, the replug.
extension Prompter: FIDO2ResetInteraction {
  /// A typed answer (echoed on a terminal; a line of --pin-fd for scripts).
  package func typedAnswer(_ prompt: String) throws -> String {
    if let reader {
      guard let line = try reader.next() else { throw InputError.noMoreInput(expected: .answer) }
      return Trim.whitespace(String(decoding: line.bytes, as: UTF8.self), newlines: false)
    }
    guard let terminal else { throw InputError.noTerminal(expected: .answer) }
    terminal.write(prompt)
    var answer = try terminal.readLine(echo: true)
    defer { wipe(&answer) }
    return Trim.whitespace(String(decoding: answer, as: UTF8.self), newlines: false)
  }

  package func confirmReset(_ plan: FIDO2ResetPlan) throws -> String {
    let t = plan.token
    say("Reset \(displayable(t.name)) \(t.id)")
    say("  AAGUID: \(plan.aaguid)")
    say("  serial: \(plan.serial ?? "none reported")")
    if let r = t.reader { say("  device: \(displayable(r))") }
    say("The reset erases every credential on this key and its PIN. It destroys:")
    say(
      "  - its discoverable credentials: they cannot be listed without the PIN (if the PIN still works: "
        + "tokenbridge fido2 credentials --token \(t.id))")
    if plan.dependents.isEmpty {
      say("  - no UAF registration in local data depends on this key")
    } else {
      say("  - these UAF registrations (they are deregistered at their servers afterwards):")
      for r in plan.dependents {
        say("      \(displayable(r.username)) at \(displayable(r.server)) (AAID \(r.aaid), KeyID \(r.keyID))")
      }
    }
    return try typedAnswer("To reset it, type the key id (\(t.id)): ")
  }

  package func replugNeeded(_ plan: FIDO2ResetPlan) {
    say("Remove the key \(plan.token.id) now, then insert it again. Waiting for it…")
    if plan.sameKeyCheck == .aaguidOnly {
      say(
        "(No credential of ours is on it, so the key that comes back is recognised by its AAGUID only: keep other "
          + "keys of the same model unplugged.)")
    }
  }

  package func keyIsBack(_ plan: FIDO2ResetPlan, canceller: Canceller) {
    Interrupts.shared.cancel(with: [canceller])
    say("The key is back (same key). Resetting…")
  }

  package func touchToReset(_ plan: FIDO2ResetPlan) { say("Touch your key (\(plan.token.id)) to reset it.") }
}
