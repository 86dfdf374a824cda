#!/bin/bash
# Fixed cost of a statistics-answered aggregate sent with a new window each time (one
# query shape): loads TSBS cpu-only (100 hosts x 24 h, 864k rows) with `bench load`,
# compacts, shows the EXPLAIN path, then runs pgbench (simple protocol, one client,
# 10 s, three times) and prints the plan-cache counters. Issue 13, item 1.
# usage: bash benches/stats_shape_cost.sh BIN LABEL   (BIN: a release `sundial` binary)
BIN=$1; L=$2; D=/tmp/fc-$L; rm -rf $D; mkdir -p $D
$BIN serve --data-dir $D --pg-addr 127.0.0.1:15433 --http-addr 127.0.0.1:18087 > $D.log 2>&1 &
PID=$!; sleep 2
$BIN bench load --url http://127.0.0.1:18087 --scale 100 --workers 2 --batch-size 5000 --limit 864000 > $D.load 2>&1
psql -h 127.0.0.1 -p 15433 -U postgres -d benchmark -qAt -c 'SELECT sundial_compact()' >/dev/null
cat > $D.sql <<'Q'
\set d random(10, 28)
SELECT count(*), min(usage_user), max(usage_user) FROM cpu WHERE time >= '2015-12-:d 00:00:00+00' AND time < '2016-01-03 00:00:00+00';
Q
psql -h 127.0.0.1 -p 15433 -U postgres -d benchmark -At -c "EXPLAIN SELECT count(*), min(usage_user), max(usage_user) FROM cpu WHERE time >= '2015-12-11 00:00:00+00' AND time < '2016-01-03 00:00:00+00'" | grep -i "FileStats\|plan_cache"
for i in 1 2 3; do
  pgbench -n -M simple -T 10 -c 1 -r -f $D.sql -h 127.0.0.1 -p 15433 -U postgres benchmark 2>/dev/null | grep -E "latency average|tps"
done
curl -s http://127.0.0.1:18087/metrics | grep -E "^sundial_sql_plan_hits_bound_total|^sundial_sql_plans_kept"
kill $PID; wait $PID 2>/dev/null
