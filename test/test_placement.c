#include <stdio.h>

#include "placement.h"
#include "test.h"

#define KEYS 100000
#define MAX_MEMBERS 16

/* Ids as brokers draw them: 64 random bits (here from a fixed sequence, so
 * every run sees the same cell). */
static uint64_t next_id(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static ephd_member_t members[MAX_MEMBERS];

static ephd_view_t cell(uint32_t n, uint64_t seed) {
  for (uint32_t i = 0; i < n; i++) {
    members[i].id = next_id(&seed);
    members[i].epoch = i + 1;
    snprintf(members[i].address, sizeof(members[i].address),
             "http://10.0.0.%u:6632", i + 1);
  }
  ephd_view_t v = {members, n, 0};
  return v;
}

/* Key i of the test's many: a few tenants, a hundred queues, and
 * partitions named as clients name them. */
static uint64_t owner_of(const ephd_view_t *v, int i) {
  char tenant[40], queue[16], partition[24];
  int tl = snprintf(tenant, sizeof(tenant),
                    "00000000-0000-0000-0000-00000000000%d", i % 3);
  int ql = snprintf(queue, sizeof(queue), "q%d", i % 100);
  int pl = snprintf(partition, sizeof(partition), "room-%d", i);
  return ephd_placement_owner(v, tenant, (size_t)tl, queue, (size_t)ql,
                              partition, (size_t)pl)
      ->id;
}

static uint64_t owners[KEYS];

/* The hash is the cell's protocol: these values (computed apart from this
 * code, from placement.h's description) may never change, or brokers of
 * two builds would place the same partition apart. */
TEST_IMPL(placement_pinned_vectors) {
  ASSERT_EQ(ephd_placement_key("", 0, "", 0, "", 0), 0x365afc61535b3920ULL);
  const char *t = "00000000-0000-0000-0000-000000000001";
  uint64_t key = ephd_placement_key(t, 36, "presence", 8, "Default", 7);
  ASSERT_EQ(key, 0xbc7d23cb9482c7c8ULL);
  ASSERT_EQ(ephd_placement_score(1, 2), 0x4e0fcd7162342871ULL);
  ASSERT_EQ(ephd_placement_score(0x0123456789abcdefULL, key),
            0xe82a82d757d0296eULL);
  ephd_member_t m[3] = {{0x0123456789abcdefULL, 1, "http://a:1"},
                        {0x1111111111111111ULL, 2, "http://b:1"},
                        {0xfedcba9876543210ULL, 3, "http://c:1"}};
  ephd_view_t v = {m, 3, 1};
  ASSERT_EQ(ephd_placement_owner(&v, t, 36, "presence", 8, "Default", 7)->id,
            0x0123456789abcdefULL);
  return 0;
}

/* The owners of a thousand keys in a fixed cell of three: the counts, and
 * the first forty owners by index. ephd.placement, the Lua copy a client
 * routes by, is held to the same figures (spec/ephd/placement_spec.lua):
 * a client and the brokers must place every key alike. */
TEST_IMPL(placement_owners_of_keys) {
  ephd_member_t m[3] = {{0x0123456789abcdefULL, 1, "http://a:1"},
                        {0x1111111111111111ULL, 2, "http://b:1"},
                        {0xfedcba9876543210ULL, 3, "http://c:1"}};
  ephd_view_t v = {m, 3, 0};
  static const char first[] = "1112212111110001212001112001201210211221";
  int count[3] = {0, 0, 0};
  for (int i = 0; i < 1000; i++) {
    uint64_t id = owner_of(&v, i);
    int o = id == m[0].id ? 0 : id == m[1].id ? 1 : 2;
    count[o]++;
    if (i < 40) ASSERT_EQ(o, first[i] - '0');
  }
  ASSERT_EQ(count[0], 337);
  ASSERT_EQ(count[1], 330);
  ASSERT_EQ(count[2], 333);
  return 0;
}

TEST_IMPL(placement_frames_names) {
  uint64_t a = ephd_placement_key("ab", 2, "c", 1, "p", 1);
  uint64_t b = ephd_placement_key("a", 1, "bc", 2, "p", 1);
  uint64_t c = ephd_placement_key("abc", 3, "", 0, "p", 1);
  ASSERT_NE(a, b);
  ASSERT_NE(a, c);
  ASSERT_NE(b, c);
  /* A trailing zero byte is a different name. */
  ASSERT_NE(ephd_placement_key("t", 1, "q", 1, "p", 1),
            ephd_placement_key("t", 1, "q", 1, "p\0", 2));
  return 0;
}

/* Two brokers with the same view agree, whatever order they listed it in
 * (the view is sorted by id, but the owner does not depend on it). */
TEST_IMPL(placement_deterministic) {
  ephd_view_t v = cell(5, 1);
  for (int i = 0; i < 1000; i++) owners[i] = owner_of(&v, i);
  ephd_member_t reversed[5];
  for (int i = 0; i < 5; i++) reversed[i] = members[4 - i];
  ephd_view_t r = {reversed, 5, 0};
  for (int i = 0; i < 1000; i++) {
    ASSERT_EQ(owner_of(&v, i), owners[i]);
    ASSERT_EQ(owner_of(&r, i), owners[i]);
  }
  return 0;
}

TEST_IMPL(placement_cell_of_one) {
  ephd_view_t v = cell(1, 7);
  ASSERT_EQ(owner_of(&v, 42), members[0].id);
  return 0;
}

static int index_of(uint64_t id, uint32_t n) {
  for (uint32_t m = 0; m < n; m++)
    if (members[m].id == id) return (int)m;
  return -1;
}

/* Every member holds its share within 5% of it, for cells of 2 to 16. */
TEST_IMPL(placement_balances) {
  uint32_t sizes[] = {2, 3, 5, 8, 16};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    uint32_t n = sizes[s];
    ephd_view_t v = cell(n, 100 + n);
    int count[MAX_MEMBERS] = {0};
    for (int i = 0; i < KEYS; i++) count[index_of(owner_of(&v, i), n)]++;
    int fair = KEYS / (int)n;
    for (uint32_t m = 0; m < n; m++) {
      ASSERT_GE(count[m], fair - fair / 20);
      ASSERT_GE(fair + fair / 20, count[m]);
    }
  }
  return 0;
}

