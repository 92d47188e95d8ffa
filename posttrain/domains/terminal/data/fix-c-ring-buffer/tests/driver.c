/* Drives ring.c from stdin: "u V" push, "o" pop, "e I" peek, "c" count; storage sits between guards. */
#include <stdio.h>
#include <stdlib.h>

#include "ring.h"

#define GUARD 0x5A5A5A5A

int main(int argc, char **argv)
{
    size_t cap = (size_t)atoi(argv[1]);
    int *mem = malloc((cap + 2) * sizeof(int));
    ring_t r;
    char op;
    long arg;
    int v;

    for (size_t i = 0; i < cap + 2; i++)
        mem[i] = GUARD;
    ring_init(&r, mem + 1, cap);
    while (scanf(" %c", &op) == 1) {
        if (op == 'u' && scanf("%ld", &arg) == 1)
            puts(ring_push(&r, (int)arg) == 0 ? "ok" : "full");
        else if (op == 'o')
            ring_pop(&r, &v) == 0 ? printf("%d\n", v) : puts("empty");
        else if (op == 'e' && scanf("%ld", &arg) == 1)
            ring_peek(&r, (size_t)arg, &v) == 0 ? printf("%d\n", v) : puts("none");
        else if (op == 'c')
            printf("%zu\n", ring_count(&r));
        if (mem[0] != GUARD || mem[cap + 1] != GUARD) {
            puts("GUARD");
            return 3;
        }
    }
    free(mem);
    return 0;
}
