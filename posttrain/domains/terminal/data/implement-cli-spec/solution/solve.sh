#!/bin/bash
set -e
cat > tally.py <<'PY'
"""Count the words of a text file: python3 tally.py [--ignore-case] [--top N] [--min-length L] FILE"""

import argparse
import re
import sys
from collections import Counter


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def main():
    parser = argparse.ArgumentParser(prog="tally", description="Count the words of a text file.")
    parser.add_argument("file")
    parser.add_argument("--ignore-case", action="store_true")
    parser.add_argument("--top", type=positive)
    parser.add_argument("--min-length", type=int, default=1)
    args = parser.parse_args()
    try:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"tally: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 1
    words = re.findall(r"[A-Za-z]+", text)
    if args.ignore_case:
        words = [w.lower() for w in words]
    counts = Counter(w for w in words if len(w) >= args.min_length)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if args.top is not None:
        rows = rows[: args.top]
    for word, count in rows:
        print(f"{count} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY
python3 tally.py --ignore-case --top 3 sample.txt
