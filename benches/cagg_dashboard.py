#!/usr/bin/env python3
"""Times the continuous-aggregate dashboard benchmark on one server (Sundial or
TimescaleDB) whose `cpu` table holds TSBS cpu-only data: creating the aggregates,
the dashboard query on the raw table and on the aggregates (materialized-only and
real-time), and a refresh after late writes to 1% of the time range. Prints one
JSON object; `--answers FILE` also writes the dashboard answers for comparison.

Usage: cagg_dashboard.py DSN START END [--runs N] [--answers FILE]
"""

import argparse
import datetime as dt
import json
import statistics
import time

import psycopg

RAW = (
    "SELECT time_bucket('1 hour', time) AS hour, hostname, avg(usage_user) AS avg_user, "
    "max(usage_user) AS max_user FROM cpu WHERE time >= %(s)s AND time < %(e)s "
    "{host} GROUP BY 1, 2 ORDER BY 1, 2"
)
VIEW = (
    "SELECT hour, hostname, avg_user, max_user FROM {view} "
    "WHERE hour >= %(s)s AND hour < %(e)s {host} ORDER BY 1, 2"
)
DEFINE = (
    "CREATE MATERIALIZED VIEW {view} WITH (timescaledb.continuous, "
    "timescaledb.materialized_only = {mo}) AS "
    "SELECT time_bucket('1 hour', time) AS hour, hostname, avg(usage_user) AS avg_user, "
    "max(usage_user) AS max_user FROM cpu GROUP BY 1, 2"
)


def timed(conn, sql, params=None):
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall() if cur.description else []
    return (time.perf_counter() - t0) * 1000.0, rows


def median_ms(conn, sql, params, runs):
    timed(conn, sql, params)  # warm-up
    samples = []
    rows = []
    for _ in range(runs):
        ms, rows = timed(conn, sql, params)
        samples.append(ms)
    return statistics.median(samples), rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dsn")
    ap.add_argument("start")
    ap.add_argument("end")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--answers")
    a = ap.parse_args()
    conn = psycopg.connect(a.dsn, autocommit=True)
    conn.execute("SET TimeZone = 'UTC'")
    out = {}
    for view in ("cpu_hourly", "cpu_hourly_rt"):
        conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS {view}")
    ms, _ = timed(conn, DEFINE.format(view="cpu_hourly", mo="true"))
    out["create_materialized_ms"] = round(ms, 1)
    ms, _ = timed(conn, DEFINE.format(view="cpu_hourly_rt", mo="false"))
    out["create_realtime_ms"] = round(ms, 1)

    params = {"s": a.start, "e": a.end}
    answers = {}
    for label, host in (("all_hosts", ""), ("one_host", "AND hostname = 'host_7'")):
        raw_ms, raw_rows = median_ms(conn, RAW.format(host=host), params, a.runs)
        mo_ms, mo_rows = median_ms(
            conn, VIEW.format(view="cpu_hourly", host=host), params, a.runs
        )
        rt_ms, rt_rows = median_ms(
            conn, VIEW.format(view="cpu_hourly_rt", host=host), params, a.runs
        )
        out[label] = {
            "rows": len(raw_rows),
            "raw_ms": round(raw_ms, 2),
            "materialized_only_ms": round(mo_ms, 2),
            "real_time_ms": round(rt_ms, 2),
            "views_equal_raw": same(raw_rows, mo_rows) and same(raw_rows, rt_rows),
        }
        answers[label] = [[str(v) for v in r] for r in raw_rows]

    # Late writes: one more reading per host and 10 s interval, 5 s later, over
    # 1% of the time range (the 1% that starts at the middle).
    s = dt.datetime.fromisoformat(a.start.replace("Z", "+00:00"))
    e = dt.datetime.fromisoformat(a.end.replace("Z", "+00:00"))
    mid = s + (e - s) / 2
    late_end = mid + (e - s) / 100
    cols = [
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'cpu' "
            "ORDER BY ordinal_position"
        ).fetchall()
    ]
    sel = ", ".join(
        "time + interval '5 seconds'" if c == "time" else c for c in cols
    )
    ms, _ = timed(
        conn,
        f"INSERT INTO cpu ({', '.join(cols)}) SELECT {sel} FROM cpu "
        "WHERE time >= %(s)s AND time < %(e)s",
        {"s": mid.isoformat(), "e": late_end.isoformat()},
    )
    late_rows = conn.execute(
        "SELECT count(*) FROM cpu WHERE time >= %(s)s AND time < %(e)s",
        {"s": mid.isoformat(), "e": late_end.isoformat()},
    ).fetchone()[0]
    out["late_write"] = {"ms": round(ms, 1), "rows_in_window_after": late_rows}
    ms, _ = timed(conn, "CALL refresh_continuous_aggregate('cpu_hourly', NULL, NULL)")
    out["refresh_after_late_writes_ms"] = round(ms, 1)
    try:
        r = conn.execute(
            "SELECT buckets FROM sundial_cagg_refreshes WHERE view_name = 'cpu_hourly'"
        ).fetchone()
        out["refresh_buckets"] = r[0] if r else None
    except psycopg.Error:
        out["refresh_buckets"] = None
    # A refresh with nothing invalidated: the fixed cost.
    ms, _ = timed(conn, "CALL refresh_continuous_aggregate('cpu_hourly', NULL, NULL)")
    out["refresh_nothing_to_do_ms"] = round(ms, 1)
    raw_ms, raw_rows = median_ms(conn, RAW.format(host=""), params, a.runs)
    mo_ms, mo_rows = median_ms(conn, VIEW.format(view="cpu_hourly", host=""), params, a.runs)
    rt_ms, rt_rows = median_ms(
        conn, VIEW.format(view="cpu_hourly_rt", host=""), params, a.runs
    )
    out["after_late_writes"] = {
        "raw_ms": round(raw_ms, 2),
        "materialized_only_ms": round(mo_ms, 2),
        "real_time_ms": round(rt_ms, 2),
        "refreshed_view_equals_raw": same(raw_rows, mo_rows),
        "real_time_view_equals_raw": same(raw_rows, rt_rows),
    }
    if a.answers:
        with open(a.answers, "w") as f:
            json.dump(answers, f)
    print(json.dumps(out, indent=1))


def same(x, y):
    if len(x) != len(y):
        return False
    for a, b in zip(x, y):
        for u, v in zip(a, b):
            if u == v:
                continue
            try:
                fu, fv = float(u), float(v)
            except (TypeError, ValueError):
                return False
            if abs(fu - fv) > 1e-9 * max(abs(fu), abs(fv), 1.0):
                return False
    return True


if __name__ == "__main__":
    main()
