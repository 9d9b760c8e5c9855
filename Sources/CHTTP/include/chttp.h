#ifndef TOKENBRIDGE_CHTTP_H
#define TOKENBRIDGE_CHTTP_H

#include <stddef.h>

/// One HTTP exchange through libcurl, which is loaded (dlopen of libcurl.so.4) at the first exchange, never at
/// start-up: a command that makes no request maps no HTTP or TLS library. Redirects are never followed here
/// (the caller decides, per its rule); TLS verifies the peer and the host name against the system trust store.

enum {
  /// The exchange ran and an answer (status line, headers, the body the sink took) came back.
  TB_HTTP_OK = 0,
  /// libcurl could not be loaded; `error` says why.
  TB_HTTP_NO_LIBRARY = 1,
  /// libcurl reported `curl_code` (`error` has its text).
  TB_HTTP_FAILED = 2,
};

/// Well-known libcurl results the caller tells apart (values of CURLcode, stable across libcurl 7.x/8.x).
enum {
  TB_CURLE_WRITE_ERROR = 23,
  TB_CURLE_OPERATION_TIMEDOUT = 28,
  TB_CURLE_FILESIZE_EXCEEDED = 63,
};

typedef struct tb_http_request {
  const char *url;
  const char *method;
  /// "Name: value" lines.
  const char *const *headers;
  size_t header_count;
  const void *body;
  size_t body_length;
  /// Whole exchange, connect included.
  long timeout_ms;
  /// An answer whose Content-Length says more than this is refused before its body is read.
  long long max_body;
} tb_http_request;

/// Receives the answer as it arrives: each header line (status line included), then body chunks. A nonzero
/// return stops the transfer at once.
typedef int (*tb_http_header_sink)(void *context, const char *line, size_t length);
typedef int (*tb_http_body_sink)(void *context, const char *data, size_t length);

typedef struct tb_http_result {
  long status;
  int curl_code;
  char error[256];
} tb_http_result;

/// Runs one exchange synchronously (thread-safe: one easy handle per call).
int tb_http_perform(
    const tb_http_request *request, tb_http_header_sink on_header, tb_http_body_sink on_body, void *context,
    tb_http_result *result);

#endif
