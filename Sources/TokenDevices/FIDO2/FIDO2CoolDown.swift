import FoundationEssentials
import Glibc
import Platform

/// What this user's own programs learnt about a FIDO2 key's PIN cool-down since it was plugged in.
///
/// CTAP 2.1 §6.5.5.5 (and CTAP 2.0 §5.5.5): after three wrong PINs in a row the key refuses every PIN with
/// CTAP2_ERR_PIN_AUTH_BLOCKED until it is power-cycled; getPINRetries may tell it (`powerCycleState`, optional, CTAP
/// 2.1), but libfido2 1.12 does not pass that field on and many keys leave it out (solo1 4.1.5, CanoKey; see
/// HardwareNotes.md). So the cool-down is derived from what can be seen, kept per key and per plug-in (the
/// device node's or socket's inode and change time: a replug makes a new node):
/// - a wrong PIN of ours lowers the tries by one: one more mismatch in a row;
/// - tries read lower than at the last reading in the same plug-in: that many mismatches in a row happened since,
///   whoever made them (a correct PIN would have put the tries back to the maximum first);
/// - tries read higher: a correct PIN was given since: the run restarts (unknown mismatches after it are not
///   counted: we say nothing we do not know);
/// - PIN_AUTH_BLOCKED from the key: in its cool-down, whatever the count;
/// - a PIN the key took (or a reset): no mismatch in a row.
/// Three or more in a row means the key takes no PIN until it is re-inserted. A cool-down begun by a program that
/// this user's tokenbridge never saw the key before cannot be known: it is then found by the key's refusal of the
/// next PIN (PIN_AUTH_BLOCKED, which spends no try).
///
/// The records live in `$XDG_RUNTIME_DIR/tokenbridge/fido2` (else `/tmp/tokenbridge-<uid>/fido2`), one small file
/// per key path, in a directory of mode 0700 owned by the user; a record that cannot be read or written is as
/// none (nothing is shown that is not known).
public struct FIDO2CoolDown: Sendable {
  /// Where the records are kept; nil keeps none (every reading starts afresh).
  public let directory: String?

  public init(directory: String?) { self.directory = directory }

  /// The records of the user running this process.
  public static var forThisUser: FIDO2CoolDown {
    if let run = Environment.value("XDG_RUNTIME_DIR"), run.hasPrefix("/") {
      return FIDO2CoolDown(directory: run + "/tokenbridge/fido2")
    }
    return FIDO2CoolDown(directory: "/tmp/tokenbridge-\(getuid())/fido2")
  }

  /// Mismatches in a row after which CTAP keys take no PIN until re-inserted (CTAP 2.1 §6.5.5.5).
  public static let mismatchesBeforeCoolDown = 3

  /// One key's record: the plug-in it is about, the tries last read (nil: not known since a PIN was taken), and
  /// the mismatches in a row known since it was plugged in.
  struct Record: Equatable {
    var plugIn: String
    var retries: Int?
    var mismatches: Int

    var text: String { "\(plugIn) \(retries.map(String.init) ?? "-") \(mismatches)\n" }

    init(plugIn: String, retries: Int?, mismatches: Int) {
      self.plugIn = plugIn
      self.retries = retries
      self.mismatches = mismatches
    }

    init?(_ text: String) {
      let parts = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
      guard parts.count == 3, let m = Int(parts[2]), m >= 0
      else { return nil }
      plugIn = parts[0]
      retries = parts[1] == "-" ? nil : Int(parts[1])
      mismatches = m
    }
  }

  /// Whether the key at `ref` is known to be in its cool-down in its current plug-in.
  public func required(for ref: FIDO2DeviceRef) -> Bool {
    guard let plugIn = Self.plugIn(ref.path), let r = load(ref), r.plugIn == plugIn else { return false }
    return r.mismatches >= Self.mismatchesBeforeCoolDown
  }

  /// A reading of the key's PIN tries.
  public func observe(retries: Int, for ref: FIDO2DeviceRef) {
    update(ref) { r in
      if let last = r.retries {
        if retries < last { r.mismatches += last - retries } else if retries > last { r.mismatches = 0 }
      }
      r.retries = retries
    }
  }

  /// The key refused a PIN with PIN_AUTH_BLOCKED: in its cool-down until re-inserted.
  public func authBlocked(for ref: FIDO2DeviceRef) {
    update(ref) { r in r.mismatches = max(r.mismatches, Self.mismatchesBeforeCoolDown) }
  }

  /// The key took a PIN (or was reset): no mismatch in a row, and the tries are back at the maximum, which CTAP
  /// does not tell (the next reading is the new reference).
  public func pinAccepted(for ref: FIDO2DeviceRef) {
    update(ref) { r in
      r.mismatches = 0
      r.retries = nil
    }
  }

  func update(_ ref: FIDO2DeviceRef, _ change: (inout Record) -> Void) {
    guard let plugIn = Self.plugIn(ref.path) else { return }
    let stored = load(ref)
    var r = stored.flatMap { $0.plugIn == plugIn ? $0 : nil } ?? Record(plugIn: plugIn, retries: nil, mismatches: 0)
    change(&r)
    if r != stored { save(r, for: ref) }  // written only when it says something new
  }

  /// This plug-in of the device at `path`: its node's (or socket's) device, inode and change time. A replugged
  /// key gets a new node (hidraw) or socket (a virtual key), so a record of an earlier plug-in no longer applies.
  static func plugIn(_ path: String) -> String? {
    var st = stat()
    guard stat(path, &st) == 0 else { return nil }
    return "\(st.st_dev):\(st.st_ino):\(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec)"
  }

  /// The record's file: the key's path made a file name (FNV-1a, 64 bits, in hex).
  func file(for ref: FIDO2DeviceRef) -> String? {
    guard let directory else { return nil }
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in ref.path.utf8 {
      h ^= UInt64(b)
      h = h &* 0x100_0000_01b3
    }
    return directory + "/" + String(h, radix: 16)
  }

  func load(_ ref: FIDO2DeviceRef) -> Record? {
    guard let file = file(for: ref), ownDirectory(create: false),
      let bytes = FileIO.read(path: file, limit: 256)
    else { return nil }
    return Record(String(decoding: bytes, as: UTF8.self))
  }

  /// Written to a temporary file and renamed into place: a reader sees the old record or the new one.
  func save(_ r: Record, for ref: FIDO2DeviceRef) {
    guard let file = file(for: ref), ownDirectory(create: true) else { return }
    let temporary = file + ".\(getpid())"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return }
    let written = FileIO.write(fd, Array(r.text.utf8))
    close(fd)
    if !written || rename(temporary, file) != 0 { unlink(temporary) }
  }

  /// Whether the records' directory is there (made, with its parent, when `create`), a real directory owned by
  /// this user and closed to others (0700): records in a directory someone else controls are not trusted.
  func ownDirectory(create: Bool) -> Bool {
    guard let directory else { return false }
    if create {
      let parent = PathString.deletingLast(directory)
      if mkdir(parent, 0o700) != 0, errno != EEXIST { return false }
      if mkdir(directory, 0o700) != 0, errno != EEXIST { return false }
    }
    for path in [PathString.deletingLast(directory), directory] {
      var st = stat()
      guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o077 == 0
      else { return false }
    }
    return true
  }
}
