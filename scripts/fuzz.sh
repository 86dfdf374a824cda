#!/usr/bin/env bash
# Runs one cargo-fuzz target for SECONDS (default 60):
#   scripts/fuzz.sh parse_lp|sql_front_door|pg_messages [SECONDS]
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The
# fuzz crate uses the main lock file, so it builds the same crate versions; the
# corpus is seeded from sql-tests/ (SQL) and a few hand-written message streams.
# No sanitizer (`-s none`): Sundial is safe Rust, and the run gets ~2x the inputs.
set -euo pipefail
target=${1:?target: parse_lp, sql_front_door or pg_messages}
secs=${2:-60}
cd "$(dirname "$0")/../fuzz"
cp ../Cargo.lock Cargo.lock
corpus=corpus/$target
mkdir -p "$corpus"
if [ -z "$(ls -A "$corpus")" ]; then
  case $target in
    sql_front_door)
      # Every statement of the sqllogictest files, one per file.
      python3 - "$corpus" <<'PY'
import glob, hashlib, os, sys
out = sys.argv[1]
for path in glob.glob("../sql-tests/*.slt"):
    block, lines = None, open(path, encoding="utf-8").read().split("\n")
    stmt = []
    for line in lines + [""]:
        if line.startswith(("statement", "query")):
            block, stmt = True, []
        elif block and (line.strip() == "" or line.strip() == "----"):
            if stmt:
                sql = "\n".join(stmt).encode()
                name = hashlib.sha1(sql).hexdigest()
                open(os.path.join(out, name), "wb").write(sql)
            block, stmt = None, []
        elif block:
            stmt.append(line)
PY
      ;;
    pg_messages)
      python3 - "$corpus" <<'PY'
import os, struct, sys
out = sys.argv[1]
def msg(tag, body): return tag + struct.pack("!i", len(body) + 4) + body
def cstr(s): return s.encode() + b"\0"
params = cstr("user") + cstr("sundial") + cstr("database") + cstr("sundial") + b"\0"
startup = struct.pack("!ii", len(params) + 8, 196608) + params
ssl = struct.pack("!ii", 8, 80877103)
def parse(q, oids): return msg(b"P", cstr("") + cstr(q) + struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids))
def bind(fmts, vals):
    body = cstr("") + cstr("") + struct.pack("!h", len(fmts)) + b"".join(struct.pack("!h", f) for f in fmts)
    body += struct.pack("!h", len(vals))
    for v in vals:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    return msg(b"B", body + struct.pack("!h", 0))
exe = msg(b"E", cstr("") + struct.pack("!i", 0))
sync = msg(b"S", b"")
numeric_bin = struct.pack("!hhhh", 2, 1, 0, 2) + struct.pack("!hh", 12, 3400)
seeds = {
    "simple": startup + msg(b"Q", cstr("SELECT 1")),
    "ssl": ssl + startup + msg(b"Q", cstr("SELECT time_bucket('1h', now())")),
    "extended": startup + parse("SELECT $1::numeric + $2", [1700, 23]) + bind([0], [b"12.5", b"7"]) + exe + sync,
    "binary": startup + parse("SELECT $1", [1700]) + bind([1], [numeric_bin]) + exe + sync,
    "untyped": startup + parse("SELECT $1, $2", []) + bind([0, 1], [None, b"\0\0\0\1"]) + exe + sync,
}
for k, v in seeds.items():
    open(os.path.join(out, k), "wb").write(v)
PY
      ;;
  esac
fi
exec cargo +nightly fuzz run -s none "$target" "$corpus" -- -max_total_time="$secs" -rss_limit_mb=4096 -timeout=10
