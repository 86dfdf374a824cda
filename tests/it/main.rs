mod durability;
mod errors;
mod harness;
mod wire;
