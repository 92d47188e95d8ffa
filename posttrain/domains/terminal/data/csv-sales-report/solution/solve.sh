#!/bin/bash
set -e
cat > summarize.sh <<'SH'
#!/bin/bash
# Per-region orders, units and revenue of sales.csv into report.csv, with a TOTAL line.
set -e
{
  echo "region,orders,units,revenue"
  awk -F, 'NR > 1 && NF >= 5 {
      orders[$2]++; units[$2] += $4; revenue[$2] += $4 * $5
    }
    END { for (r in orders) printf "%s,%d,%d,%.2f\n", r, orders[r], units[r], revenue[r] }' sales.csv | LC_ALL=C sort -t, -k1,1
  awk -F, 'NR > 1 && NF >= 5 { n++; u += $4; v += $4 * $5 }
    END { printf "TOTAL,%d,%d,%.2f\n", n, u, v }' sales.csv
} > report.csv
SH
bash summarize.sh
cat report.csv
