/// Metadata statements (`tokenbridge metadata`).
extension ErrorReport {
  static func metadata(_ e: MetadataError) -> ErrorReport {
    switch e {
    case .unknownAAID(let aaid, let known):
      return .init(
        status: .usage,
        message: "No metadata statement for AAID \(shown(aaid)): this client signs with "
          + "\(known.map(shown).joined(separator: " and ")) (pivAAID and fido2AAID in the configuration).")
    case .sameAAID(let aaid):
      return .init(
        status: .configuration,
        message: "pivAAID and fido2AAID are both \(shown(aaid)) in the configuration: a server tells PIV cards and "
          + "FIDO2 keys apart by their AAIDs; give each kind its own.")
    case .attestationRootNeeded(let slot):
      return .init(
        status: .usage,
        message: "PIV registrations carry basic full attestation (attestationSlot \(shown(slot)) in the "
          + "configuration): name the root certificate their attestation certificates chain to with "
          + "--attestation-root FILE (PEM or DER).")
    case .attestationRootUnused:
      return .init(
        status: .usage,
        message: "--attestation-root: registrations carry surrogate attestation (no attestationSlot in the "
          + "configuration), which no root certificate vouches for; leave the option out, or configure "
          + "attestationSlot.")
    case .notACertificate(let path):
      return .init(
        status: .usage,
        message: "Cannot use \(shown(path)): it holds no X.509 certificate (PEM \"BEGIN CERTIFICATE\" blocks, or "
          + "one DER certificate).")
    case .unmappable(let field, let value):
      return .init(
        status: .failure,
        message: "The \(field) value \(value) has no Metadata Statement v3 string (a bug: please report it); "
          + "--schema 1.1 writes the numbers.")
    case .input(let i): return input(i)
    }
  }
}
