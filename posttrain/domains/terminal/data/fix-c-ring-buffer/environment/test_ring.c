/* Test harness for ring.c: `make test` builds and runs it. Storage sits between guard cells. */
#include <stdio.h>

#include "ring.h"

#define CAP 4
#define GUARD 0x5A5A5A5A

static int failures = 0;

#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("FAIL line %d: ", __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)

int main(void)
{
    int mem[CAP + 2];
    int *storage = mem + 1;
    ring_t r;
    int v = 0;

    mem[0] = GUARD;
    mem[CAP + 1] = GUARD;
    ring_init(&r, storage, CAP);

    CHECK(ring_pop(&r, &v) == -1, "pop from an empty ring should fail");
    for (int i = 0; i < CAP; i++)
        CHECK(ring_push(&r, 10 + i) == 0, "push %d of %d should succeed", i + 1, CAP);
    CHECK(ring_push(&r, 99) == -1, "push into a full ring should fail");
    CHECK(ring_count(&r) == CAP, "count should be %d, got %zu", CAP, ring_count(&r));
    CHECK(ring_peek(&r, CAP, &v) == -1, "peek at index %d of %d elements should fail", CAP, CAP);

    /* wrap around several times: pop one, push one */
    for (int round = 0; round < 3 * CAP; round++) {
        CHECK(ring_pop(&r, &v) == 0 && v == 10 + round, "round %d: pop should give %d, got %d", round,
              10 + round, v);
        CHECK(ring_push(&r, 10 + CAP + round) == 0, "round %d: push after pop should succeed", round);
        for (int i = 0; i < CAP; i++) {
            v = -1;
            CHECK(ring_peek(&r, i, &v) == 0 && v == 11 + round + i, "round %d: peek(%d) should give %d, got %d",
                  round, i, 11 + round + i, v);
        }
    }
    CHECK(mem[0] == GUARD && mem[CAP + 1] == GUARD, "memory outside the storage was overwritten");

    if (failures == 0)
        printf("all ring tests passed\n");
    return failures == 0 ? 0 : 1;
}
