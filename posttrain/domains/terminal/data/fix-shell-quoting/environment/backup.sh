#!/bin/bash
# Back up every regular file directly inside a folder (default: docs) into backup/ as NAME.bak,
# then print how many files were backed up.
src=${1:-docs}
mkdir -p backup
count=0
for f in $(ls $src); do
    [ -f $src/$f ] || continue
    cp $src/$f backup/$f.bak
    count=$((count + 1))
done
echo "backed up $count files"
