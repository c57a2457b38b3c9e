#define _GNU_SOURCE /* memmem */
#include "patterns.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stddef.h>
#include <string.h>

#include "watchdog.h"

#define ESC '%'
#define SPECIALS "^$*+?.([%-"
#define MAX_CAPTURES 32
/* Nesting of the matcher's recursion (quantifiers and captures), well
 * inside the loop thread's stack. */
#define MAX_DEPTH 1000
/* Matcher steps between two looks at the clock: a step is a few dozen
 * nanoseconds, so the budget is overshot by microseconds. */
#define CHECK_EVERY 4096
#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)

typedef struct {
  const char *src_init, *src_end;
  lua_State *L;
  int level, depth;
  unsigned steps;
  struct {
    const char *init;
    ptrdiff_t len;
  } capture[MAX_CAPTURES];
} state_t;

static const char *match(state_t *ms, const char *s, const char *p);

static int check_capture(state_t *ms, int l) {
  l -= '1';
  if (l < 0 || l >= ms->level || ms->capture[l].len == CAP_UNFINISHED)
    return luaL_error(ms->L, "invalid capture index");
  return l;
}

static int capture_to_close(state_t *ms) {
  for (int level = ms->level - 1; level >= 0; level--)
    if (ms->capture[level].len == CAP_UNFINISHED) return level;
  return luaL_error(ms->L, "invalid pattern capture");
}

/* The end of the single-character class at p. */
static const char *class_end(state_t *ms, const char *p) {
  switch (*p++) {
    case ESC:
      if (*p == '\0') luaL_error(ms->L, "malformed pattern (ends with '%%')");
      return p + 1;
    case '[':
      if (*p == '^') p++;
      do {
        if (*p == '\0') luaL_error(ms->L, "malformed pattern (missing ']')");
        if (*p++ == ESC && *p != '\0') p++;
      } while (*p != ']');
      return p + 1;
    default:
      return p;
  }
}

static int match_class(int c, int cl) {
  int res;
  switch (tolower(cl)) {
    case 'a':
      res = isalpha(c);
      break;
    case 'c':
      res = iscntrl(c);
      break;
    case 'd':
      res = isdigit(c);
      break;
    case 'g':
      res = isgraph(c);
      break;
    case 'l':
      res = islower(c);
      break;
    case 'p':
      res = ispunct(c);
      break;
    case 's':
      res = isspace(c);
      break;
    case 'u':
      res = isupper(c);
      break;
    case 'w':
      res = isalnum(c);
      break;
    case 'x':
      res = isxdigit(c);
      break;
    case 'z':
      res = c == 0;
      break;
    default:
      return cl == c;
  }
  return islower(cl) ? res : !res;
}

/* p at the '[', last at its ']'. */
static int match_bracket(int c, const char *p, const char *last) {
  int found = 1;
  if (p[1] == '^') {
    found = 0;
    p++;
  }
  while (++p < last) {
    if (*p == ESC) {
      p++;
      if (match_class(c, (unsigned char)*p)) return found;
    } else if (p[1] == '-' && p + 2 < last) {
      p += 2;
      if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p) return found;
    } else if ((unsigned char)*p == c) {
      return found;
    }
  }
  return !found;
}

static int single_match(state_t *ms, const char *s, const char *p,
                        const char *ep) {
  if (s >= ms->src_end) return 0;
  int c = (unsigned char)*s;
  switch (*p) {
    case '.':
      return 1;
    case ESC:
      return match_class(c, (unsigned char)p[1]);
    case '[':
      return match_bracket(c, p, ep - 1);
    default:
      return (unsigned char)*p == c;
  }
}

static const char *match_balance(state_t *ms, const char *s, const char *p) {
  if (p[0] == '\0' || p[1] == '\0')
    luaL_error(ms->L, "missing arguments to '%%b' in pattern");
  if (s >= ms->src_end || *s != *p) return NULL;
  int open = p[0], close = p[1], depth = 1;
  while (++s < ms->src_end) {
    if (*s == close) {
      if (--depth == 0) return s + 1;
    } else if (*s == open) {
      depth++;
    }
  }
  return NULL;
}

static const char *max_expand(state_t *ms, const char *s, const char *p,
                              const char *ep) {
  ptrdiff_t i = 0;
  while (single_match(ms, s + i, p, ep)) i++;
  for (; i >= 0; i--) {
    const char *res = match(ms, s + i, ep + 1);
    if (res) return res;
  }
  return NULL;
}

static const char *min_expand(state_t *ms, const char *s, const char *p,
                              const char *ep) {
  for (;;) {
    const char *res = match(ms, s, ep + 1);
    if (res) return res;
    if (!single_match(ms, s, p, ep)) return NULL;
    s++;
  }
}

static const char *start_capture(state_t *ms, const char *s, const char *p,
                                 ptrdiff_t what) {
  if (ms->level >= MAX_CAPTURES) luaL_error(ms->L, "too many captures");
  ms->capture[ms->level].init = s;
  ms->capture[ms->level].len = what;
  ms->level++;
  const char *res = match(ms, s, p);
  if (res == NULL) ms->level--;
  return res;
}

