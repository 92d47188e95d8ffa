#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mathutil.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: calc gcd|lcm|pow A B\n");
        return 2;
    }
    long long a = atoll(argv[2]);
    long long b = atoll(argv[3]);
    if (strcmp(argv[1], "gcd") == 0)
        printf("%lld\n", gcd(a, b));
    else if (strcmp(argv[1], "lcm") == 0)
        printf("%lld\n", lcm(a, b));
    else if (strcmp(argv[1], "pow") == 0 && b >= 0)
        printf("%lld\n", ipow(a, (int)b));
    else {
        fprintf(stderr, "calc: unknown operation %s\n", argv[1]);
        return 2;
    }
    return 0;
}
