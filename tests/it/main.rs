mod durability;
mod errors;
mod harness;
mod influx;
mod migrations;
mod pg_compare;
mod psql;
mod wire;