static const char *end_capture(state_t *ms, const char *s, const char *p) {
  int l = capture_to_close(ms);
  ms->capture[l].len = s - ms->capture[l].init;
  const char *res = match(ms, s, p);
  if (res == NULL) ms->capture[l].len = CAP_UNFINISHED;
  return res;
}

static const char *match_capture(state_t *ms, const char *s, int l) {
  l = check_capture(ms, l);
  size_t len = (size_t)ms->capture[l].len;
  if ((size_t)(ms->src_end - s) >= len &&
      memcmp(ms->capture[l].init, s, len) == 0)
    return s + len;
  return NULL;
}

/* Matches pattern p (NUL-terminated, as Lua 5.1 reads it) at s; returns
 * where the match ends, or NULL. */
static const char *do_match(state_t *ms, const char *s, const char *p) {
  for (;;) {
    switch (*p) {
      case '(':
        if (p[1] == ')') return start_capture(ms, s, p + 2, CAP_POSITION);
        return start_capture(ms, s, p + 1, CAP_UNFINISHED);
      case ')':
        return end_capture(ms, s, p + 1);
      case '\0':
        return s;
      case '$':
        if (p[1] == '\0') return s == ms->src_end ? s : NULL;
        break;
      case ESC:
        if (p[1] == 'b') {
          s = match_balance(ms, s, p + 2);
          if (s == NULL) return NULL;
          p += 4;
          continue;
        }
        if (p[1] == 'f') {
          p += 2;
          if (*p != '[')
            luaL_error(ms->L, "missing '[' after '%%f' in pattern");
          const char *ep = class_end(ms, p);
          int prev = s == ms->src_init ? '\0' : (unsigned char)s[-1];
          int cur = s < ms->src_end ? (unsigned char)*s : '\0';
          if (match_bracket(prev, p, ep - 1) || !match_bracket(cur, p, ep - 1))
            return NULL;
          p = ep;
          continue;
        }
        if (isdigit((unsigned char)p[1])) {
          s = match_capture(ms, s, (unsigned char)p[1]);
          if (s == NULL) return NULL;
          p += 2;
          continue;
        }
        break;
      default:
        break;
    }
    /* A single-character class, maybe quantified. */
    const char *ep = class_end(ms, p);
    int m = single_match(ms, s, p, ep);
    switch (*ep) {
      case '?': {
        const char *res = m ? match(ms, s + 1, ep + 1) : NULL;
        if (res) return res;
        p = ep + 1;
        continue;
      }
      case '*':
        return max_expand(ms, s, p, ep);
      case '+':
        return m ? max_expand(ms, s + 1, p, ep) : NULL;
      case '-':
        return min_expand(ms, s, p, ep);
      default:
        if (!m) return NULL;
        s++;
        p = ep;
    }
  }
}

/* Every recursion comes through here: the depth bound, and the budget. */
static const char *match(state_t *ms, const char *s, const char *p) {
  if (++ms->steps % CHECK_EVERY == 0 && ephd_policy_overran())
    luaL_error(ms->L, "the policy hook ran past its time budget");
  if (++ms->depth > MAX_DEPTH) luaL_error(ms->L, "pattern too complex");
  const char *res = do_match(ms, s, p);
  ms->depth--;
  return res;
}

static void start(state_t *ms, lua_State *L, const char *s, size_t len) {
  ms->L = L;
  ms->src_init = s;
  ms->src_end = s + len;
  ms->steps = 0;
}

static const char *match_at(state_t *ms, const char *s, const char *p) {
  ms->level = 0;
  ms->depth = 0;
  return match(ms, s, p);
}

static void push_capture(state_t *ms, int i, const char *s, const char *e) {
  if (i >= ms->level) {
    if (i != 0) luaL_error(ms->L, "invalid capture index");
    lua_pushlstring(ms->L, s, (size_t)(e - s));
    return;
  }
  ptrdiff_t l = ms->capture[i].len;
  if (l == CAP_UNFINISHED) luaL_error(ms->L, "unfinished capture");
  if (l == CAP_POSITION)
    lua_pushinteger(ms->L, ms->capture[i].init - ms->src_init + 1);
  else
    lua_pushlstring(ms->L, ms->capture[i].init, (size_t)l);
}

/* The captures, or the whole match when there are none (and s is set). */
static int push_captures(state_t *ms, const char *s, const char *e) {
  int n = ms->level == 0 && s ? 1 : ms->level;
  luaL_checkstack(ms->L, n, "too many captures");
  for (int i = 0; i < n; i++) push_capture(ms, i, s, e);
  return n;
}

