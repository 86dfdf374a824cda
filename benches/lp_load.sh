#!/usr/bin/env bash
# Starts BIN (a sundial binary) on a fresh data directory and runs `sundial bench load` (TSBS
# cpu-only, 10M rows, 4 workers x 5000 lines) against it; prints the summary and peak RSS.
# usage: benches/lp_load.sh BIN LABEL (ports 15432 and 18086 must be free)
set -u
BIN=$1; LABEL=$2
D=$(mktemp -d /tmp/lpbench.XXXX)
$BIN serve --data-dir $D/data --pg-addr 127.0.0.1:15432 --http-addr 127.0.0.1:18086 > $D/server.log 2>&1 &
SP=$!
for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:18086/ping && break; sleep 0.2; done
$BIN bench load --url http://127.0.0.1:18086 --scale 4000 --workers 4 --batch-size 5000 --limit 10000000 > $D/load.txt 2>&1
echo "== $LABEL"; tail -5 $D/load.txt
grep VmHWM /proc/$SP/status
kill $SP; wait $SP 2>/dev/null
rm -rf $D
