#!/bin/bash
set -e
for path in inbox/*; do
  [ -f "$path" ] || continue
  name=$(basename "$path")
  case "$name" in
    *.*) ext="${name##*.}" ;;
    *) ext=other ;;
  esac
  mkdir -p "sorted/$ext"
  mv "$path" "sorted/$ext/$name"
done
find sorted -type f | sort
