#!/bin/bash
# 1. Makefile recipes are indented with spaces; make needs a tab ("missing separator").
# 2. mathutil.h lacks the prototype of ipow, so main.c fails with an implicit declaration.
set -e
sed -i 's/^    /\t/' Makefile
sed -i 's/^long long lcm(long long a, long long b);$/&\nlong long ipow(long long base, int exp);/' mathutil.h
make clean
make
./calc pow 3 4
