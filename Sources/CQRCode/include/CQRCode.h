// QR codes from PNG/JPEG images, for out-of-band payloads: the image is decoded by libpng (its simplified API) or
// libjpeg(-turbo) into 8-bit gray, and the gray image is scanned by zbar for QR codes only. In C because
// libjpeg reports errors by longjmp, which Swift code must not be jumped across.
#ifndef TB_CQRCODE_H
#define TB_CQRCODE_H
#include <stddef.h>

enum {
  TB_QR_OK = 0,          // exactly one QR code; its text is in *text (free it with tb_qr_free)
  TB_QR_NOT_IMAGE = 1,   // neither PNG nor JPEG (by the file's signature)
  TB_QR_BAD_IMAGE = 2,   // a PNG or JPEG that cannot be decoded (truncated, corrupt)
  TB_QR_TOO_LARGE = 3,   // more pixels than tb_qr_max_pixels
  TB_QR_NONE = 4,        // no QR code in the image
  TB_QR_SEVERAL = 5,     // more than one QR code (*count says how many)
  TB_QR_NO_MEMORY = 6,
  TB_QR_NO_LIBRARY = 7,  // libpng, libjpeg or zbar cannot be loaded: tb_qr_load_error() says why
  TB_QR_TOO_MANY_SCANS = 8,  // a progressive JPEG of more than TB_QR_MAX_SCANS scans
  TB_QR_TIMEOUT = 9,     // decoding and scanning took longer than the deadline given
};

// The largest image decoded, in pixels (about 64 MB of gray).
#define TB_QR_MAX_PIXELS (8192L * 8192L)

// The most scans a progressive JPEG may have (libjpeg's default progression has 10 for color, 6 for gray; each
// scan is a pass over the whole image, so thousands of them cost minutes).
#define TB_QR_MAX_SCANS 100

// Scans `len` bytes of a PNG or JPEG file, within `seconds` (wall time; the work runs in a child process that is
// killed at the deadline). On TB_QR_OK, *text holds the QR code's bytes (NUL-terminated; *text_len without the
// NUL); *count is the number of QR codes found whatever the result.
int tb_qr_scan(const unsigned char *bytes, size_t len, double seconds, char **text, size_t *text_len, int *count);
void tb_qr_free(char *text);
// NULL once libpng, libjpeg and zbar are loaded (at the first call, not at start-up); else why not.
const char *tb_qr_load_error(void);
#endif
