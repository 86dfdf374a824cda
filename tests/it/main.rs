mod durability;
mod errors;
mod harness;
mod migrations;
mod pg_compare;
mod wire;
