/* A partition's hand-over body (core/cell/transfer.h), as the new owner reads
 * it from a member of the cell. Whatever parses is merged into a ring that
 * already holds messages and a group that took some of them, as
 * ephd_engine_accept does when pushes arrived while the partition was in
 * transit; then every group drains it, and the ring written out again must
 * parse. The engine's books must agree throughout: the cell's bytes are
 * its tenants', and a drained ring holds what no group still needs. */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "engine.h"
#include "ffi.h"
#include "transfer.h"

static void check(int ok) {
  if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *body = malloc(size ? size : 1);
  memcpy(body, data, size);
  ephd_transfer_t t;
  const char *why;
  if (ephd_transfer_parse(body, size, 512, &t, &why) != 0) {
    free(body);
    return 0;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  ephd_engine_t e;
  ephd_engine_config_t config = {
      .epoch = 1,
      .defaults = {1 << 20, 1000, 1, 0, 30, 3, 0, 0},
      .max_cell_bytes = 64 << 20,
      .idle_ms = 60000,
      .max_groups = 8,
  };
  ephd_engine_init(&e, &loop, &config);
  ephd_tenant_limits_t limits;
  memset(&limits, 0, sizeof(limits));
  ephd_queue_t *q =
      ephd_engine_queue_open(&e, "t", 1, body + t.queue_off, t.queue_len);
  ephd_ring_t *r =
      ephd_queue_ring_open(q, body + t.partition_off, t.partition_len);
  /* Two messages pushed here first; group "g" takes one. */
  ephd_push_plan_t plan;
  ephd_span_t spans[2] = {{0, 1}, {1, 1}};
  ephd_engine_plan_push(&e, q->tenant, 1, q, t.queue_len, r, t.partition_len, 2,
                        2, &limits, NULL, &plan);
  check(plan.refusals == 0);
  ephd_engine_push(&e, q, r, "12", spans, 2, &plan, 0);
  ephd_buf_t out;
  ephd_buf_init(&out);
  uint32_t g = ephd_queue_group_open(q, "g", 1);
  ephd_engine_pop(&e, q, r, g, 1, 1, 0, &out, SIZE_MAX);
  ephd_engine_plan_accept(&e, q->tenant, 1, q, t.queue_len, r, t.partition_len,
                          t.nmsgs, t.bytes, &limits, &plan);
  if (plan.refusals == 0) {
    ephd_engine_accept(&e, q, r, &t, 100);
    check(e.cell_bytes == ephd_cost_tenant(1) + q->tenant->bytes);
    for (uint32_t i = 0; i < q->ngroups; i++) {
      out.len = 0;
      while (ephd_engine_pop(&e, q, r, i, 1000, 1, 100, &out, SIZE_MAX) > 0)
        out.len = 0;
      check(ephd_engine_available(q, r, i, UINT64_MAX) == 0);
    }
    check(e.cell_bytes == ephd_cost_tenant(1) + q->tenant->bytes);
    ephd_buf_t wire;
    ephd_buf_init(&wire);
    ephd_transfer_write(&wire, q, r, 200);
    ephd_transfer_t again;
    check(ephd_transfer_parse(wire.base, wire.len, 512, &again, &why) == 0);
    ephd_transfer_free(&again);
    ephd_buf_free(&wire);
  }
  ephd_buf_free(&out);
  ephd_transfer_free(&t);
  ephd_engine_close(&e);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(body);
  return 0;
}
