import SystemCrypto
import Foundation
import Synchronization

/// A CTAP 2.1 authenticator (getInfo, clientPIN protocols 1 and 2, makeCredential/getAssertion with ES256 and
/// hmac-secret and discoverable credentials, credential management, authenticatorConfig's setMinPINLength, reset),
/// written from the CTAP 2.1
/// specification; shares no code with the client.
public final class VirtualFIDO2Key: Sendable {
  /// The key's processor: everything a request reads and changes, held by one request at a time.
  let processor: Mutex<Processor>
  /// The touch or cancel a request may wait for, given by other threads meanwhile.
  let touches: TouchSignal

  public init(state: FIDO2State) {
    let touches = TouchSignal()
    self.touches = touches
    processor = Mutex(Processor(state: state, touches: touches))
  }

  public internal(set) var state: FIDO2State {
    get { processor.withLock { $0.state } }
    set { processor.withLock { $0.state = newValue } }
  }
  public var onStateChange: (@Sendable (FIDO2State) -> Void)? {
    get { processor.withLock { $0.onStateChange } }
    set { processor.withLock { $0.onStateChange = newValue } }
  }
  public var presence: UserPresence {
    get { processor.withLock { $0.presence } }
    set { processor.withLock { $0.presence = newValue } }
  }
  /// How it answers where firmwares differ (getInfo, clientPIN, credential management); `.ctap21` by default.
  public var profile: FIDO2Profile {
    get { processor.withLock { $0.profile } }
    set { processor.withLock { $0.profile = newValue } }
  }
  /// Leave out getPINRetries' optional powerCycleState whatever the profile says (as CanoKey and solo1 do).
  public var omitsPowerCycleState: Bool {
    get { processor.withLock { $0.omitsPowerCycleState } }
    set { processor.withLock { $0.omitsPowerCycleState = newValue } }
  }
  /// Seconds after power-up during which reset is allowed (CTAP 2.1 §6.6 suggests 10).
  public var resetWindow: Double {
    get { processor.withLock { $0.resetWindow } }
    set { processor.withLock { $0.resetWindow = newValue } }
  }
  var poweredAt: Date {
    get { processor.withLock { $0.poweredAt } }
    set { processor.withLock { $0.poweredAt = newValue } }
  }

  /// Replug: new key agreement key and token, the 3-failure block lifted, reset allowed for 10 s.
  public func powerCycle() { processor.withLock { $0.powerCycle() } }

  /// One CTAPHID_CBOR request (command byte ‖ CBOR) → status byte ‖ CBOR.
  public func handle(_ request: [UInt8]) -> [UInt8] { processor.withLock { $0.handle(request) } }

  /// `handle`, calling `waitingForTouch` while the request waits for a touch (the transport sends KEEPALIVE
  /// UP_NEEDED).
  func handle(_ request: [UInt8], waitingForTouch: @escaping @Sendable () -> Void) -> [UInt8] {
    processor.withLock { p in
      p.waitingForTouch = waitingForTouch
      defer { p.waitingForTouch = nil }
      return p.handle(request)
    }
  }

  enum TouchEvent { case touched, cancelled }

  /// Who sent the request that runs: the open of the device (a transport's port) and the CTAPHID channel.
  struct Requester: Equatable {
    let port: ObjectIdentifier
    let channel: UInt32
  }

  /// The request that runs (`serving`), whose touch wait a touch or cancel may end, and what came for it.
  final class TouchSignal: Sendable {
    let state = Mutex<(request: Requester?, event: TouchEvent?)>((nil, nil))
  }

  /// Runs one request for `requester`: touches and cancels count from its start to its end only, and a cancel
  /// counts only when it is this request's (`cancel(port:channel:)`). A touch or cancel with no request running
  /// is forgotten when the next one starts, as a key forgets a touch it did not ask for.
  func serving<T>(_ requester: Requester, _ body: () -> T) -> T {
    touches.state.withLock { $0 = (requester, nil) }
    defer { touches.state.withLock { $0 = (nil, nil) } }
    return body()
  }

  /// The simulated user touches the key.
  public func touchNow() { touches.state.withLock { $0.event = .touched } }

  /// CTAPHID_CANCEL arrived on `channel` of `port`, or (`channel` nil) the host closed `port`: the request that
  /// runs for them ends with KEEPALIVE_CANCEL. Anything else is passed over: a real key ignores a CANCEL on
  /// another channel or with no request running (CTAP 2.1 §11.2.9.1.5), and closing one open of a HID device
  /// (another program's) tells the key nothing.
  func cancel(port: ObjectIdentifier, channel: UInt32?) {
    touches.state.withLock {
      guard let r = $0.request, r.port == port, channel.map({ $0 == r.channel }) ?? true else { return }
      $0.event = .cancelled
    }
  }
}

extension VirtualFIDO2Key {
  /// What the key keeps and does for one request at a time (in `VirtualFIDO2Key.processor`).
  final class Processor {
    var state: FIDO2State
    var onStateChange: (@Sendable (FIDO2State) -> Void)?
    var presence: UserPresence = .auto
    var profile: FIDO2Profile = .ctap21
    var omitsPowerCycleState = false
    var resetWindow: Double = 10
    /// Called while waiting for a touch (the transport sends KEEPALIVE UP_NEEDED).
    var waitingForTouch: (@Sendable () -> Void)?
    let touches: TouchSignal

    // Volatile: lost at power cycle ("replug").
    var keyAgreement = P256.KeyAgreement.PrivateKey()
    var pinToken = randomBytes(32)
    var tokenPermissions: UInt8 = 0
    var tokenRPID: String?
    var consecutiveFailures = 0
    var powerCycleRequired = false
    var poweredAt = Date()
    /// Credential management enumerations in progress (the items the "next" subcommands still return).
    var rpQueue: [CBOR] = []
    var credentialQueue: [CBOR] = []

