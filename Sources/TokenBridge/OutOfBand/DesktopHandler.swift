import FoundationEssentials
import Platform
import TokenDevices

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The desktop integration of out-of-band links: a `.desktop` entry registering `x-scheme-handler/tokenbridge`,
/// so that a clicked `tokenbridge://x-callback-url/…` link runs `tokenbridge oob <link>` in a terminal (the
/// confirmation and the PIN are asked there). Installed per user under `$XDG_DATA_HOME/applications`, made the
/// default handler with `xdg-mime`, indexed with `update-desktop-database` (Desktop Entry Specification 1.4).
public struct DesktopHandler: Sendable {
  public static let fileName = "tokenbridge.desktop"
  public static let mimeType = "x-scheme-handler/tokenbridge"

  /// The tokenbridge executable the entry runs (absolute).
  public var executable: String

  public init(executable: String) { self.executable = executable }

  /// The running executable's absolute path (`/proc/self/exe`), else `argv[0]` as given.
  public static var currentExecutable: String {
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  }

  /// The `.desktop` file's text. The executable must be an absolute path without control characters (a desktop
  /// entry value is one line): else `InputError.file(path, EINVAL)`.
  public func entry() throws(OperationError) -> String {
    guard executable.hasPrefix("/"), !executable.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
    else { throw .input(.file(path: displayable(executable), errno: EINVAL)) }
    return """
      [Desktop Entry]
      Type=Application
      Version=1.4
      Name=TokenBridge
      GenericName=Out-of-band authentication
      Comment=Sign in with a PIV smart card or a FIDO2 key from a tokenbridge:// link
      Exec=\(Self.execQuoted(executable)) oob %u
      Terminal=true
      NoDisplay=true
      MimeType=\(Self.mimeType);
      Categories=System;Security;

      """
  }

  /// An Exec program path per the specification: quoted when it holds a reserved character, with `"`, `` ` ``,
  /// `$` and `\` escaped by a backslash inside the quotes, then every backslash doubled (string-value escaping) and
  /// `%` written `%%` (field codes).
  static func execQuoted(_ path: String) -> String {
    var s = path
    if needsQuoting(path) {
      var q = "\""
      for c in path {
        if "\"`$\\".contains(c) { q.append("\\") }
        q.append(c)
      }
      s = q + "\""
    }
    return s.replacing("\\", with: "\\\\").replacing("%", with: "%%")
  }

  /// Whether an Exec program path holds a character the specification reserves (it must then be quoted).
  static func needsQuoting(_ path: String) -> Bool {
    let reserved = Set(" \t\n\"'\\><~|&;$*?#()`%=")
    return path.contains(where: { reserved.contains($0) })
  }

  /// `$XDG_DATA_HOME/applications` (default `~/.local/share/applications`).
  public static var applicationsDirectory: URL {
    if let d = Environment.value("XDG_DATA_HOME"), d.hasPrefix("/") {
      return URL(fileURLWithPath: d).appendingPathComponent("applications")
    }
    return URL(fileURLWithPath: Environment.home ?? FileManager.default.homeDirectoryForCurrentUser.path)
      .appendingPathComponent(".local/share/applications")
  }

  /// What `install` did, step by step (a step whose tool is missing is reported, not fatal).
  public struct Installed: Sendable, Equatable {
    public var file: String
    /// `xdg-mime default …`: nil when it ran fine, else why not.
    public var defaultHandler: String?
    /// `update-desktop-database …`: nil when it ran fine, else why not.
    public var database: String?
    /// The link the entry runs instead of the executable, when the executable's path needs quoting (`install`).
    public var link: String?
  }

  /// Writes the entry (0644, replacing an older one atomically) into `directory`, makes it the default handler of
  /// `tokenbridge:` links and updates the directory's MIME cache.
  ///
  /// xdg-open (xdg-utils 1.1.3, Debian 12's) takes an entry's program as the first space-separated word of Exec and
  /// ignores the specification's quoting, so a quoted path never starts from a link opened through it (Chromium opens
  /// links through xdg-open; GIO, which Firefox uses, quotes right). An executable whose path needs quoting is run
  /// through a symbolic link to it, `tokenbridge/bin/tokenbridge` beside `directory` (in `$XDG_DATA_HOME`), when that
  /// path needs none.
  public func install(into directory: URL = applicationsDirectory) throws(OperationError) -> Installed {
    var text = try entry()
    var link: String? = nil
    if Self.needsQuoting(executable) {
      let bin = directory.deletingLastPathComponent().appendingPathComponent("tokenbridge/bin")
      let path = bin.appendingPathComponent("tokenbridge").path
      if !Self.needsQuoting(path) {
        try Self.link(path, to: executable, in: bin)
        text = try DesktopHandler(executable: path).entry()
        link = path
      }
    }
    let file = directory.appendingPathComponent(Self.fileName)
    do {
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      try Data(text.utf8).write(to: file, options: .atomic)
      try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file.path)
    } catch {
      throw Self.fileError(error, path: file.path)
    }
    return Installed(
      file: file.path,
      defaultHandler: Self.run("xdg-mime", ["default", Self.fileName, Self.mimeType]),
      database: Self.run("update-desktop-database", [directory.path]), link: link)
  }

  /// A FileManager failure at `path` as the input error naming it (its POSIX code, else EIO).
  static func fileError(_ error: any Error, path: String) -> OperationError {
    let posix = ((error as? CocoaError)?.underlying as? POSIXError)?.code.rawValue
    return .input(.file(path: path, errno: posix ?? EIO))
  }

  /// Makes `path` a symbolic link to `target`, replacing an older link in one rename (never a file that is not a
  /// link).
  static func link(_ path: String, to target: String, in directory: URL) throws(OperationError) {
    do {
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    } catch {
      throw Self.fileError(error, path: directory.path)
    }
    var st = stat()
    if lstat(path, &st) == 0, st.st_mode & S_IFMT != S_IFLNK { throw .input(.file(path: path, errno: EEXIST)) }
    let staged = path + ".new"
    unlink(staged)  // one a killed install left
    guard symlink(target, staged) == 0 else { throw .input(.file(path: staged, errno: errno)) }
    guard rename(staged, path) == 0 else {
      let e = errno
      unlink(staged)
      throw .input(.file(path: path, errno: e))
    }
  }

  /// Runs a tool from PATH; nil on success, else a short reason.
  static func run(_ tool: String, _ args: [String]) -> String? {
    let path = (Environment.value("PATH") ?? "/usr/bin:/bin").split(separator: ":")
      .map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    guard let path else { return "\(tool) is not installed (Debian: xdg-utils, desktop-file-utils)" }
    guard let p = Subprocess.start(path, args, stdout: .null, stderr: .null) else {
      return "\(tool) could not be started"
    }
    let status = p.wait()
    return status == 0 ? nil : "\(tool) failed (exit \(status))"
  }
}
