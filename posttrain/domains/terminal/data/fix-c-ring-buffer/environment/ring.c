#include "ring.h"

void ring_init(ring_t *r, int *storage, size_t cap)
{
    r->data = storage;
    r->cap = cap;
    r->head = 0;
    r->tail = 0;
    r->count = 0;
}

int ring_push(ring_t *r, int value)
{
    if (r->count > r->cap)
        return -1;
    r->data[r->tail] = value;
    r->tail++;
    if (r->tail > r->cap)
        r->tail = 0;
    r->count++;
    return 0;
}

int ring_pop(ring_t *r, int *out)
{
    if (r->count == 0)
        return -1;
    *out = r->data[r->head];
    r->head++;
    if (r->head > r->cap)
        r->head = 0;
    r->count--;
    return 0;
}

int ring_peek(const ring_t *r, size_t i, int *out)
{
    if (i > r->count)
        return -1;
    *out = r->data[(r->head + i) % r->cap];
    return 0;
}

size_t ring_count(const ring_t *r)
{
    return r->count;
}
