/* busy-wait-yield.so: preloaded into CanoKey's simulator (Tools/third-party fido2 canokey, Tools/with-pcscd
 * --canokey), whose busy waits would otherwise each hold a CPU core for as long as they wait:
 *   - canokey-core src/device.c strong_user_presence_test: at every card fabrication (each start), five 2 s
 *     waits in a loop that does nothing but read the clock (device_get_tick: clock_gettime(CLOCK_MONOTONIC));
 *   - virt-card/fido-hid-over-udp.c udp_recv: select() with a 100 µs timeout, ten thousand times a second while
 *     the key is idle.
 * Here a thread that reads CLOCK_MONOTONIC more than 64 times within one millisecond sleeps a millisecond before
 * its next reading, and a select() timeout under a millisecond becomes one millisecond. The times it reads are
 * the real ones and select() still returns as soon as a report arrives: what the firmware answers, and when,
 * stays the same to within a millisecond; only the spinning goes. Preloaded after libasan (which must come
 * first), whose interceptors then call these. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <sys/select.h>
#include <time.h>

#define BURST 64
#define WINDOW_NS 1000000LL

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);

__attribute__((constructor)) static void resolve(void) {
  real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  real_select = (int (*)(int, fd_set *, fd_set *, fd_set *, struct timeval *))dlsym(RTLD_NEXT, "select");
}

static __thread int64_t window_start;
static __thread int calls;

static int64_t ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec; }

int clock_gettime(clockid_t clock, struct timespec *t) {
  if (!real_clock_gettime) resolve();
  int r = real_clock_gettime(clock, t);
  if (r != 0 || clock != CLOCK_MONOTONIC) return r;
  int64_t now = ns(t);
  if (now - window_start >= WINDOW_NS) {
    window_start = now;
    calls = 0;
  } else if (++calls > BURST) {
    struct timespec pause = {0, WINDOW_NS};
    nanosleep(&pause, 0);
    r = real_clock_gettime(clock, t);
    window_start = ns(t);
    calls = 0;
  }
  return r;
}

int select(int n, fd_set *readable, fd_set *writable, fd_set *failed, struct timeval *timeout) {
  if (!real_select) resolve();
  if (timeout && timeout->tv_sec == 0 && timeout->tv_usec > 0 && timeout->tv_usec < 1000) timeout->tv_usec = 1000;
  return real_select(n, readable, writable, failed, timeout);
}
