import TokenBridge

/// Account and token choices in pinentry: each usable candidate in turn ("Use …?"; Cancel goes to the next).
package struct PinentryChoice: AccountSelector, AuthenticatorSelector {
  package let pinentry: Pinentry
  /// The lines every dialog of the request shows after its own (the calling app, the server).
  package let dialogContext: [String]

  package init(pinentry: Pinentry, dialogContext: [String]) {
    self.pinentry = pinentry
    self.dialogContext = dialogContext
  }

  package func ask(_ line: String) throws -> Bool {
    try pinentry.confirm(
      title: "TokenBridge", description: ([line] + dialogContext).joined(separator: "\n"), ok: "Use this",
      cancel: "Next")
  }

  package func selectAccount(from accounts: [AuthenticatorRecord]) throws -> AuthenticatorRecord {
    for a in accounts where try ask("Sign in as \(displayable(a.username)) with \(a.tokenID)?") { return a }
    throw InteractionError.cancelled
  }

  package func selectAccount(among candidates: [SelectionCandidate], usable: [AuthenticatorRecord]) throws
    -> AuthenticatorRecord
  {
    try selectAccount(from: usable)
  }

  package func selectAuthenticator(from items: [AuthenticatorItem]) throws -> AuthenticatorItem {
    for i in items where i.candidate.isUsable {
      if try ask("Register with \(displayable(i.token.name)) (\(i.token.id))?") { return i }
    }
    throw InteractionError.cancelled
  }
}
