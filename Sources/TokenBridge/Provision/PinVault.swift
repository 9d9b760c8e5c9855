import CKeyring
import Platform

#if canImport(Glibc)
  import Glibc
#endif

/// Where a fresh PIN waits between the moment it is set on a token and the end of its row (the registration needs
/// it, and a run killed in between must find it again): the kernel's user keyring (keyrings(7): memory only, the
/// user's own, gone at reboot), as a "user" key named `tokenbridge:provision:<journal nonce>:<row>` that expires
/// after `lifetime` seconds; only where the kernel refuses (no keyring in this container, quota) in the journal itself
/// (0600, `secure_delete`). Either way it is erased when the row is done.
enum PinVault {
  enum Place: String, Sendable { case keyring, journal }

  /// A week: a desk resumes a killed run the same day; a PIN must not wait in memory for longer.
  static let lifetime: UInt32 = 7 * 24 * 3600

  static func name(_ nonce: String, _ number: Int) -> String { "tokenbridge:provision:\(nonce):\(number)" }

  @discardableResult
  static func hold(_ pin: [UInt8], nonce: String, number: Int, journal: ProvisionJournal) throws(ProvisionError)
    -> Place
  {
    let key = pin.withUnsafeBytes {
      tb_keyring_add(name(nonce, number), $0.baseAddress, $0.count, TB_KEY_SPEC_USER_KEYRING)
    }
    if key > 0 {
      _ = tb_keyring_set_timeout(key, lifetime)
      return .keyring
    }
    try journal.holdPIN(number, pin)
    return .journal
  }

  /// The PIN held for the row (nil: none).
  static func take(nonce: String, number: Int, journal: ProvisionJournal) throws(ProvisionError) -> Secret? {
    let key = tb_keyring_search(TB_KEY_SPEC_USER_KEYRING, name(nonce, number))
    if key > 0 {
      var buffer = [UInt8](repeating: 0, count: 256)
      let n = buffer.withUnsafeMutableBytes { tb_keyring_read(key, $0.baseAddress, $0.count) }
      if n > 0 && n <= buffer.count {
        let secret = Secret(Array(buffer[..<n]))
        wipe(&buffer)
        return secret
      }
      wipe(&buffer)
    }
    return try journal.heldPIN(number).map { Secret($0) }
  }

  /// Erases the row's PIN wherever it is held.
  static func drop(nonce: String, number: Int, journal: ProvisionJournal) throws(ProvisionError) {
    let key = tb_keyring_search(TB_KEY_SPEC_USER_KEYRING, name(nonce, number))
    if key > 0 { _ = tb_keyring_invalidate(key) }
    try journal.dropHeldPIN(number)
  }
}

/// Seals PINs with `age` (age-encryption.org/v1) to the operator's recipient, ASCII-armored: the report carries the
/// ciphertext, only the recipient's identity opens it. The PIN goes to age on its stdin, never on its argv.
struct PinSealer: Sendable {
  let program: String
  let recipient: String

  /// `age` from PATH, and the recipient checked by sealing nothing to it (age refuses a recipient it cannot read).
  init(recipient: String) throws(ProvisionError) {
    guard let program = Self.find("age") else { throw .ageMissing }
    guard !recipient.hasPrefix("-"), !recipient.isEmpty,
      !recipient.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
    else { throw .badRecipient("not a recipient") }
    self.program = program
    self.recipient = recipient
    guard let (status, _) = Subprocess.run(program, ["-a", "-r", recipient], input: []) else { throw .ageMissing }
    guard status == 0 else {
      // age's own complaint, for the message: run once more with its stderr read (it never holds a secret here).
      throw .badRecipient("age exited with status \(status); check the recipient (age1…, ssh-ed25519 …)")
    }
  }

  /// The armored ciphertext of `pin`.
  func seal(_ pin: [UInt8]) throws(ProvisionError) -> String {
    guard let (status, output) = Subprocess.run(program, ["-a", "-r", recipient], input: pin) else {
      throw .ageMissing
    }
    guard status == 0, let text = String(validating: output, as: UTF8.self),
      text.hasPrefix("-----BEGIN AGE ENCRYPTED FILE-----")
    else { throw .sealFailed(status: status) }
    return text
  }

  static func find(_ name: String) -> String? {
    for dir in (Environment.value("PATH") ?? "/usr/bin:/bin").split(separator: ":") {
      let path = "\(dir)/\(name)"
      if access(path, X_OK) == 0 { return path }
    }
    return nil
  }
}
