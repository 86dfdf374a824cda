-- Only for validating the driver tests against a stock PostgreSQL
-- (SUNDIAL_PLAIN_PG=1): a minimal time_bucket() shim with TimescaleDB's
-- semantics for sub-day buckets (origin = Unix epoch for these widths).
-- Run once:  psql -X -d sundial -f plain_pg_setup.sql
CREATE OR REPLACE FUNCTION time_bucket(bucket_width interval, ts timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT to_timestamp(floor(extract(epoch FROM ts) / extract(epoch FROM bucket_width))
                      * extract(epoch FROM bucket_width))
$$;
