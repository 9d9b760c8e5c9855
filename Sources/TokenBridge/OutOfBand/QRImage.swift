import CQRCode
import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Why a QR image gave no payload text (file problems are `InputError.file`).
public enum QRImageProblem: Equatable, Sendable {
  /// Neither a PNG nor a JPEG file.
  case notAnImage
  /// A PNG or JPEG that cannot be decoded (truncated or corrupt).
  case unreadableImage
  /// More than `QRImage.maxPixels` pixels.
  case tooLarge
  /// The image holds no QR code.
  case noQRCode
  /// The image holds several QR codes: which one is meant is not ours to guess.
  case severalQRCodes(Int)
  /// A progressive JPEG of more than `QRImage.maxScans` scans (each one a pass over the whole image).
  case tooManyScans
  /// Decoding and scanning took longer than the bound (`--timeout`, at most `QRImage.maxSeconds`): seconds.
  case tooSlow(Double)
  /// The path is not a regular file (a device, a FIFO, a socket): nothing was read from it.
  case notAFile
  /// libpng, libjpeg or zbar (loaded at the first scan) cannot be loaded; the loader's reason.
  case libraryMissing(String)
}

/// QR codes in PNG/JPEG images (`tokenbridge oob --qr-image FILE`): libpng/libjpeg decode, zbar scans
/// (Sources/CQRCode).
public enum QRImage {
  /// The largest file read.
  public static let maxFileSize = 32 * 1024 * 1024
  public static let maxPixels = Int(TB_QR_MAX_PIXELS)
  /// The most scans a progressive JPEG may have.
  public static let maxScans = Int(TB_QR_MAX_SCANS)
  /// The longest an image is decoded and scanned, whatever the caller's timeout (a QR code in a phone photo takes
  /// well under a second).
  public static let maxSeconds = 30.0

  /// The text of the one QR code in `bytes` (a PNG or JPEG file's content), found within `timeout` seconds (at
  /// most `maxSeconds`; the work runs in a child process killed at the deadline).
  public static func text(in bytes: [UInt8], timeout: Double = maxSeconds) throws(OutOfBandError) -> String {
    var text: UnsafeMutablePointer<CChar>?
    var length = 0
    var count: Int32 = 0
    let seconds = min(max(timeout, 0.1), maxSeconds)
    let rc = bytes.withUnsafeBufferPointer { b in
      tb_qr_scan(b.baseAddress, b.count, seconds, &text, &length, &count)
    }
    defer { tb_qr_free(text) }
    switch Int(rc) {
    case Int(TB_QR_OK):
      guard let text else { throw .qrImage(.noQRCode) }
      let raw = UnsafeRawBufferPointer(start: text, count: length)
      return String(decoding: raw, as: UTF8.self)
    case Int(TB_QR_NOT_IMAGE): throw .qrImage(.notAnImage)
    case Int(TB_QR_TOO_LARGE): throw .qrImage(.tooLarge)
    case Int(TB_QR_NONE): throw .qrImage(.noQRCode)
    case Int(TB_QR_SEVERAL): throw .qrImage(.severalQRCodes(Int(count)))
    case Int(TB_QR_TOO_MANY_SCANS): throw .qrImage(.tooManyScans)
    case Int(TB_QR_TIMEOUT): throw .qrImage(.tooSlow(seconds))
    case Int(TB_QR_NO_LIBRARY): throw .qrImage(.libraryMissing(tb_qr_load_error().map { String(cString: $0) } ?? ""))
    default: throw .qrImage(.unreadableImage)
    }
  }

  /// The text of the one QR code in the image file at `path`, within `timeout` seconds (see `text(in:timeout:)`).
  public static func text(file path: String, timeout: Double = maxSeconds) throws(OperationError) -> String {
    let bytes = try readFile(path)
    do { return try text(in: bytes, timeout: timeout) } catch { throw .outOfBand(error) }
  }

  /// The content of the regular file at `path` (`RegularFile.read`): a device, FIFO or socket is
  /// `QRImageProblem.notAFile`.
  public static func readFile(_ path: String) throws(OperationError) -> [UInt8] {
    do throws(InputError) { return try RegularFile.read(path, limit: maxFileSize) } catch {
      if case .notAFile = error { throw .outOfBand(.qrImage(.notAFile)) }
      throw .input(error)
    }
  }
}