    init(state: FIDO2State, touches: TouchSignal) {
      self.state = state
      self.touches = touches
    }

    /// Replug: new key agreement key and token, the 3-failure block lifted, reset allowed for 10 s.
    func powerCycle() {
      keyAgreement = P256.KeyAgreement.PrivateKey()
      pinToken = randomBytes(profile.pinTokenLength)
      tokenPermissions = 0
      tokenRPID = nil
      consecutiveFailures = 0
      powerCycleRequired = false
      poweredAt = Date()
      rpQueue = []
      credentialQueue = []
    }

    func changed() { onStateChange?(state) }

    /// One CTAPHID_CBOR request (command byte ‖ CBOR) → status byte ‖ CBOR.
    func handle(_ request: [UInt8]) -> [UInt8] {
      guard let command = request.first else { return [CTAP2Status.invalidLength.rawValue] }
      var params: CBOR = .map([])
      if request.count > 1 {
        guard let p = try? CBOR.decode(Array(request[1...])) else { return [CTAP2Status.invalidCBOR.rawValue] }
        guard case .map = p else { return [CTAP2Status.cborUnexpectedType.rawValue] }
        params = p
      }
      let result: Result<CBOR?, CTAP2Error>
      guard profile.commands.contains(command) else { return [CTAP2Status.invalidCommand.rawValue] }
      if profile.lockoutRefusesEverything, [0x01, 0x02, 0x0A, 0x41].contains(command), let e = lockout() {
        return [e.rawValue]
      }
      switch command {
      case 0x04: result = .success(info())
      case 0x06: result = clientPIN(params)
      case 0x01: result = makeCredential(params)
      case 0x02: result = getAssertion(params)
      case 0x07: result = reset()
      case 0x0A, 0x41: result = credentialManagement(params)
      case 0x0B: result = touch().map { nil }
      case 0x0D: result = configSupported ? config(params) : .failure(.init(.invalidCommand))
      default: result = .failure(.init(.invalidCommand))
      }
      switch result {
      case .success(let body): return [0x00] + (body?.encoded() ?? [])
      case .failure(let e): return [e.status.rawValue]
      }
    }

    func info() -> CBOR {
      var options = profile.options.map { CBORPair(key: .text($0.0), value: .bool($0.1)) }
      options.append(CBORPair(key: .text("clientPin"), value: .bool(state.pinHash != nil)))
      var info: [CBORPair] = [
        CBORPair(key: .int(1), value: .array(profile.versions.map { .text($0) })),
        CBORPair(key: .int(2), value: .array([.text("hmac-secret")])),
        CBORPair(key: .int(3), value: .bytes(Array(state.aaguid))),
        CBORPair(key: .int(4), value: .map(options)),
        CBORPair(key: .int(5), value: .int(1200)),
        CBORPair(key: .int(6), value: .array(profile.pinProtocols.map { .int($0) })),
      ]
      if let limits = profile.listLimits {
        info.append(CBORPair(key: .int(7), value: .int(limits.count)))
        info.append(CBORPair(key: .int(8), value: .int(limits.idLength)))
      }
      if profile.ctap21InfoFields {
        info.append(CBORPair(key: .int(12), value: .bool(state.forcePINChange)))
        info.append(CBORPair(key: .int(13), value: .int(state.minPINLength)))
        info.append(CBORPair(key: .int(0x14), value: .int(FIDO2State.maxResident - state.residentCount)))
      }
      return .map(info)
    }

    /// The firmware-wide lock of `FIDO2Profile.lockoutRefusesEverything`: the PIN blocked, or 3 wrong in a row.
    func lockout() -> CTAP2Status? {
      if state.pinHash != nil && state.pinRetries == 0 { return .pinBlocked }
      return powerCycleRequired ? .pinAuthBlocked : nil
    }

    /// Waits for the simulated touch. With `.wait`, KEEPALIVE UP_NEEDED goes out every 100 ms until a touch,
    /// a cancel (KEEPALIVE_CANCEL) or 30 s (USER_ACTION_TIMEOUT). A touch or cancel that came since the request
    /// began (`serving`) counts: one that comes right after the first KEEPALIVE is not lost.
    func touch() -> Result<Void, CTAP2Error> {
      // Called without `serving` (a request handed to `handle` directly): only what comes from here on counts.
      touches.state.withLock { if $0.request == nil { $0.event = nil } }
      waitingForTouch?()
      switch presence {
      case .auto: return .success(())
      case .deny: return .failure(.init(.operationDenied))
      case .timeout: return .failure(.init(.userActionTimeout))
      case .wait, .waitIgnoringCancel:
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
          switch touches.state.withLock({ $0.event }) {
          case .touched?: return .success(())
          case .cancelled? where presence == .wait: return .failure(.init(.keepaliveCancel))
          case nil, .cancelled?:
            Thread.sleep(forTimeInterval: 0.1)
            waitingForTouch?()
          }
        }
        return .failure(.init(.userActionTimeout))
      }
    }

    func reset() -> Result<CBOR?, CTAP2Error> {
      // Allowed only within 10 s of power-up (CTAP 2.1 §6.6), after a touch.
      guard Date().timeIntervalSince(poweredAt) <= resetWindow else { return .failure(.init(.notAllowed)) }
      if case .failure(let e) = touch() { return .failure(e) }
      let aaguid = state.aaguid
      state = .factory()
      state.aaguid = aaguid
      powerCycle()
      changed()
      return .success(nil)
    }
  }
}

struct CTAP2Error: Error {
  let status: CTAP2Status
  init(_ s: CTAP2Status) { status = s }
}
