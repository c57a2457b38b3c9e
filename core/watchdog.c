#include "watchdog.h"

#include <lauxlib.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "ffi.h"

#define TICK_MS 10
/* Ticks without any policy code before the thread dozes. */
#define QUIET_TICKS 100
#define INTERRUPT SIGUSR2

static lua_State *state;
static uint64_t budget_ns;
/* Chunk names of the operator's policy code start with one of these
 * ("@DIR/"): the live policy's directory, and a shadow's. */
static char guarded[EPHD_GUARD_SLOTS][4096];
static size_t guarded_len[EPHD_GUARD_SLOTS];
/* Set by the signal handler, cleared when policy code is left; the loop
 * thread is the only one to touch it. */
static volatile sig_atomic_t hooked;
static _Atomic uint64_t deadline; /* 0: not inside policy code */
static _Atomic int running;
static _Atomic uint64_t interrupts;
static pthread_t loop_thread, thread;
/* An idle broker must not wake a hundred times a second: after a quiet
 * second the thread dozes on a condition, and the next entry into policy
 * code rouses it. The deadline store and the dozing load on one side, the
 * dozing store and the deadline load on the other, are sequentially
 * consistent, so at least one side sees the other: either the thread sees
 * the deadline and stays awake, or the entry sees it dozing and rouses it. */
static _Atomic int dozing;
static pthread_mutex_t doze_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t doze_cond = PTHREAD_COND_INITIALIZER;

static void rouse(void) {
  pthread_mutex_lock(&doze_lock);
  atomic_store(&dozing, 0);
  pthread_cond_signal(&doze_cond);
  pthread_mutex_unlock(&doze_lock);
}

/* The memory cap holds inside policy code: an allocation there that would
 * take the state past max_bytes fails, which LuaJIT raises as "not enough
 * memory" in the policy code, and the guarded call answers 503. The
 * broker's own code is never refused (its tables are bounded by design),
 * so a full state costs policy calls, not the broker. The capping
 * allocator wraps LuaJIT's own and is installed only while policy code
 * runs, so the broker's allocations cost what they did; lua_bytes starts
 * each time from LuaJIT's own count of the state's bytes. */
static lua_Alloc lj_alloc;
static void *lj_alloc_ud;
static int64_t lua_bytes, max_bytes, cap;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  if (ptr == NULL) osize = 0;
  int64_t grow = (int64_t)nsize - (int64_t)osize;
  if (grow > 0 && lua_bytes + grow > cap) return NULL;
  void *p = lj_alloc(lj_alloc_ud, ptr, osize, nsize);
  if (p != NULL || nsize == 0) lua_bytes += grow;
  return p;
}

/* lua_gc's counts and lua_setallocf only read and set fields of the
 * global state, which is why an FFI call may use them. */
static void cap_on(int candidate) {
  cap = candidate ? max_bytes - max_bytes / 4 : max_bytes;
  lua_bytes = (int64_t)lua_gc(state, LUA_GCCOUNT, 0) * 1024 +
              lua_gc(state, LUA_GCCOUNTB, 0);
  lua_setallocf(state, capped_alloc, NULL);
}

static void cap_off(void) { lua_setallocf(state, lj_alloc, lj_alloc_ud); }

void ephd_ffi_policy_enter(int candidate) {
  atomic_store(&deadline, uv_hrtime() + budget_ns);
  if (atomic_load(&dozing)) rouse();
  if (max_bytes) cap_on(candidate);
}

/* The debug hook goes only here, once the policy code it stopped has
 * been left: until then it must keep raising. */
