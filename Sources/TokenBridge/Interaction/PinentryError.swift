/// Why a pinentry program could not ask. Facts only (the program as named, codes); never the secret.
public enum PinentryError: Error, Equatable, Sendable {
  /// The program could not be started (`errno`; ENOENT: not found on PATH).
  case cannotStart(program: String, errno: Int32)
  /// The program ended, or closed its side, in the middle of the dialog (before answering `command`).
  case ended(program: String, command: String)
  /// The program refused a command it must accept (`code`: its Assuan ERR code), or answered something that is
  /// not Assuan (`code` nil).
  case refused(program: String, command: String, code: UInt32?)
}
