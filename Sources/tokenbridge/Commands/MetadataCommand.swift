import ArgumentParser
import Platform
import TokenBridge

struct Metadata: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "metadata",
    abstract: "Print the FIDO metadata statements of this client's authenticators, for the UAF server.",
    discussion: """
      One statement (protocolFamily "uaf") per AAID this client signs with: pivAAID (PIV smart cards) and \
      fido2AAID (FIDO2 security keys) of the configuration, or only the AAID named. --schema 3 (the default) \
      writes FIDO Metadata Statement v3.0 (registry values as strings); --schema 1.1 the UAF 1.1 numeric form \
      (assertionScheme, authenticationAlgorithm, bit fields), which UAF 1.1 servers such as nevisFIDO load. \
      Output: one AAID named, its statement alone (a JSON object, as a server's metadata file holds it); \
      otherwise, and always with --json, a JSON array of statements. With attestationSlot in the configuration \
      the PIV statement says basic full attestation and needs the root certificate: --attestation-root.
      """)

  @Argument(help: "Only this AAID's statement (e.g. 7B1D#0001).")
  var aaid: String?

  @Option(
    help: ArgumentHelp(
      "The statement's form: 3 (Metadata Statement v3.0) or 1.1 (UAF 1.1, numeric).", valueName: "3|1.1"),
    completion: .list(MetadataSchema.allCases.map(\.rawValue)),
    transform: { s in
      guard let schema = MetadataSchema(rawValue: s) else {
        throw ValidationError("'\(displayable(s))' is not a statement form (3 or 1.1)")
      }
      return schema
    })
  var schema: MetadataSchema = .v3

  @Option(
    help: ArgumentHelp(
      "The root certificate (PEM or DER) the PIV attestation certificates chain to; with attestationSlot only.",
      valueName: "file"),
    completion: .file())
  var attestationRoot: String?

  @Flag(help: "Machine-readable output: always a JSON array, even of one statement.")
  var json = false

  func run() throws {
    do {
      let statements = try MetadataStatements.statements(
        schema, aaid: aaid, configuration: try Configuration.load(), attestationRootFile: attestationRoot)
      if aaid != nil && !json, let one = statements.first {
        print(Render.json(one))
      } else {
        print(Render.json(statements))
      }
    } catch {
      let report = ErrorReport(error)
      if json {
        print(Render.json(ErrorJSON(error: report.message, exitCode: "\(report.status.rawValue)", code: report.code)))
      } else {
        FileIO.writeError("tokenbridge: \(report.message)\n")
      }
      throw ExitCode(report.status.rawValue)
    }
  }
}
