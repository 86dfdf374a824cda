-- Scripted psql session, run by run_psql.py (see README.md):
--   psql -X -v ON_ERROR_STOP=1 -v hyper="WITH (...)" -h $SUNDIAL_HOST -p $SUNDIAL_PORT \
--        -U sundial -d sundial -f psql_basic.sql
-- :hyper is the table's WITH (tsdb...) clause (empty against stock PostgreSQL).
-- Output is compared with psql_basic.expected.
\set ON_ERROR_STOP 1
\pset pager off
SET TIME ZONE 'UTC';
DROP TABLE IF EXISTS drv_psql;
CREATE TABLE drv_psql (time timestamptz NOT NULL, device text, temp double precision, reading numeric, ok boolean, n bigint) :hyper;
INSERT INTO drv_psql (time, device, temp, reading, ok, n) VALUES
  ('2024-01-01 00:00:00+00', 'a', 20.0, 12.50, true, 1),
  ('2024-01-01 00:30:00+00', 'a', 22.0, 0.001, false, 9007199254740993),
  ('2024-01-01 03:15:00+02', 'b', 30.0, NULL, NULL, -5),
  ('2024-01-01 01:20:00+00', 'b', 31.5, -3.25, false, 42);
INSERT INTO drv_psql (time, device, temp, reading, ok, n) VALUES
  ('2024-01-01 01:45:00+00', 'a', NULL, 100, true, 0),
  ('2024-01-02 00:00:00+00', 'a', 99.0, 1, true, 7),
  ('2023-12-31 18:59:59-05', 'b', 50.0, 2, true, 8);
-- psql variables stand in for parameters (psql 15 has no \bind).
\set width '1 hour'
\set start '2024-01-01 00:00:00+00'
\set stop '2024-01-01 02:00:00+00'
SELECT time_bucket(:'width'::interval, time) AS bucket, device, avg(temp), count(*)
  FROM drv_psql WHERE time >= :'start' AND time < :'stop' GROUP BY 1, 2 ORDER BY 1, 2;
SELECT time, device, temp, reading, ok, n FROM drv_psql ORDER BY time;
SELECT count(*) AS total, sum(n) AS sum_n, count(reading) AS readings FROM drv_psql;
