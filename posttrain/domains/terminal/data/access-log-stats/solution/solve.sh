#!/bin/bash
set -e
awk '{print $9}' access.log | sort -n | uniq -c | awk '{print $2, $1}' > status_counts.txt
awk '{print $1}' access.log | sort | uniq -c | sort -k1,1nr -k2,2 | head -n 3 | awk '{print $2, $1}' > top_ips.txt
cat status_counts.txt top_ips.txt