/* A member joining takes about 1/N of the keys, every one of them from
 * the others to itself: no key moves between the members that stayed. */
TEST_IMPL(placement_join_moves_one_nth_to_it) {
  for (uint32_t n = 2; n <= 8; n++) {
    ephd_view_t v = cell(n, 200 + n);
    for (int i = 0; i < KEYS; i++) owners[i] = owner_of(&v, i);
    ephd_view_t grown = cell(n + 1, 200 + n); /* the same n, and one more */
    uint64_t joined = members[n].id;
    int moved = 0;
    for (int i = 0; i < KEYS; i++) {
      uint64_t now = owner_of(&grown, i);
      if (now == owners[i]) continue;
      ASSERT_EQ(now, joined);
      moved++;
    }
    int fair = KEYS / (int)(n + 1);
    ASSERT_GE(moved, fair - fair / 20);
    ASSERT_GE(fair + fair / 20, moved);
  }
  return 0;
}

/* A member leaving gives up its keys, spread over the others; no other
 * key moves. */
TEST_IMPL(placement_leave_moves_only_its_keys) {
  uint32_t n = 5;
  ephd_view_t v = cell(n, 300);
  for (int i = 0; i < KEYS; i++) owners[i] = owner_of(&v, i);
  for (uint32_t gone = 0; gone < n; gone++) {
    cell(n, 300);
    uint64_t gone_id = members[gone].id;
    members[gone] = members[n - 1];
    ephd_view_t shrunk = {members, n - 1, 0};
    int took[MAX_MEMBERS] = {0}, orphans = 0;
    for (int i = 0; i < KEYS; i++) {
      uint64_t now = owner_of(&shrunk, i);
      ASSERT_NE(now, gone_id);
      if (owners[i] != gone_id) {
        ASSERT_EQ(now, owners[i]);
        continue;
      }
      took[index_of(now, n - 1)]++;
      orphans++;
    }
    /* Each of the four that stayed takes a quarter of them, within 10%. */
    int fair = orphans / (int)(n - 1);
    for (uint32_t m = 0; m < n - 1; m++) {
      ASSERT_GE(took[m], fair - fair / 10);
      ASSERT_GE(fair + fair / 10, took[m]);
    }
  }
  return 0;
}

/* Equal scores go to the smaller id (distinct ids never score a key
 * alike, but the order is total all the same). */
TEST_IMPL(placement_ties_by_id) {
  ASSERT(ephd_placement_wins(5, 2, 5, 3));
  ASSERT(!ephd_placement_wins(5, 3, 5, 2));
  ASSERT(ephd_placement_wins(6, 9, 5, 1));
  ASSERT(!ephd_placement_wins(5, 1, 6, 9));
  ASSERT(!ephd_placement_wins(5, 1, 5, 1));
  return 0;
}
