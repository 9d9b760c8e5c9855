import Platform

/// This machine: the configuration, the local data, and the system libraries loaded at first use.
extension ErrorReport {
  static func localData(_ e: LocalDataError) -> ErrorReport {
    switch e {
    case .unavailable(let path, let reason):
      return .init(status: .localData, message: "Local data \(path) cannot be used: \(reason)")
    case .notFound(let k): return .init(status: .unknownKey, message: "No local registration with KeyID \(shown(k)).")
    case .insecure(let path, let reason): return .init(status: .localData, message: insecure(path, reason))
    case .libraryMissing(let l): return library(l)
    }
  }

  /// A system library loaded at first use (not at start-up) is missing or too old: which, why, what to install.
  static func library(_ l: LibraryUnavailable) -> ErrorReport {
    let needs =
      switch l.library {
      case .fido2: "FIDO2 keys need it"
      case .pcsclite: "smart cards (PC/SC) need it"
      case .sqlite3: "the local data needs it"
      case .usb: "USB hotplug needs it"
      case .crypto: "hashes, signatures and the PIV management key need it"
      case .systemd: "the desktop service (tokenbridge serve) needs it"
      }
    return .init(
      status: .failure,
      message: "\(l.library.soname) cannot be loaded (\(shown(l.reason))); \(needs) (Debian: apt install "
        + "\(l.library.debianPackage)). Nothing was done.")
  }

  /// Local data refused because someone else could change it: what was found and how to fix it.
  static func insecure(_ path: String, _ reason: LocalDataError.InsecureReason) -> String {
    let found: String
    let fix: String
    switch reason {
    case .symbolicLink:
      found = "is a symbolic link"
      fix = "replace the link with the real directory or file, or set XDG_DATA_HOME to a directory of yours"
    case .notADirectory: (found, fix) = ("is not a directory", "move it away; it is made again (0700)")
    case .notARegularFile: (found, fix) = ("is not a regular file", "move it away")
    case .writableByOthers(let mode):
      found = "is writable by other users (mode \(String(mode, radix: 8)))"
      fix = "run: chmod go-w '\(path)'"
    case .ownedByAnotherUser(let uid):
      found = "belongs to another user (uid \(uid))"
      fix = "use a data directory of your own (XDG_DATA_HOME), or chown it to yourself if it is yours"
    }
    return "Local data \(path) \(found), so it is not used. To fix: \(fix)."
  }

  static func configuration(_ c: ConfigurationError) -> ErrorReport {
    switch c {
    case .noFacetID:
      return .init(
        status: .usage, message: "uaf process needs --facet-id (or \"facetID\" in the configuration).")
    case .noServer:
      return .init(
        status: .configuration, message: "No server: pass --server URL or set \"server\" in the configuration file.")
    case .insecureServer(let s):
      return .init(
        status: .configuration,
        message: "\(shown(s)): only https:// servers (http:// only on this machine's loopback: 127.0.0.0/8, ::1, "
          + "localhost).")
    case .invalidServer(let s): return .init(status: .configuration, message: "\(shown(s)) is not a server URL.")
    case .unreadable(let path, let reason):
      return .init(status: .configuration, message: "The configuration \(path) cannot be read: \(reason).")
    case .notJSON(let path):
      return .init(
        status: .configuration, message: "The configuration \(path) is not a JSON object; fix or remove the file.")
    case .unknownKey(let path, let key, let known):
      return .init(
        status: .configuration,
        message: "The configuration \(path) has an unknown key \"\(shown(key))\". Known keys: "
          + known.joined(separator: ", ") + ".")
    case .invalidValue(let path, let key, let value, let allowed):
      return .init(
        status: .configuration,
        message: "The configuration \(path): \"\(key)\" is \(shown(value)); allowed: \(allowed).")
    }
  }
}
