#!/bin/bash
# Loads TSBS cpu-only (100 hosts x 24 h, 864k rows) with `sundial bench load`, compacts,
# then times three avg-of-integer queries six times each through psql (process start
# included). Used for the issue 12 avg-of-integers check in BENCHMARKS.md.
# usage: avgbench.sh BIN LABEL
BIN=$1; L=$2; D=/tmp/avgb-$L; rm -rf $D; mkdir -p $D
$BIN serve --data-dir $D --pg-addr 127.0.0.1:15432 --http-addr 127.0.0.1:18086 > $D.log 2>&1 &
PID=$!; sleep 2
$BIN bench load --url http://127.0.0.1:18086 --scale 100 --workers 2 --batch-size 5000 --limit 864000 > $D.load 2>&1
psql -h 127.0.0.1 -p 15432 -U postgres -d benchmark -qAt -c 'SELECT sundial_compact()' >/dev/null
Q1="SELECT time_bucket('1 hour', time) AS hour, hostname, avg(usage_user) FROM cpu WHERE time >= '2016-01-01 02:00:00+00' AND time < '2016-01-01 14:00:00+00' GROUP BY 1, 2 ORDER BY 1, 2"
Q2="SELECT time_bucket('1 hour', time) AS hour, hostname, avg(usage_user), avg(usage_system), avg(usage_idle), avg(usage_nice), avg(usage_iowait), avg(usage_irq), avg(usage_softirq), avg(usage_steal), avg(usage_guest), avg(usage_guest_nice) FROM cpu WHERE time >= '2016-01-01 02:00:00+00' AND time < '2016-01-01 14:00:00+00' GROUP BY 1, 2 ORDER BY 1, 2"
Q3="SELECT avg(usage_user) FROM cpu"
for name in Q1 Q2 Q3; do
  q=${!name}
  for i in 1 2 3 4 5 6; do
    s=$(date +%s%N); psql -h 127.0.0.1 -p 15432 -U postgres -d benchmark -qAt -c "$q /* $i */" > /tmp/avgb-$L-$name.out; e=$(date +%s%N)
    echo "$L $name run$i $(( (e-s)/1000 )) us"
  done
done
kill $PID; wait $PID 2>/dev/null
