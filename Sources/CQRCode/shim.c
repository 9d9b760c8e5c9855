#include "CQRCode.h"

#include <stdio.h>  // jpeglib.h needs FILE

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zbar.h>

#include <dlfcn.h>
#include <pthread.h>

// libpng, libjpeg and zbar (with zbar's own ~15 libraries: X11, D-Bus, v4l...) are loaded at the first scan, not
// linked: a command that scans no image maps none of them.
#define QR_FUNCTIONS(X)                  \
  X(png, png_image_begin_read_from_memory) \
  X(png, png_image_finish_read)            \
  X(png, png_image_free)                   \
  X(jpeg, jpeg_std_error)                  \
  X(jpeg, jpeg_CreateDecompress)           \
  X(jpeg, jpeg_destroy_decompress)         \
  X(jpeg, jpeg_mem_src)                    \
  X(jpeg, jpeg_read_header)                \
  X(jpeg, jpeg_start_decompress)           \
  X(jpeg, jpeg_read_scanlines)             \
  X(jpeg, jpeg_finish_decompress)          \
  X(zbar, zbar_image_scanner_create)       \
  X(zbar, zbar_image_scanner_destroy)      \
  X(zbar, zbar_image_scanner_set_config)   \
  X(zbar, zbar_image_create)               \
  X(zbar, zbar_image_destroy)              \
  X(zbar, zbar_image_set_format)           \
  X(zbar, zbar_image_set_size)             \
  X(zbar, zbar_image_set_data)             \
  X(zbar, zbar_image_free_data)            \
  X(zbar, zbar_scan_image)                 \
  X(zbar, zbar_image_first_symbol)         \
  X(zbar, zbar_symbol_next)                \
  X(zbar, zbar_symbol_get_type)            \
  X(zbar, zbar_symbol_get_data_length)     \
  X(zbar, zbar_symbol_get_data)

static struct {
  void *png, *jpeg, *zbar;
#define FIELD(lib, name) __typeof__(&name) name;
  QR_FUNCTIONS(FIELD)
#undef FIELD
  int loaded;
  char error[200];
} qr;

static pthread_once_t qr_once = PTHREAD_ONCE_INIT;

static void *open_library(const char *name) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h && !qr.error[0]) snprintf(qr.error, sizeof qr.error, "%s", dlerror());
  return h;
}