void ephd_ffi_policy_leave(void) {
  if (max_bytes) cap_off();
  atomic_store_explicit(&deadline, 0, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
  if (hooked) {
    hooked = 0;
    lua_sethook(state, NULL, 0, 0);
  }
}

int ephd_policy_overran(void) {
  uint64_t d = atomic_load_explicit(&deadline, memory_order_relaxed);
  return d != 0 && uv_hrtime() > d;
}

int ephd_policy_running(void) {
  return atomic_load_explicit(&deadline, memory_order_relaxed) != 0;
}

uint64_t ephd_watchdog_interrupts(void) { return atomic_load(&interrupts); }

/* Runs at every instruction, call and return once the budget is spent,
 * until ephd_ffi_policy_leave: each instruction of the operator's code raises
 * again, so a hook that catches the error with pcall and carries on meets
 * it at its next instruction, and only leaving gets it out. The broker's
 * own code on the way out (the guarded call in ephd.hooks) is let run. */
static void overrun(lua_State *L, lua_Debug *ar) {
  if (!ephd_policy_running()) return;
  if (!lua_getinfo(L, "S", ar)) return;
  for (int i = 0; i < EPHD_GUARD_SLOTS; i++)
    if (guarded_len[i] && strncmp(ar->source, guarded[i], guarded_len[i]) == 0)
      luaL_error(L, "the policy hook ran past its time budget");
}

/* On the loop thread, asynchronously: setting a hook is what lua_sethook is
 * safe to do from a signal handler (luajit.c stops code on SIGINT so). */
static void on_interrupt(int sig) {
  (void)sig;
  if (atomic_load_explicit(&deadline, memory_order_relaxed) == 0) return;
  hooked = 1;
  lua_sethook(state, overrun, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void doze(void) {
  pthread_mutex_lock(&doze_lock);
  atomic_store(&dozing, 1);
  /* An entry that missed the flag left its deadline for us to see. */
  if (atomic_load(&deadline) != 0) atomic_store(&dozing, 0);
  while (atomic_load(&dozing) && atomic_load(&running))
    pthread_cond_wait(&doze_cond, &doze_lock);
  pthread_mutex_unlock(&doze_lock);
}

static void *watch(void *arg) {
  (void)arg;
  uint64_t signalled_for = 0;
  int quiet = 0;
  while (atomic_load(&running)) {
    uv_sleep(TICK_MS);
    uint64_t d = atomic_load_explicit(&deadline, memory_order_relaxed);
    if (d && uv_hrtime() > d && d != signalled_for) {
      signalled_for = d;
      atomic_fetch_add(&interrupts, 1);
      pthread_kill(loop_thread, INTERRUPT);
    }
    /* A tick that finds no policy code running is quiet. A busy broker may
     * doze between two short hooks; the next one rouses it, so that costs
     * one wake-up a second at most. */
    quiet = d == 0 ? quiet + 1 : 0;
    if (quiet >= QUIET_TICKS) {
      doze();
      quiet = 0;
    }
  }
  return NULL;
}

int ephd_watchdog_start(lua_State *L, uint64_t budget_ms, uint64_t max_mem,
                        const char *policy_dir) {
  state = L;
  budget_ns = budget_ms * 1000000;
  max_bytes = (int64_t)max_mem;
  lj_alloc = lua_getallocf(L, &lj_alloc_ud);
  ephd_watchdog_guard(EPHD_GUARD_LIVE, policy_dir);
  loop_thread = pthread_self();
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(INTERRUPT, &sa, NULL) != 0) return -1;
  /* Only the loop thread takes the interrupt. */
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, INTERRUPT);
  pthread_sigmask(SIG_BLOCK, &block, NULL);
  atomic_store(&running, 1);
  int rc = pthread_create(&thread, NULL, watch, NULL);
  pthread_sigmask(SIG_UNBLOCK, &block, NULL);
  return rc == 0 ? 0 : -1;
}

void ephd_watchdog_guard(ephd_guard_slot_t slot, const char *dir) {
  int n = dir ? snprintf(guarded[slot], sizeof(guarded[slot]), "@%s/", dir) : 0;
  guarded_len[slot] =
      n > 0 && (size_t)n < sizeof(guarded[slot]) ? (size_t)n : 0;
}

void ephd_watchdog_stop(void) {
  if (!atomic_load(&running)) return;
  atomic_store(&running, 0);
  rouse();
  pthread_join(thread, NULL);
}
