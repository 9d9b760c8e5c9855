import FoundationEssentials
import Glibc

/// The user's input: --pin-fd, the terminal, pinentry, QR images.
extension ErrorReport {
  static func input(_ e: InputError) -> ErrorReport {
    switch e {
    case .noMoreInput(let what):
      return .init(status: .usage, message: "--pin-fd: expected \(expected(what)); the input ended.")
    case .lineTooLong(let limit):
      return .init(
        status: .usage, message: "--pin-fd: a line is longer than \(limit) bytes; nothing of it was used or sent.")
    case .unreadable(let fd, let errno):
      return .init(status: .usage, message: "File descriptor \(fd) cannot be read.", code: "errno \(errno)")
    case .noTerminal(let what):
      return .init(
        status: .usage,
        message: "No terminal to ask for \(expected(what)). Pass it on a file descriptor: --pin-fd N.")
    case .notConfirmed(let c):
      return .init(status: .cancelled, message: "\(warning(c)) Not confirmed: run on a terminal, or add --yes.")
    case .badChannelBinding:
      return .init(status: .usage, message: "--channel-binding must be a ChannelBinding JSON object.")
    case .badManagementKey:
      return .init(status: .usage, message: "--management-key-fd: the key must be hex (48, 48 or 64 digits).")
    case .file(let path, let errno):
      return .init(
        status: .usage, message: "Cannot use \(path): \(String(cString: strerror(errno))).", code: "errno \(errno)")
    case .notAFile(let path):
      return .init(status: .usage, message: "Cannot use \(path): it is a device, a FIFO or a socket, not a file.")
    case .pinentry(let p): return pinentry(p)
    }
  }

  static func pinentry(_ e: PinentryError) -> ErrorReport {
    switch e {
    case .cannotStart(let program, let errno):
      return .init(
        status: .configuration,
        message: "Cannot start the pinentry program \(shown(program)) (\(String(cString: strerror(errno)))): install "
          + "one (e.g. pinentry-tty, pinentry-gnome3) or name it with PINENTRY_PROGRAM or \"pinentry\" in the "
          + "configuration; nothing was sent to the token.", code: "errno \(errno)")
    case .ended(let program, let command):
      return .init(
        status: .failure,
        message: "The pinentry program \(shown(program)) ended before answering (\(command)); nothing was sent to "
          + "the token.")
    case .refused(let program, let command, let code):
      return .init(
        status: .failure,
        message: "The pinentry program \(shown(program)) "
          + (code == nil ? "answered \(command) with something that is not Assuan" : "refused \(command)")
          + "; nothing was sent to the token.", code: code.map { "Assuan ERR \($0)" })
    }
  }

  static func expected(_ e: ExpectedInput) -> String {
    switch e {
    case .pin: "the PIN"
    case .managementKey: "the management key (hex)"
    case .currentAndNew(let c, let n):
      c == n
        ? "the current \(c.rawValue) and the new \(n.rawValue), one per line"
        : "the \(c.rawValue) and the new \(n.rawValue), one per line"
    case .newPIN: "the new PIN"
    case .answer: "an answer"
    }
  }

  static func qrImage(_ q: QRImageProblem) -> ErrorReport {
    if case .libraryMissing(let why) = q {
      return .init(
        status: .failure,
        message: "QR images cannot be read: \(shown(why)) (Debian: apt install libzbar0 libpng16-16 libjpeg62-turbo).")
    }
    let m =
      switch q {
      case .notAnImage: "The file is not a PNG or JPEG image; give the QR code as a PNG or JPEG file."
      case .unreadableImage: "The image cannot be decoded (truncated or damaged); save or photograph it again."
      case .tooLarge: "The image is larger than \(QRImage.maxPixels) pixels; crop it to the QR code."
      case .noQRCode: "No QR code was found in the image; crop it to the QR code, or use a sharper picture."
      case .severalQRCodes(let n): "The image holds \(n) QR codes; crop it to the one to use."
      case .tooManyScans: "The JPEG has more than \(QRImage.maxScans) scans; save it as a PNG or a baseline JPEG."
      case .tooSlow(let s): "Reading the image took longer than \(Int(s.rounded(.up))) s; crop it to the QR code."
      case .notAFile: "The path is a device, a FIFO or a socket; give the QR code as a PNG or JPEG file."
      case .libraryMissing: ""
      }
    return .init(status: .payloadMalformed, message: m + " Nothing was done.")
  }
}
