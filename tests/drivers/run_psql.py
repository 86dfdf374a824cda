#!/usr/bin/env python3
"""psql driver test: runs psql_basic.sql (and psql_meta.sql) through the real
psql client and checks its stdout against psql_basic.expected /
psql_meta.expected, which hold what PostgreSQL 15's psql prints for the same
table.

Every line of an .expected file must appear in psql's stdout, in order
(other lines may come between).  A line starting with "re:" is a regular
expression matched against one whole output line.

  SUNDIAL_HOST=.. SUNDIAL_PORT=.. python3 run_psql.py            # basic + meta
  SUNDIAL_HOST=.. SUNDIAL_PORT=.. python3 run_psql.py basic      # only basic
  SUNDIAL_HOST=.. SUNDIAL_PORT=.. python3 run_psql.py meta       # only meta (\\d, \\dt)

SUNDIAL_PLAIN_PG=1 leaves out the WITH (tsdb...) clause (stock PostgreSQL).
"""
import difflib
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = os.environ.get("SUNDIAL_HOST", "127.0.0.1")
PORT = os.environ.get("SUNDIAL_PORT", "5432")
HYPER = ("" if os.environ.get("SUNDIAL_PLAIN_PG") == "1" else
         "WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day')")
PSQL = os.environ.get("PSQL", shutil.which("psql") or "psql")


def run(script):
    cmd = [PSQL, "-X", "-v", "ON_ERROR_STOP=1", "-v", f"hyper={HYPER}",
           "-h", HOST, "-p", str(PORT), "-U", "sundial", "-d", "sundial",
           "-f", os.path.join(HERE, script)]
    env = dict(os.environ, PGSSLMODE="disable", PGTZ="UTC", PGCONNECT_TIMEOUT="10",
               PAGER="", LC_ALL="C.UTF-8")
    env.pop("PGPASSWORD", None)
    print(f"[psql] {' '.join(cmd)}", file=sys.stderr)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=HERE)
    return p.returncode, p.stdout, p.stderr


def match_in_order(expected, output):
    """Returns (ok, index of first unmatched expected line)."""
    out = output.split("\n")
    j = 0
    for i, want in enumerate(expected):
        rx = re.compile(want[3:]) if want.startswith("re:") else None
        while j < len(out):
            line = out[j]
            j += 1
            if (rx.fullmatch(line) if rx else line == want):
                break
        else:
            return False, i
    return True, None


def check(name):
    script, exp_file = f"psql_{name}.sql", f"psql_{name}.expected"
    with open(os.path.join(HERE, exp_file)) as f:
        expected = f.read().rstrip("\n").split("\n")
    rc, out, err = run(script)
    problems = []
    if rc != 0:
        problems.append(f"psql exited with status {rc}")
    errors = [l for l in err.splitlines() if re.search(r"\b(ERROR|FATAL|PANIC):", l)]
    if errors:
        problems.append("psql printed errors:\n    " + "\n    ".join(errors))
    ok, missing = match_in_order(expected, out)
    if not ok:
        problems.append(f"{exp_file} line {missing + 1} not found (in order) in psql output: "
                        f"{expected[missing]!r}")
    if problems:
        print(f"\nFAIL [psql {name}]", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        plain = [l for l in expected if not l.startswith("re:")]
        diff = difflib.unified_diff(plain, out.rstrip("\n").split("\n"),
                                    fromfile=exp_file + " (PostgreSQL 15)", tofile="psql stdout",
                                    lineterm="")
        print("  diff:\n" + "\n".join("    " + d for d in diff), file=sys.stderr)
        if err.strip():
            print("  psql stderr:\n" + "\n".join("    " + l for l in err.splitlines()), file=sys.stderr)
        return False
    print(f"PASS [psql {name}]")
    return True


def main():
    which = sys.argv[1:] or ["basic", "meta"]
    for w in which:
        if w not in ("basic", "meta"):
            sys.exit(f"unknown script {w!r}: use basic and/or meta")
    results = {w: check(w) for w in which}
    failed = [w for w, ok in results.items() if not ok]
    print(f"psql: {len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
