#include "mathutil.h"

long long gcd(long long a, long long b)
{
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b != 0) {
        long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

long long lcm(long long a, long long b)
{
    if (a == 0 || b == 0)
        return 0;
    long long g = gcd(a, b);
    long long r = a / g * b;
    return r < 0 ? -r : r;
}

long long ipow(long long base, int exp)
{
    long long result = 1;
    while (exp > 0) {
        if (exp & 1)
            result *= base;
        base *= base;
        exp >>= 1;
    }
    return result;
}
