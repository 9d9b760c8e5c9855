import TokenDevices
import UAFCore

// The vocabulary front ends show: value types of the lower layers, re-exported so a front end never imports the
// device layer or the protocol core (ARCHITECTURE.md). Operations on devices stay behind the library's own API;
// a front end's own I/O (standard streams, environment, subprocesses) comes from `Platform`.
public typealias TokenInfo = TokenDevices.TokenInfo
public typealias TokenKind = TokenDevices.TokenKind
public typealias PINStatus = TokenDevices.PINStatus
public typealias PINKind = TokenDevices.PINKind
public typealias PIVSlot = TokenDevices.PIVSlot
public typealias FIDO2Info = TokenDevices.FIDO2Info
public typealias TraceSink = TokenDevices.TraceSink
public typealias ProtectionStatus = UAFCore.ProtectionStatus
public typealias PinValidationError = UAFCore.PinValidationError
public typealias CredentialPolicy = UAFCore.CredentialPolicy
public typealias ManagementKeySource = TokenDevices.ManagementKeySource
public typealias Canceller = TokenDevices.FIDO2Canceller
/// A FIDO2 key chosen by `TokenSelection.chooseFIDO2`, handed back to the library's FIDO2 operations.
public typealias DiscoveredFIDO2 = TokenDevices.DiscoveredFIDO2
public typealias FIDO2ResidentCredential = TokenDevices.FIDO2ResidentCredential

/// Text that did not come from the user (a server, a token), made safe to show on a terminal.
public func displayable(_ s: String) -> String { UntrustedText.displayable(s) }
/// The Client API's discover() answer and its Authenticator dictionary (UAF Client API v1.1 §3.1.2-3.1.3).
public typealias DiscoveryData = UAFCore.DiscoveryData
public typealias DiscoveredAuthenticator = UAFCore.DiscoveredAuthenticator
public typealias UAFVersion = UAFCore.Version
