/* An intrusive doubly linked list: a node is a field of what it links, and
 * the list keeps its two ends and its length, so linking, unlinking and
 * taking either end are O(1) and allocate nothing. Every list of the core
 * is one of these (queues by kind, tenants without queues, a gate's
 * waiters, the relay's requests and idle connections, the transport's
 * connections and lines, hand-overs waiting to be sent), so unlinking is
 * written once. A zeroed node is unlinked, as is one removed. */
#ifndef EPHD_LIST_H
#define EPHD_LIST_H

#include <stddef.h>

typedef struct ephd_node {
  struct ephd_node *prev, *next;
} ephd_node_t;

typedef struct {
  ephd_node_t *head, *tail;
  size_t count;
} ephd_list_t;

/* What node n is the `field` of; NULL for no node, so a loop can end on it. */
#define EPHD_ENTRY(n, type, field) \
  ((n) ? (type *)(void *)((char *)(n)-offsetof(type, field)) : (type *)NULL)

static inline int ephd_list_has(const ephd_list_t *l, const ephd_node_t *n) {
  return n->prev != NULL || l->head == n;
}

static inline void ephd_list_append(ephd_list_t *l, ephd_node_t *n) {
  n->next = NULL;
  n->prev = l->tail;
  if (l->tail)
    l->tail->next = n;
  else
    l->head = n;
  l->tail = n;
  l->count++;
}

static inline void ephd_list_prepend(ephd_list_t *l, ephd_node_t *n) {
  n->prev = NULL;
  n->next = l->head;
  if (l->head)
    l->head->prev = n;
  else
    l->tail = n;
  l->head = n;
  l->count++;
}

static inline void ephd_list_remove(ephd_list_t *l, ephd_node_t *n) {
  if (n->prev)
    n->prev->next = n->next;
  else
    l->head = n->next;
  if (n->next)
    n->next->prev = n->prev;
  else
    l->tail = n->prev;
  n->prev = n->next = NULL;
  l->count--;
}

#endif
