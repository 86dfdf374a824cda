//! Query side: the connection's DataFusion context and catalog/schema providers,
//! the hypertable table provider (chunk pruning by statistics, scans of Parquet
//! files and memtable rows, last-write-wins merging), and the TimescaleDB-style
//! system views (`timescaledb_information.*`); the newest-rows-per-series path
//! (`latest`) for lastpoint-style queries and the newest-window path for the newest
//! k time buckets (`newest_buckets`); count/min/max answered from file statistics
//! (`stats_answers`); scans of columns kept decoded in memory (`cached_scan`).

pub mod cached_scan;
pub mod context;
pub mod dedup;
pub mod deferred;
pub mod latest;
pub mod leaf;
pub mod newest_buckets;
pub mod provider;
pub mod rowset;
pub mod runtime;
pub mod staged;
pub mod stats_answers;
pub mod system;
pub mod variant;