static void load_libraries(void) {
  qr.png = open_library("libpng16.so.16");
  qr.jpeg = open_library("libjpeg.so.62");
  qr.zbar = open_library("libzbar.so.0");
  if (!qr.png || !qr.jpeg || !qr.zbar) return;
#define RESOLVE(lib, name)                                                          \
  if (!(*(void **)&qr.name = dlsym(qr.lib, #name))) {                               \
    snprintf(qr.error, sizeof qr.error, "%s has no %s", #lib, #name);               \
    return;                                                                         \
  }
  QR_FUNCTIONS(RESOLVE)
#undef RESOLVE
  qr.loaded = 1;
}

const char *tb_qr_load_error(void) {
  pthread_once(&qr_once, load_libraries);
  return qr.loaded ? NULL : qr.error;
}

static int decode_png(const unsigned char *bytes, size_t len, unsigned char **gray, unsigned *w, unsigned *h) {
  png_image image;
  memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!qr.png_image_begin_read_from_memory(&image, bytes, len)) return TB_QR_BAD_IMAGE;
  if (image.width == 0 || image.height == 0 || (long)image.width * (long)image.height > TB_QR_MAX_PIXELS) {
    qr.png_image_free(&image);
    return image.width == 0 || image.height == 0 ? TB_QR_BAD_IMAGE : TB_QR_TOO_LARGE;
  }
  image.format = PNG_FORMAT_GRAY;
  unsigned char *buf = malloc(PNG_IMAGE_SIZE(image));
  if (!buf) {
    qr.png_image_free(&image);
    return TB_QR_NO_MEMORY;
  }
  png_color white = {255, 255, 255};  // transparent pixels become white paper, not black
  if (!qr.png_image_finish_read(&image, &white, buf, 0, NULL)) {
    free(buf);
    qr.png_image_free(&image);
    return TB_QR_BAD_IMAGE;
  }
  *gray = buf;
  *w = image.width;
  *h = image.height;
  return TB_QR_OK;
}

struct jpeg_failure {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
};

static void jpeg_fail(j_common_ptr cinfo) { longjmp(((struct jpeg_failure *)cinfo->err)->jump, 1); }
static void jpeg_quiet(j_common_ptr cinfo, int level) { (void)cinfo, (void)level; }  // no warnings on stderr

static int decode_jpeg(const unsigned char *bytes, size_t len, unsigned char **gray, unsigned *w, unsigned *h) {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_failure err;
  unsigned char *volatile buf = NULL;
  volatile int result = TB_QR_BAD_IMAGE;
  memset(&cinfo, 0, sizeof cinfo);  // jpeg_destroy_decompress is safe on it before jpeg_create_decompress
  cinfo.err = qr.jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_quiet;
  if (setjmp(err.jump)) {
    qr.jpeg_destroy_decompress(&cinfo);
    free(buf);
    return result;
  }
  qr.jpeg_CreateDecompress(&cinfo, JPEG_LIB_VERSION, sizeof cinfo);
  qr.jpeg_mem_src(&cinfo, bytes, (unsigned long)len);
  qr.jpeg_read_header(&cinfo, TRUE);
  if ((long)cinfo.image_width * (long)cinfo.image_height > TB_QR_MAX_PIXELS) {
    qr.jpeg_destroy_decompress(&cinfo);
    return TB_QR_TOO_LARGE;
  }
  cinfo.out_color_space = JCS_GRAYSCALE;
  qr.jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 1 || cinfo.output_width == 0 || cinfo.output_height == 0) {
    qr.jpeg_destroy_decompress(&cinfo);
    return TB_QR_BAD_IMAGE;
  }
  buf = malloc((size_t)cinfo.output_width * cinfo.output_height);
  if (!buf) {
    qr.jpeg_destroy_decompress(&cinfo);
    return TB_QR_NO_MEMORY;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = buf + (size_t)cinfo.output_scanline * cinfo.output_width;
    qr.jpeg_read_scanlines(&cinfo, &row, 1);
  }
  qr.jpeg_finish_decompress(&cinfo);
  *w = cinfo.output_width;
  *h = cinfo.output_height;
  qr.jpeg_destroy_decompress(&cinfo);
  *gray = buf;
  return TB_QR_OK;
}

int tb_qr_scan(const unsigned char *bytes, size_t len, char **text, size_t *text_len, int *count) {
  *text = NULL;
  *text_len = 0;
  *count = 0;
  static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  unsigned char *gray = NULL;
  unsigned w = 0, h = 0;
  int rc;
  if (tb_qr_load_error()) return TB_QR_NO_LIBRARY;
  if (len >= 8 && memcmp(bytes, png_sig, 8) == 0) {
    rc = decode_png(bytes, len, &gray, &w, &h);
  } else if (len >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    rc = decode_jpeg(bytes, len, &gray, &w, &h);
  } else {
    return TB_QR_NOT_IMAGE;
  }
  if (rc != TB_QR_OK) return rc;

  zbar_image_scanner_t *scanner = qr.zbar_image_scanner_create();
  zbar_image_t *image = qr.zbar_image_create();
  if (!scanner || !image) {
    if (scanner) qr.zbar_image_scanner_destroy(scanner);
    if (image) qr.zbar_image_destroy(image);
    free(gray);
    return TB_QR_NO_MEMORY;
  }
  qr.zbar_image_scanner_set_config(scanner, 0, ZBAR_CFG_ENABLE, 0);
  qr.zbar_image_scanner_set_config(scanner, ZBAR_QRCODE, ZBAR_CFG_ENABLE, 1);
  qr.zbar_image_scanner_set_config(scanner, ZBAR_QRCODE, ZBAR_CFG_BINARY, 1);  // the bytes, no charset guessing
  qr.zbar_image_set_format(image, zbar_fourcc('Y', '8', '0', '0'));
  qr.zbar_image_set_size(image, w, h);
  qr.zbar_image_set_data(image, gray, (unsigned long)w * h, qr.zbar_image_free_data);  // zbar frees `gray`
  int n = qr.zbar_scan_image(scanner, image);
  rc = TB_QR_NONE;
  if (n < 0) {
    rc = TB_QR_BAD_IMAGE;
  } else {
    const zbar_symbol_t *first = NULL;
    for (const zbar_symbol_t *s = qr.zbar_image_first_symbol(image); s; s = qr.zbar_symbol_next(s)) {
      if (qr.zbar_symbol_get_type(s) != ZBAR_QRCODE) continue;
      if (!first) first = s;
      (*count)++;
    }
    if (*count > 1) {
      rc = TB_QR_SEVERAL;
    } else if (first) {
      unsigned dlen = qr.zbar_symbol_get_data_length(first);
      char *out = malloc((size_t)dlen + 1);
      if (!out) {
        rc = TB_QR_NO_MEMORY;
      } else {
        memcpy(out, qr.zbar_symbol_get_data(first), dlen);
        out[dlen] = 0;
        *text = out;
        *text_len = dlen;
        rc = TB_QR_OK;
      }
    }
  }
  qr.zbar_image_destroy(image);
  qr.zbar_image_scanner_destroy(scanner);
  return rc;
}

void tb_qr_free(char *text) { free(text); }
