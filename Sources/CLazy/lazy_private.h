#pragma once
#include "CLazy.h"

#include <pthread.h>

#define TB_LAZY_LIBRARIES 5

/// The functions of one library: names (generated, NULL-terminated), resolved addresses, load outcome.
typedef struct tb_lazy_state {
  pthread_once_t once;
  void **functions;
  const char *error;
} tb_lazy_state;

extern tb_lazy_state tb_lazy_states[TB_LAZY_LIBRARIES] __attribute__((visibility("hidden")));
void tb_lazy_once(tb_lazy_library library) __attribute__((visibility("hidden")));
__attribute__((noreturn, visibility("hidden"))) void tb_lazy_unloaded(tb_lazy_library library);

/// The address of function `index` of `library` (the order of tb_lazy_names_<library>), loading the library at
/// the first call; a library that cannot be loaded is a programming error here (the Swift layer asks
/// tb_lazy_load first and throws): one line on stderr, then abort.
static inline void *tb_lazy_function(tb_lazy_library library, int index) {
  tb_lazy_state *s = &tb_lazy_states[library];
  tb_lazy_once(library);
  if (__builtin_expect(s->error != 0, 0)) tb_lazy_unloaded(library);
  return s->functions[index];
}
