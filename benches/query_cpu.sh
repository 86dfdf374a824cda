#!/bin/bash
# Server CPU per query (issue 13: fixed cost and narrow scans). Loads TSBS cpu-only
# (100 hosts x 24 h, 864k rows) with `bench load`, compacts, then runs
# benches/query_cpu.py for each KIND in alternation, ROUNDS times, simple protocol.
# usage: bash benches/query_cpu.sh BIN [ROUNDS] [KINDS]   (BIN: a release `sundial` binary;
#   KINDS: default "one empty sg", see query_cpu.py)
# AUTH=1: SCRAM authentication on, data loaded with HTTP Basic credentials, queries run
#   by a role that is no superuser (GRANT SELECT), so every statement's privileges are
#   checked.
BIN=$1; ROUNDS=${2:-3}; KINDS=${3:-one empty sg}; D=/tmp/qcpu; HERE=$(dirname "$0"); rm -rf $D; mkdir -p $D
CRED=(); SU=postgres
if [ "${AUTH:-0}" = 1 ]; then
  export SUNDIAL_SUPERUSER_PASSWORD=bench PGPASSWORD=bench; CRED=(--auth sundial:bench); SU=sundial
fi
$BIN serve --data-dir $D --pg-addr 127.0.0.1:15434 --http-addr 127.0.0.1:18088 > $D.log 2>&1 &
PID=$!; sleep 2
$BIN bench load --url http://127.0.0.1:18088 --scale 100 --workers 2 --batch-size 5000 --limit 864000 "${CRED[@]}" > $D.load 2>&1
psql -h 127.0.0.1 -p 15434 -U $SU -d benchmark -qAt -c 'SELECT sundial_compact()' >/dev/null
if [ "${AUTH:-0}" = 1 ]; then
  psql -h 127.0.0.1 -p 15434 -U sundial -d benchmark -qAt \
    -c "CREATE ROLE reader LOGIN PASSWORD 'bench'" -c 'GRANT SELECT ON cpu TO reader'
  export QUERY_USER=reader
fi
sleep 60
echo "data: $(find $D -name '*.parquet' | xargs stat -c %s | paste -sd+ | bc) bytes of Parquet"
for r in $(seq $ROUNDS); do
  for k in $KINDS; do
    N=2000; [ $k = sg ] && N=800; [ $k = wide ] && N=100
    SIMPLE=1 python3 $HERE/query_cpu.py $PID 15434 $k $N
  done
done
kill $PID; wait $PID 2>/dev/null
