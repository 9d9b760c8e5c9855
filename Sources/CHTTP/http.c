#define CURL_DISABLE_TYPECHECK 1
#include "chttp.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

// libcurl's entry points, resolved from the library loaded at the first exchange. The binary itself does not
// link libcurl: `ldd tokenbridge` names none, and neither does /proc/PID/maps until a request is made.
static struct {
  void *handle;
  CURLcode (*global_init)(long);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_perform)(CURL *);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  void (*easy_cleanup)(CURL *);
  const char *(*easy_strerror)(CURLcode);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  char error[200];
} curl;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void load_curl(void) {
  // Debian/Ubuntu's libcurl4 (OpenSSL), else its GnuTLS build: the same ABI.
  static const char *const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !curl.handle; i++) {
    curl.handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!curl.handle) {
    const char *why = dlerror();
    snprintf(curl.error, sizeof curl.error, "libcurl cannot be loaded (%s)",
             why ? why : "not found");
    return;
  }
#define RESOLVE(field, symbol)                                                                    \
  do {                                                                                            \
    *(void **)&curl.field = dlsym(curl.handle, symbol);                                           \
    if (!curl.field) {                                                                            \
      snprintf(curl.error, sizeof curl.error, "libcurl.so.4 has no %s (older than 7.85)",        \
               symbol);                                                                           \
      curl.handle = NULL;                                                                         \
      return;                                                                                     \
    }                                                                                             \
  } while (0)
  RESOLVE(global_init, "curl_global_init");
  RESOLVE(easy_init, "curl_easy_init");
  RESOLVE(easy_setopt, "curl_easy_setopt");
  RESOLVE(easy_perform, "curl_easy_perform");
  RESOLVE(easy_getinfo, "curl_easy_getinfo");
  RESOLVE(easy_cleanup, "curl_easy_cleanup");
  RESOLVE(easy_strerror, "curl_easy_strerror");
  RESOLVE(slist_append, "curl_slist_append");
  RESOLVE(slist_free_all, "curl_slist_free_all");
#undef RESOLVE
  if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(curl.error, sizeof curl.error, "libcurl could not be initialised");
    curl.handle = NULL;
  }
}

struct sinks {
  tb_http_header_sink on_header;
  tb_http_body_sink on_body;
  void *context;
};

static size_t header_callback(char *data, size_t size, size_t count, void *user) {
  struct sinks *s = user;
  size_t n = size * count;
  return s->on_header(s->context, data, n) ? 0 : n;
}

static size_t body_callback(char *data, size_t size, size_t count, void *user) {
  struct sinks *s = user;
  size_t n = size * count;
  return s->on_body(s->context, data, n) ? 0 : n;
}

int tb_http_perform(const tb_http_request *request, tb_http_header_sink on_header, tb_http_body_sink on_body,
                    void *context, tb_http_result *result) {
  memset(result, 0, sizeof *result);
  pthread_once(&curl_once, load_curl);
  if (!curl.handle) {
    snprintf(result->error, sizeof result->error, "%s", curl.error);
    return TB_HTTP_NO_LIBRARY;
  }
  CURL *h = curl.easy_init();
  if (!h) {
    snprintf(result->error, sizeof result->error, "libcurl could not start a transfer");
    return TB_HTTP_NO_LIBRARY;
  }
  struct curl_slist *headers = NULL;
  for (size_t i = 0; i < request->header_count; i++) headers = curl.slist_append(headers, request->headers[i]);
  headers = curl.slist_append(headers, "Expect:");  // no 100-continue round trip before a body
  struct sinks sinks = {on_header, on_body, context};
  char error[CURL_ERROR_SIZE] = "";

  CURLcode rc = CURLE_OK;
#define SET(option, value) \
  if (rc == CURLE_OK) rc = curl.easy_setopt(h, option, value)
  SET(CURLOPT_URL, request->url);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_SSL_VERIFYPEER, 1L);
  SET(CURLOPT_SSL_VERIFYHOST, 2L);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TIMEOUT_MS, request->timeout_ms);
  SET(CURLOPT_CONNECTTIMEOUT_MS, request->timeout_ms);
  SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)request->max_body);
  SET(CURLOPT_USERAGENT, "tokenbridge");
  SET(CURLOPT_HTTPHEADER, headers);
  SET(CURLOPT_ERRORBUFFER, error);
  SET(CURLOPT_HEADERFUNCTION, header_callback);
  SET(CURLOPT_HEADERDATA, &sinks);
  SET(CURLOPT_WRITEFUNCTION, body_callback);
  SET(CURLOPT_WRITEDATA, &sinks);
  if (strcmp(request->method, "GET") == 0) {
    SET(CURLOPT_HTTPGET, 1L);
  } else if (strcmp(request->method, "POST") != 0) {
    SET(CURLOPT_CUSTOMREQUEST, request->method);
  }
  if (request->body || strcmp(request->method, "POST") == 0) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)request->body_length);
    SET(CURLOPT_POSTFIELDS, request->body ? request->body : "");
    if (strcmp(request->method, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, request->method);
  }
#undef SET
  if (rc == CURLE_OK) rc = curl.easy_perform(h);
  long status = 0;
  curl.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  result->status = status;
  result->curl_code = (int)rc;
  if (rc != CURLE_OK) {
    snprintf(result->error, sizeof result->error, "%s", error[0] ? error : curl.easy_strerror(rc));
  }
  curl.easy_cleanup(h);
  curl.slist_free_all(headers);
  return rc == CURLE_OK ? TB_HTTP_OK : TB_HTTP_FAILED;
}
