-- psql meta-commands (need pg_catalog). Run after psql_basic.sql (it creates
-- drv_psql). Output is compared with psql_meta.expected.
\set ON_ERROR_STOP 1
\pset pager off
\d drv_psql
\dt drv_psql
\dt
