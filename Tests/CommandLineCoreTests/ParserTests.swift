import Testing

@testable import CommandLineCore
