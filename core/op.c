#include "op.h"

#include <stdlib.h>
#include <string.h>

/* Operations not in use, most recently released first. It holds as many as
 * were ever in flight at once, up to KEEP_FREE: a crowd of parked pops
 * that leaves gives the rest back. */
#define KEEP_FREE 64
/* What a free operation keeps of its buffers: more is given back, so one
 * large body does not pin its scan's memory. */
#define KEEP_BYTES 4096

static ephd_op_state_t *free_ops;
static size_t nfree;

static void shrink(ephd_buf_t *b) {
  if (b->cap > KEEP_BYTES) ephd_buf_free(b);
}

static void op_free(ephd_op_state_t *op) {
  ephd_buf_free(&op->names);
  ephd_buf_free(&op->items);
  ephd_buf_free(&op->key);
  ephd_buf_free(&op->value);
  free(op);
}

void ephd_op_attach(ephd_request_t *req) {
  ephd_op_state_t *op = free_ops;
  if (op) {
    free_ops = op->next_free;
    nfree--;
  } else {
    op = calloc(1, sizeof(*op));
    if (op == NULL) abort();
  }
  op->scanned = NULL;
  op->frame.len = 0;
  op->batch_bytes = SIZE_MAX;
  op->pub.has_created = 0;
  req->op = &op->pub;
}

void ephd_op_release(ephd_request_t *req) {
  ephd_op_state_t *op = ephd_op_of(req);
  req->op = NULL;
  if (op == NULL) return;
  if (nfree >= KEEP_FREE) {
    op_free(op);
    return;
  }
  /* One test on the way of every request; whoever uses a buffer next
   * resets its length. */
  if ((op->names.cap | op->items.cap | op->key.cap | op->value.cap) >
      KEEP_BYTES) {
    shrink(&op->names);
    shrink(&op->items);
    shrink(&op->key);
    shrink(&op->value);
  }
  op->next_free = free_ops;
  free_ops = op;
  nfree++;
}

void ephd_op_close(void) {
  while (free_ops) {
    ephd_op_state_t *op = free_ops;
    free_ops = op->next_free;
    op_free(op);
  }
  nfree = 0;
}
