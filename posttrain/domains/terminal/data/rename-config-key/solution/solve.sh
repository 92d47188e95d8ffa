#!/bin/bash
set -e
find conf -type f -name '*.ini' -print0 | xargs -0 sed -i -E 's/^([[:space:]]*)timeout([[:space:]]*=)/\1timeout_sec\2/'
grep -rn 'timeout' conf
