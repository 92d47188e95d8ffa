#!/bin/bash
set -e
awk 'BEGIN { print "id,customer,total,status" }
     $3 ~ /^order=/ {
       for (i = 3; i <= 6; i++) sub(/^[a-z]+=/, "", $i)
       print $3 "," $4 "," $5 "," $6
     }' orders.log > orders.csv
{
  echo "id,customer,cents"
  awk -F, 'NR > 1 && $4 == "paid" { split($3, p, "."); print $1 "," $2 "," p[1] * 100 + p[2] }' orders.csv | sort -t, -k1,1n
} > paid.csv
python3 - <<'PY'
import csv, json
rows = list(csv.DictReader(open("paid.csv")))
by_customer = {}
for row in rows:
    by_customer[row["customer"]] = by_customer.get(row["customer"], 0) + int(row["cents"])
summary = {"paid_orders": len(rows), "paid_cents": sum(by_customer.values()), "by_customer": by_customer}
open("summary.json", "w").write(json.dumps(summary, indent=2) + "\n")
PY
cat summary.json
