import Testing

// Test tags of this target, for `swift test --filter`/`--skip` by kind (STYLE.md, "Tests by layer"):
// `swift test --skip-build --filter .tags:pcscd` runs what needs the private pcscd of Tools/with-pcscd.
extension Tag {
  /// Runs on a real token through the machine's own pcscd (opt-in: TOKENBRIDGE_HIL=1, Tools/hil).
  @Tag static var hardware: Self
  /// Talks to the virtual tokens through the real pcscd or libfido2 (Tools/with-pcscd starts a private pcscd).
  @Tag static var pcscd: Self
  /// Takes seconds on its own, not milliseconds.
  @Tag static var slow: Self
}
