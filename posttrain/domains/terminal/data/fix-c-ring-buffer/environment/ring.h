#ifndef RING_H
#define RING_H

#include <stddef.h>

/* A fixed-capacity FIFO of ints over caller-provided storage of exactly `cap` ints. */
typedef struct {
    int *data;
    size_t cap;
    size_t head;   /* index of the oldest element */
    size_t tail;   /* index where the next element goes */
    size_t count;  /* number of elements stored */
} ring_t;

void ring_init(ring_t *r, int *storage, size_t cap);
int ring_push(ring_t *r, int value);                  /* 0, or -1 when the ring is full */
int ring_pop(ring_t *r, int *out);                    /* 0 and the oldest element, or -1 when empty */
int ring_peek(const ring_t *r, size_t i, int *out);   /* 0 and the i-th oldest (0 = oldest), or -1 */
size_t ring_count(const ring_t *r);

#endif