static int find_aux(lua_State *L, int find) {
  size_t len, plen;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *p = luaL_checklstring(L, 2, &plen);
  ptrdiff_t init = (ptrdiff_t)luaL_optinteger(L, 3, 1);
  if (init < 0) init += (ptrdiff_t)len + 1;
  if (init < 1) init = 1;
  init--;
  if (init > (ptrdiff_t)len) init = (ptrdiff_t)len;
  if (find && (lua_toboolean(L, 4) || strpbrk(p, SPECIALS) == NULL)) {
    const char *at = memmem(s + init, len - (size_t)init, p, plen);
    if (at) {
      lua_pushinteger(L, at - s + 1);
      lua_pushinteger(L, at - s + (ptrdiff_t)plen);
      return 2;
    }
  } else {
    state_t ms;
    start(&ms, L, s, len);
    int anchor = *p == '^';
    if (anchor) p++;
    const char *from = s + init;
    do {
      const char *e = match_at(&ms, from, p);
      if (e) {
        if (!find) return push_captures(&ms, from, e);
        lua_pushinteger(L, from - s + 1);
        lua_pushinteger(L, e - s);
        return push_captures(&ms, NULL, NULL) + 2;
      }
    } while (from++ < ms.src_end && !anchor);
  }
  lua_pushnil(L);
  return 1;
}

static int str_find(lua_State *L) { return find_aux(L, 1); }
static int str_match(lua_State *L) { return find_aux(L, 0); }

static int gmatch_next(lua_State *L) {
  size_t len;
  const char *s = lua_tolstring(L, lua_upvalueindex(1), &len);
  const char *p = lua_tostring(L, lua_upvalueindex(2));
  state_t ms;
  start(&ms, L, s, len);
  for (const char *from = s + lua_tointeger(L, lua_upvalueindex(3));
       from <= ms.src_end; from++) {
    const char *e = match_at(&ms, from, p);
    if (e) {
      /* An empty match moves on by one, or it would match for ever. */
      lua_pushinteger(L, (e - s) + (e == from));
      lua_replace(L, lua_upvalueindex(3));
      return push_captures(&ms, from, e);
    }
  }
  return 0;
}

static int str_gmatch(lua_State *L) {
  luaL_checkstring(L, 1);
  luaL_checkstring(L, 2);
  lua_settop(L, 2);
  lua_pushinteger(L, 0);
  lua_pushcclosure(L, gmatch_next, 3);
  return 1;
}

static void add_string(state_t *ms, luaL_Buffer *b, const char *s,
                       const char *e) {
  size_t len;
  const char *repl = lua_tolstring(ms->L, 3, &len);
  for (size_t i = 0; i < len; i++) {
    if (repl[i] != ESC) {
      luaL_addchar(b, repl[i]);
      continue;
    }
    /* A '%' at the end escapes the string's terminating NUL, as in 5.1. */
    i++;
    if (!isdigit((unsigned char)repl[i])) {
      luaL_addchar(b, repl[i]);
    } else if (repl[i] == '0') {
      luaL_addlstring(b, s, (size_t)(e - s));
    } else {
      push_capture(ms, repl[i] - '1', s, e);
      luaL_addvalue(b);
    }
  }
}

static void add_value(state_t *ms, luaL_Buffer *b, const char *s,
                      const char *e) {
  lua_State *L = ms->L;
  switch (lua_type(L, 3)) {
    case LUA_TFUNCTION: {
      lua_pushvalue(L, 3);
      int n = push_captures(ms, s, e);
      lua_call(L, n, 1);
      break;
    }
    case LUA_TTABLE:
      push_capture(ms, 0, s, e);
      lua_gettable(L, 3);
      break;
    default:
      add_string(ms, b, s, e);
      return;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    lua_pushlstring(L, s, (size_t)(e - s));
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  }
  luaL_addvalue(b);
}

static int str_gsub(lua_State *L) {
  size_t len;
  const char *src = luaL_checklstring(L, 1, &len);
  const char *p = luaL_checkstring(L, 2);
  int tr = lua_type(L, 3);
  luaL_argcheck(L,
                tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION ||
                    tr == LUA_TTABLE,
                3, "string/function/table expected");
  lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)len + 1);
  int anchor = *p == '^';
  if (anchor) p++;
  state_t ms;
  start(&ms, L, src, len);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_Integer n = 0;
  while (n < max) {
    const char *e = match_at(&ms, src, p);
    if (e) {
      n++;
      add_value(&ms, &b, src, e);
    }
    if (e && e > src)
      src = e;
    else if (src < ms.src_end)
      luaL_addchar(&b, *src++);
    else
      break;
    if (anchor) break;
  }
  luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

static const luaL_Reg functions[] = {
    {"find", str_find}, {"match", str_match}, {"gmatch", str_gmatch},
    {"gsub", str_gsub}, {NULL, NULL},
};

void ephd_patterns_install(lua_State *L) {
  lua_getglobal(L, "string");
  for (const luaL_Reg *f = functions; f->name; f++) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, -2, f->name);
  }
  lua_pop(L, 1);
}

int ephd_patterns_open(lua_State *L) {
  lua_newtable(L);
  luaL_register(L, NULL, functions);
  return 1;
}
