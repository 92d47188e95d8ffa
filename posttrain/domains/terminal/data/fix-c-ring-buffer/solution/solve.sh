#!/bin/bash
# Off-by-ones: the full check lets cap+1 elements in, head/tail wrap one slot too late (writing past
# the storage), and peek accepts i == count.
set -e
sed -i \
  -e 's/if (r->count > r->cap)/if (r->count >= r->cap)/' \
  -e 's/if (r->tail > r->cap)/if (r->tail == r->cap)/' \
  -e 's/if (r->head > r->cap)/if (r->head == r->cap)/' \
  -e 's/if (i > r->count)/if (i >= r->count)/' \
  ring.c
make test
make clean
