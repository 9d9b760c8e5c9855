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
  /// libpng, libjpeg or zbar (loaded at the first scan) cannot be loaded; the loader's reason.
  case libraryMissing(String)
}

/// QR codes in PNG/JPEG images (`tokenbridge oob --qr-image FILE`): libpng/libjpeg decode, zbar scans
/// (Sources/CQRCode).
public enum QRImage {
  /// The largest file read.
  public static let maxFileSize = 32 * 1024 * 1024
  public static let maxPixels = Int(TB_QR_MAX_PIXELS)

  /// The text of the one QR code in `bytes` (a PNG or JPEG file's content).
  public static func text(in bytes: [UInt8]) throws(OutOfBandError) -> String {
    var text: UnsafeMutablePointer<CChar>?
    var length = 0
    var count: Int32 = 0
    let rc = bytes.withUnsafeBufferPointer { b in
      tb_qr_scan(b.baseAddress, b.count, &text, &length, &count)
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
    case Int(TB_QR_NO_LIBRARY): throw .qrImage(.libraryMissing(tb_qr_load_error().map { String(cString: $0) } ?? ""))
    default: throw .qrImage(.unreadableImage)
    }
  }

  /// The text of the one QR code in the image file at `path`.
  public static func text(file path: String) throws(OperationError) -> String {
    let bytes: [UInt8]
    do { bytes = try readFile(path) } catch { throw .input(error) }
    do { return try text(in: bytes) } catch { throw .outOfBand(error) }
  }

  static func readFile(_ path: String) throws(InputError) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw .file(path: path, errno: errno) }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else { throw .file(path: path, errno: errno) }
    guard (st.st_mode & S_IFMT) == S_IFREG else { throw .file(path: path, errno: EISDIR) }
    guard st.st_size <= maxFileSize else { throw .file(path: path, errno: EFBIG) }
    var out = [UInt8]()
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
      let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
      if n < 0 {
        if errno == EINTR { continue }
        throw .file(path: path, errno: errno)
      }
      if n == 0 { break }
      out += chunk[0..<n]
      guard out.count <= maxFileSize else { throw .file(path: path, errno: EFBIG) }
    }
    return out
  }
}
