import ArgumentParser
import FoundationEssentials
import TokenBridge

struct Info: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "info", abstract: "Version, facet ID, AAIDs and where data lives.")
  @OptionGroup var options: GlobalOptions
  @OptionGroup var serverOptions: ServerOptions

  func run() throws {
    try options.execute {
      let config: Configuration
      config = try Configuration.load()
      let server = serverOptions.server ?? config.server
      let facet = serverOptions.facetId ?? config.facetID ?? server.flatMap { try? BackendClient(server: $0).origin }
      let device = try? LocalData().deviceInformation()
      let info: [String: String] = [
        "deviceID": device?.deviceID ?? "(none: no registration yet)", "deviceName": device?.name ?? "(none)",
        "devicePushToken": device.map { $0.pushToken ?? "(none: push disabled)" } ?? "(none)",
        "version": TokenBridgeVersion.string, "server": server ?? "(none)", "facetID": facet ?? "(none)",
        "pivAAID": config.pivAAID, "fido2AAID": config.fido2AAID, "configuration": Configuration.file.path,
        "localData": Configuration.dataDirectory.appendingPathComponent("tokenbridge.sqlite").path,
      ]
      if options.json {
        print(Render.json(info))
      } else {
        for k in info.keys.sorted() { print("\(k): \(displayable(info[k]!))") }
      }
    }
  }
}
