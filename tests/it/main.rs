mod durability;
mod errors;
mod harness;
mod pg_compare;
mod wire;
mod migrations;
