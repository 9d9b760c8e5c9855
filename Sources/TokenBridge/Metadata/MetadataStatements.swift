import FoundationEssentials
import TokenDevices
import UAFCore

/// Why no metadata statement could be made.
public enum MetadataError: Error, Equatable, Sendable {
  /// `aaid` is none of the AAIDs this client signs with (`known`, PIV's first).
  case unknownAAID(String, known: [String])
  /// pivAAID and fido2AAID are the same: a server could not tell the two kinds apart.
  case sameAAID(String)
  /// PIV registrations carry basic full attestation (`attestationSlot`) and no root certificate was given.
  case attestationRootNeeded(slot: String)
  /// A root certificate was given, but registrations carry surrogate attestation (no `attestationSlot`).
  case attestationRootUnused
  /// The file holds no X.509 certificate (PEM or DER).
  case notACertificate(path: String)
  /// A profile value has no string in Metadata Statement v3.0 (a registry value the table lacks).
  case unmappable(field: String, value: UInt32)
  /// The root certificate's file cannot be read.
  case input(InputError)
}

/// The metadata statements of the authenticators this client makes (`tokenbridge metadata`, the Debian package's
/// /usr/share/tokenbridge/metadata): one per AAID it signs with, PIV's first.
public enum MetadataStatements {
  /// The metadata of every kind, or of the one whose AAID is `aaid` (hex digits in either case: UAF Protocol
  /// §3.1.4). `attestationRoots`: DER certificates of the operator's attestation root, needed (and only
  /// accepted) when `configuration` has PIV registrations carry basic full attestation.
  public static func select(
    aaid: String? = nil, configuration: Configuration, attestationRoots: [[UInt8]] = []
  ) throws(MetadataError) -> [AuthenticatorMetadata] {
    let kinds: [TokenKind] = [.piv, .fido2]
    let aaids = kinds.map { AuthenticatorProfile.aaid($0, configuration) }
    if aaids[0].uppercased() == aaids[1].uppercased() { throw .sameAAID(aaids[0]) }
    var chosen = kinds
    if let aaid {
      guard let i = aaids.firstIndex(where: { $0.uppercased() == aaid.uppercased() }) else {
        throw .unknownAAID(aaid, known: aaids)
      }
      chosen = [kinds[i]]
    }
    if configuration.attestationSlot == nil {
      if !attestationRoots.isEmpty { throw .attestationRootUnused }
    } else if let slot = configuration.attestationSlot, chosen.contains(.piv), attestationRoots.isEmpty {
      throw .attestationRootNeeded(slot: slot)
    }
    return chosen.map { AuthenticatorMetadata($0, configuration: configuration, attestationRoots: attestationRoots) }
  }

  /// The statements of `select` in `schema`'s form.
  public static func statements(
    _ schema: MetadataSchema, aaid: String? = nil, configuration: Configuration, attestationRoots: [[UInt8]] = []
  ) throws(MetadataError) -> [AnyMetadataStatement] {
    var out: [AnyMetadataStatement] = []
    for m in try select(aaid: aaid, configuration: configuration, attestationRoots: attestationRoots) {
      out.append(try m.statement(schema))
    }
    return out
  }

  /// The statements of `select` in `schema`'s form, the attestation roots read from the file at `rootFile` (PEM or
  /// DER): what `tokenbridge metadata` prints. A root file without basic full attestation is refused unread.
  public static func statements(
    _ schema: MetadataSchema, aaid: String? = nil, configuration: Configuration, attestationRootFile rootFile: String?
  ) throws(MetadataError) -> [AnyMetadataStatement] {
    if rootFile != nil && configuration.attestationSlot == nil { throw .attestationRootUnused }
    let roots = try rootFile.map { (path) throws(MetadataError) in try AttestationRoots.read(path: path) } ?? []
    return try statements(schema, aaid: aaid, configuration: configuration, attestationRoots: roots)
  }
}
