//! Sundial: a time-series SQL database that speaks the PostgreSQL wire protocol,
//! understands TimescaleDB-style SQL, logs writes to a snappy-framed WAL and keeps
//! data in time-partitioned Parquet chunks that queries prune by min/max statistics.

pub mod catalog;
pub mod config;
pub mod engine;
pub mod error;
pub mod interval;
pub mod json;
pub mod lineproto;
pub mod loadgen;
pub mod metrics;
pub mod numeric_text;
pub mod pgident;
pub mod query;
pub mod server;
pub mod sql;
pub mod storage;
pub mod wal;
pub mod write;

pub use config::Config;
pub use engine::Engine;
pub use error::{Error, Result};

/// Stack of the threads that parse, plan and run statements. Syntax trees and
/// DataFusion's expressions are recursive (cloned, compared and dropped by recursion);
/// [`sql::complexity`] bounds a statement's nesting so that its deepest tree fits.
pub const STATEMENT_STACK_BYTES: usize = 64 << 20;
