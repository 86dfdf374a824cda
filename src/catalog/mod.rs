//! The catalog: databases → tables (schema, time column, chunk interval) → chunk
//! files with per-column statistics. Persisted as a versioned JSON checkpoint that is
//! replaced atomically (write new, fsync, rename) plus a log of changes since (`log`);
//! readers see immutable snapshots, and the typed operations of `ops` are the only
//! way to change it.

pub mod cagg;
mod log;
pub mod migrate;
mod ops;
pub mod roles;
pub mod sequences;
pub mod types;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

pub use cagg::{BucketDef, CaggDef, RefreshPolicy};
pub use ops::{
    ColumnCheck, ColumnsWanted, DROPPED_PREFIX, FileEdit, FilesChange, NewTable, check_time_column,
};
pub use types::{
    ANY_NUMERIC, ANY_NUMERIC_PRECISION, ANY_NUMERIC_SCALE, SqlType, is_any_numeric, numeric_type,
};

use crate::error::{Error, Result};

/// The manifest format this binary writes.
pub const FORMAT_VERSION: u32 = migrate::LATEST;

/// Databases every fresh data directory has.
pub const DEFAULT_DATABASES: [&str; 2] = ["sundial", "postgres"];

/// The whole persisted catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// Numbers of the migrations that have run on this data directory.
    pub migrations_applied: Vec<u32>,
    pub next_id: u64,
    /// Every WAL record with a sequence number up to this one is in Parquet files.
    pub flushed_wal_seq: u64,
    pub databases: BTreeMap<String, DatabaseDef>,
    /// Roles by name (`CREATE ROLE`); shared by every database.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, roles::RoleDef>,
}

/// One database: a namespace of tables and views.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DatabaseDef {
    pub id: u64,
    pub tables: BTreeMap<String, Arc<TableDef>>,
    /// Plain views (`CREATE VIEW`), planned afresh by each query that reads them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub views: BTreeMap<String, ViewDef>,
    /// Owners of tables and views created by roles other than a superuser (the
    /// rest belong to the superuser).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owners: BTreeMap<String, String>,
    /// `REVOKE CONNECT ON DATABASE … FROM PUBLIC`: only roles granted CONNECT may
    /// connect.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connect_revoked: bool,
    /// Sequences (`CREATE SEQUENCE`, `serial` and identity columns), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sequences: BTreeMap<String, sequences::SequenceDef>,
    /// `COMMENT ON`: by [`comment_key`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub comments: BTreeMap<String, String>,
}

/// The key of a comment on relation `rel` (`column`: on one of its columns).
pub fn comment_key(rel: &str, column: Option<&str>) -> String {
    match column {
        Some(c) => format!("{rel}\u{0}{c}"),
        None => rel.to_string(),
    }
}

/// A plain view: its query as (normalized) SQL text and its column names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ViewDef {
    /// Assigned by the catalog when the view is first created.
    #[serde(default)]
    pub id: u64,
    pub name: String,
    /// The defining query, as Sundial's SQL front door normalized it.
    pub sql: String,
    /// Column names: `CREATE VIEW v (a, b)`, else the query's own names.
    pub columns: Vec<String>,
    /// PostgreSQL type oids of the columns when the view was defined (`pg_attribute`).
    #[serde(default)]
    pub column_types: Vec<i32>,
    /// A continuous aggregate's view: the id of its materialization hypertable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cagg: Option<u64>,
}

/// One table; a hypertable when it has a time column and chunk interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableDef {
    pub id: u64,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Partitioning column of a hypertable.
    pub time_column: Option<String>,
    /// Chunk interval in microseconds; `Some` exactly for hypertables.
    pub chunk_interval_micros: Option<i64>,
    pub files: Vec<FileMeta>,
    /// Tag columns of a line-protocol table: with the time column they identify a
    /// point, and a later write of the same point replaces it field by field.
    /// Empty for plain append tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series_key: Vec<String>,
    /// Created by a line-protocol write: strict field types, and a point (series
    /// key + time) written twice keeps the last write.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub line_protocol: bool,
    /// `add_retention_policy`: chunks older than this are dropped by a background job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// A table made with SQL that line protocol may add columns to
    /// (`WITH (sundial.line_protocol_columns = true)`); line-protocol tables always may.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lp_columns: bool,
    /// The continuous aggregate this table materializes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cagg: Option<Box<CaggDef>>,
    /// The hypertable invalidation log: time ranges changed since continuous
    /// aggregates over this table last took them (kept only while any exists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidations: Vec<cagg::Range>,
    /// Time ranges whose chunks were dropped since continuous aggregates over this
    /// table last took them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<cagg::Range>,
    /// PRIMARY KEY and UNIQUE constraints (the primary key first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyDef>,
    /// CHECK constraints, by name (PostgreSQL tests them in name order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckDef>,
    /// FOREIGN KEY constraints of this table (the referencing side).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign_keys: Vec<ForeignKeyDef>,
    /// `timescaledb.compress` settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionDef>,
}

/// A PRIMARY KEY or UNIQUE constraint: no two rows share these columns' values
/// (rows with a NULL in them never conflict, as in PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyDef {
    /// Constraint name (`t_pkey`, `t_a_b_key` by default).
    pub name: String,
    pub columns: Vec<String>,
    pub primary: bool,
}

/// A CHECK constraint: a row is written only where `expr` is true or NULL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckDef {
    /// Constraint name (`t_a_check`, `t_check` by default).
    pub name: String,
    /// The condition as SQL text over the table's columns.
    pub expr: String,
    /// False after `ADD CONSTRAINT … NOT VALID` until `VALIDATE CONSTRAINT`: the
    /// stored rows were not checked (new rows always are).
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub validated: bool,
}

fn yes() -> bool {
    true
}

/// A FOREIGN KEY: every row's `columns` (unless one is NULL: MATCH SIMPLE) equal
/// the `ref_columns` (a key) of a row of `ref_table`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignKeyDef {
    /// Constraint name (`t_a_fkey` by default).
    pub name: String,
    pub columns: Vec<String>,
    pub ref_table: String,
    pub ref_columns: Vec<String>,
    /// What deleting a referenced row does.
    #[serde(default, skip_serializing_if = "RefAction::is_no_action")]
    pub on_delete: RefAction,
    /// False after `ADD CONSTRAINT … NOT VALID` until `VALIDATE CONSTRAINT`.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub validated: bool,
}

/// `ON DELETE` actions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefAction {
    #[default]
    NoAction,
    Restrict,
    Cascade,
    SetNull,
    SetDefault,
}

impl RefAction {
    fn is_no_action(&self) -> bool {
        *self == RefAction::NoAction
    }

    /// `pg_constraint.confdeltype`.
    pub fn code(self) -> char {
        match self {
            RefAction::NoAction => 'a',
            RefAction::Restrict => 'r',
            RefAction::Cascade => 'c',
            RefAction::SetNull => 'n',
            RefAction::SetDefault => 'd',
        }
    }

    /// As `pg_get_constraintdef` appends it (nothing for NO ACTION).
    pub fn clause(self) -> &'static str {
        match self {
            RefAction::NoAction => "",
            RefAction::Restrict => " ON DELETE RESTRICT",
            RefAction::Cascade => " ON DELETE CASCADE",
            RefAction::SetNull => " ON DELETE SET NULL",
            RefAction::SetDefault => " ON DELETE SET DEFAULT",
        }
    }
}

/// TimescaleDB's rule: every unique constraint of a hypertable holds the
/// partitioning column (TS103 otherwise).
pub fn check_keys_partitioned(keys: &[KeyDef], time_column: &str) -> Result<()> {
    if keys
        .iter()
        .any(|k| !k.columns.iter().any(|c| c == time_column))
    {
        return Err(Error::sql(
            "TS103",
            format!(
                "cannot create a unique index without the column \"{time_column}\" (used in partitioning)"
            ),
        ));
    }
    Ok(())
}

/// A hypertable's `timescaledb.compress` settings. Sundial's chunks are always
/// compressed, sorted Parquet: `segmentby` then `orderby` choose the files' sort
/// order from the next flush or compaction on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressionDef {
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segmentby: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orderby: Vec<OrderBy>,
    /// `add_compression_policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<CompressPolicy>,
    /// Starts of the chunks `compress_chunk` (or the policy) compressed and
    /// `decompress_chunk` did not undo: TimescaleDB's `is_compressed` (a chunk that
    /// receives rows later stays in, as TimescaleDB's partial chunk).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub compressed_chunks: std::collections::BTreeSet<i64>,
}

/// One `compress_orderby` column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderBy {
    pub column: String,
    pub desc: bool,
    pub nulls_first: bool,
}

/// A compression policy (TimescaleDB job `policy_compression`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressPolicy {
    pub job_id: i64,
    /// Chunks whose end is older than `now() - after` are compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_micros: Option<i64>,
    /// Or: chunks created before `now() - created_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before_micros: Option<i64>,
    pub schedule_interval_micros: i64,
    /// The job's `config` as TimescaleDB shows it (JSON text).
    pub config: String,
    /// `initial_start`: the first run is not before this (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_start_micros: Option<i64>,
}

/// A retention policy (TimescaleDB job `policy_retention`), one per hypertable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Retention {
    /// Chunks whose end is older than `now() - drop_after` are dropped.
    pub drop_after_micros: i64,
    /// How often the job runs.
    pub schedule_interval_micros: i64,
    /// `drop_after` as the user wrote it, for `timescaledb_information.jobs.config`.
    pub drop_after_text: String,
    /// `initial_start`: the first run is not before this (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_start_micros: Option<i64>,
}

impl TableDef {
    /// Job id of the table's retention policy (TimescaleDB numbers user jobs from 1000).
    pub fn retention_job_id(&self) -> i64 {
        1000 + self.id as i64
    }
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub sql_type: SqlType,
    pub nullable: bool,
    /// `DEFAULT` expression as SQL text (a literal, `now()` or `current_timestamp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// `GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY`: values come from its sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<sequences::Identity>,
}

impl ColumnDef {
    /// The default an INSERT that omits the column uses, as SQL: its `DEFAULT`, or
    /// its identity sequence's `nextval`.
    pub fn insert_default(&self) -> Option<String> {
        match &self.identity {
            Some(i) => Some(format!(
                "nextval('{}')",
                crate::pgident::quote_ident(&i.sequence).replace('\'', "''")
            )),
            // `nextval('s'::regclass)` as PostgreSQL shows it; the sequence by name
            // when an INSERT uses it.
            None => match self.default.as_deref() {
                Some(d) if d.starts_with("nextval('") && d.ends_with("'::regclass)") => {
                    Some(format!("{})", &d[..d.len() - "::regclass)".len()]))
                }
                other => other.map(str::to_string),
            },
        }
    }
}

/// One immutable Parquet file of a chunk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileMeta {
    pub id: u64,
    /// Start of the chunk (microseconds since the epoch); 0 for plain tables.
    pub chunk_start: i64,
    /// End of the chunk when it was cut with an earlier chunk interval
    /// (`set_chunk_time_interval`); `None`: start + the table's interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_end: Option<i64>,
    /// Object-store path.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    /// Arrow size of the rows (uncompressed); unknown for files from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_bytes: Option<u64>,
    /// The order of the file's rows ([`crate::storage::sort_signature`]); `None`
    /// when not known to follow one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sorted_by: Option<String>,
    pub stats: Vec<ColumnStats>,
}

/// Min/max (as text, cast back to the column type on use) and null count of a column.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ColumnStats {
    pub column: String,
    pub min: Option<String>,
    pub max: Option<String>,
    /// `None` when unknown (files from catalog format 1).
    #[serde(default)]
    pub null_count: Option<u64>,
    /// float8 columns: the sum of the non-NULL values (Rust's `{:e}` form), for
    /// sum/avg answered from statistics; `None` when unknown or all NULL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum: Option<String>,
}

impl TableDef {
    /// The definition without its file list (for holders that read files elsewhere
    /// and must not keep an old list alive, such as cached query plans).
    pub fn without_files(&self) -> TableDef {
        TableDef {
            id: self.id,
            name: self.name.clone(),
            columns: self.columns.clone(),
            time_column: self.time_column.clone(),
            chunk_interval_micros: self.chunk_interval_micros,
            files: vec![],
            series_key: self.series_key.clone(),
            line_protocol: self.line_protocol,
            retention: self.retention.clone(),
            lp_columns: self.lp_columns,
            cagg: self.cagg.clone(),
            invalidations: self.invalidations.clone(),
            dropped: self.dropped.clone(),
            keys: self.keys.clone(),
            checks: self.checks.clone(),
            foreign_keys: self.foreign_keys.clone(),
            compression: self.compression.clone(),
        }
    }

    /// Arrow schema of the table.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| c.sql_type.field(&c.name, c.nullable))
                .collect::<Vec<_>>(),
        ))
    }

    /// Whether rows with equal key are merged, last write wins: line-protocol
    /// tables (series and time; field by field) and hypertables with a primary key
    /// or unique constraint (whole rows: an upsert writes the row's new version).
    pub fn dedups(&self) -> bool {
        self.time_column.is_some() && (self.line_protocol || self.dedup_key().is_some())
    }

    /// Whether writes must check unique keys (SQL tables with PRIMARY KEY or
    /// UNIQUE; line-protocol tables merge duplicate points instead).
    pub fn checks_keys(&self) -> bool {
        !self.line_protocol && !self.keys.is_empty()
    }

    /// Whether duplicates merge field by field (InfluxDB's rule), else whole rows.
    pub fn merges_fields(&self) -> bool {
        self.line_protocol
    }

    /// The constraint whose key versions of a row share: the primary key, else the
    /// first unique constraint, on a hypertable (where it holds the time column).
    pub fn dedup_key(&self) -> Option<&KeyDef> {
        if self.line_protocol || !self.is_hypertable() {
            return None;
        }
        let time = self.time_column.as_ref()?;
        self.keys.iter().find(|k| k.columns.contains(time))
    }

    /// The columns files are sorted by before time (and, for tables that merge
    /// duplicates, the key with time): the tags of a line-protocol table, the
    /// key of a keyed hypertable, else `compress_segmentby`.
    pub fn sort_series(&self) -> Vec<String> {
        if self.line_protocol {
            return self.series_key.clone();
        }
        if let Some(k) = self.dedup_key() {
            return k
                .columns
                .iter()
                .filter(|c| Some(*c) != self.time_column.as_ref())
                .cloned()
                .collect();
        }
        match &self.compression {
            Some(c) => c.segmentby.clone(),
            None => vec![],
        }
    }

    pub fn is_hypertable(&self) -> bool {
        self.chunk_interval_micros.is_some()
    }

    /// Index of the partitioning column.
    pub fn time_index(&self) -> Option<usize> {
        let t = self.time_column.as_ref()?;
        self.columns.iter().position(|c| &c.name == t)
    }

    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// Start of the chunk holding `t` (microseconds).
    pub fn chunk_start(&self, t: i64) -> i64 {
        match self.chunk_interval_micros {
            Some(iv) if iv > 0 => t.div_euclid(iv) * iv,
            _ => 0,
        }
    }

    /// End of the chunk holding file `f`.
    pub fn file_chunk_end(&self, f: &FileMeta) -> i64 {
        f.chunk_end.unwrap_or_else(|| {
            f.chunk_start
                .saturating_add(self.chunk_interval_micros.unwrap_or(i64::MAX))
        })
    }

    /// End of chunk `start`: the widest range of its files, else one interval.
    pub fn chunk_end(&self, start: i64) -> i64 {
        self.files
            .iter()
            .filter(|f| f.chunk_start == start)
            .map(|f| self.file_chunk_end(f))
            .max()
            .unwrap_or_else(|| start.saturating_add(self.chunk_interval_micros.unwrap_or(i64::MAX)))
    }

    /// TimescaleDB-style chunk name.
    pub fn chunk_name(&self, chunk_start: i64) -> String {
        let idx = match self.chunk_interval_micros {
            Some(iv) if iv > 0 => chunk_start.div_euclid(iv),
            _ => 0,
        };
        format!("_hyper_{}_{}_chunk", self.id, idx)
    }
}

impl Manifest {
    fn fresh() -> Manifest {
        let mut m = Manifest {
            format_version: FORMAT_VERSION,
            migrations_applied: migrate::all_numbers(),
            next_id: 1,
            flushed_wal_seq: 0,
            databases: BTreeMap::new(),
            roles: BTreeMap::new(),
        };
        for db in DEFAULT_DATABASES {
            let id = m.alloc_id();
            m.databases.insert(
                db.to_string(),
                DatabaseDef {
                    id,
                    tables: BTreeMap::new(),
                    views: BTreeMap::new(),
                    owners: BTreeMap::new(),
                    connect_revoked: false,
                    sequences: Default::default(),
                    comments: Default::default(),
                },
            );
        }
        m
    }

    /// Hands out a new id, unique within this data directory.
    fn alloc_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub fn database(&self, db: &str) -> Result<&DatabaseDef> {
        self.databases
            .get(db)
            .ok_or_else(|| Error::UndefinedDatabase(db.to_string()))
    }

    fn database_mut(&mut self, db: &str) -> Result<&mut DatabaseDef> {
        self.databases
            .get_mut(db)
            .ok_or_else(|| Error::UndefinedDatabase(db.to_string()))
    }

    pub fn table(&self, db: &str, table: &str) -> Result<&Arc<TableDef>> {
        self.database(db)?
            .tables
            .get(table)
            .ok_or_else(|| Error::UndefinedTable(table.to_string()))
    }

    /// Finds a table by id anywhere in the catalog.
    pub fn table_by_id(&self, id: u64) -> Option<(&str, &Arc<TableDef>)> {
        self.databases.iter().find_map(|(name, d)| {
            d.tables
                .values()
                .find(|t| t.id == id)
                .map(|t| (name.as_str(), t))
        })
    }
}

/// The live catalog: an immutable snapshot behind a lock, replaced on every change.
#[derive(Debug)]
pub struct Catalog {
    dir: PathBuf,
    data_dir: PathBuf,
    current: RwLock<Arc<Manifest>>,
    /// Sequences' positions between the catalog writes that log them ahead.
    positions: sequences::Positions,
    /// Held by the one writer; the change log it appends to.
    writer: Mutex<log::Log>,
}

const MANIFEST_FILE: &str = "manifest.json";

/// Key of the checkpoint's log generation: changes after the checkpoint are in
/// `manifest-<generation>.log`.
const LOG_GENERATION: &str = "log_generation";

/// The checkpoint file: the manifest and the generation of the log that follows it.
#[derive(Serialize)]
struct Checkpoint<'a> {
    #[serde(flatten)]
    manifest: &'a Manifest,
    log_generation: u64,
}

impl Catalog {
    /// The data directory the catalog (and the chunk files) live in.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Opens (or creates) the catalog under `data_dir/catalog`, running migrations
    /// and folding the change log into a new checkpoint.
    pub fn open(data_dir: &Path) -> Result<Catalog> {
        let dir = data_dir.join("catalog");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        let path = dir.join(MANIFEST_FILE);
        let (mut manifest, generation, mut changed) = if path.exists() {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                Error::Catalog(format!("{} is not valid JSON: {e}", path.display()))
            })?;
            let generation = value
                .get(LOG_GENERATION)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            let (value, ran) = migrate::upgrade(value)?;
            let m: Manifest = serde_json::from_value(value)
                .map_err(|e| Error::Catalog(format!("{}: {e}", path.display())))?;
            if !ran.is_empty() {
                tracing::info!(migrations = ?ran, "upgraded catalog manifest");
            }
            (m, generation, !ran.is_empty())
        } else {
            (Manifest::fresh(), 0, true)
        };
        let (replayed, log_len) = log::Log::replay(&dir, generation, &mut manifest)?;
        if replayed > 0 {
            tracing::info!(changes = replayed, "replayed the catalog log");
            changed = true;
        }
        let cat = Catalog {
            dir: dir.clone(),
            data_dir: data_dir.to_path_buf(),
            current: RwLock::new(Arc::new(manifest.clone())),
            positions: Default::default(),
            writer: Mutex::new(log::Log::new(&dir, generation, text_len(&path))),
        };
        if changed {
            let mut log = cat.writer.lock();
            match cat.checkpoint(&manifest, &mut log) {
                // The log stays as it is (changes go on after its records) and is
                // replayed again at the next start.
                Err(e) if e.is_disk_full() => {
                    let _ = std::fs::remove_file(dir.join(format!("{MANIFEST_FILE}.tmp")));
                    *log = log::Log::resume(&dir, generation, text_len(&path), log_len);
                    tracing::warn!(error = %e, "cannot fold the catalog log into a checkpoint: the disk is full");
                }
                r => r?,
            }
        }
        Ok(cat)
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Manifest> {
        self.current.read().clone()
    }

    /// Applies `f` to a copy of the manifest, persists the change (a log record, or
    /// a checkpoint once the log outgrows the last one) and publishes it. If `f` or
    /// the write fails nothing changes. Only the typed operations of `ops` call it.
    fn update<T>(&self, f: impl FnOnce(&mut Manifest) -> Result<T>) -> Result<T> {
        let mut log = self.writer.lock();
        let prev = self.snapshot();
        let mut next = (*prev).clone();
        let out = f(&mut next)?;
        if log.wants_checkpoint() {
            self.checkpoint(&next, &mut log)?;
        } else {
            log.append(&prev, &next)?;
        }
        *self.current.write() = Arc::new(next);
        Ok(out)
    }

    /// Writes `m` as the checkpoint of the log's next generation and starts that
    /// (empty) log.
    fn checkpoint(&self, m: &Manifest, log: &mut log::Log) -> Result<()> {
        let generation = log.generation() + 1;
        let bytes = serde_json::to_vec(&Checkpoint {
            manifest: m,
            log_generation: generation,
        })
        .map_err(|e| Error::Catalog(e.to_string()))?;
        let tmp = self.dir.join(format!("{MANIFEST_FILE}.tmp"));
        let dst = self.dir.join(MANIFEST_FILE);
        write_durably(&tmp, &bytes)?;
        std::fs::rename(&tmp, &dst)
            .map_err(|e| Error::io(format!("cannot rename {}", tmp.display()), e))?;
        sync_dir(&self.dir)?;
        log.checkpointed(generation, bytes.len() as u64);
        Ok(())
    }
}

/// Size of a file, 0 when it cannot be read.
fn text_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Writes `bytes` to `path` and fsyncs it.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

/// fsyncs a directory so a rename or create in it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot sync {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str) -> NewTable {
        NewTable {
            name: name.into(),
            columns: vec![ColumnDef {
                name: "time".into(),
                sql_type: SqlType::Timestamptz,
                nullable: false,
                default: None,
                identity: None,
            }],
            time_column: Some("time".into()),
            chunk_interval_micros: Some(86_400_000_000),
            line_protocol: false,
            lp_columns: false,
            keys: vec![],
            checks: vec![],
            foreign_keys: vec![],
            compression: None,
        }
    }

    fn json(c: &Catalog) -> serde_json::Value {
        serde_json::to_value(&*c.snapshot()).unwrap()
    }

    #[test]
    fn changes_go_to_the_log_and_come_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = dir.path().join("catalog").join(MANIFEST_FILE);
        let cat = Catalog::open(dir.path()).unwrap();
        let first = std::fs::read(&checkpoint).unwrap();
        cat.create_database("db2", false).unwrap();
        cat.create_table("db2", table("a"), false).unwrap();
        cat.create_table("db2", table("b"), false).unwrap();
        cat.create_table("sundial", table("c"), false).unwrap();
        cat.rename_table("db2", "a", "a2").unwrap();
        cat.drop_table("db2", "b", false).unwrap();
        cat.set_chunk_interval("sundial", "c", 3_600_000_000)
            .unwrap();
        cat.create_role("r", true, &roles::RoleOptions::default())
            .unwrap();
        cat.set_owner("db2", "a2", "r").unwrap();
        cat.drop_database("postgres", false).unwrap();
        // No change rewrote the checkpoint.
        assert_eq!(std::fs::read(&checkpoint).unwrap(), first);
        let want = json(&cat);
        drop(cat);

        let again = Catalog::open(dir.path()).unwrap();
        assert_eq!(json(&again), want);
        // The start folded the log into a new checkpoint and removed the old log.
        let text = std::fs::read_to_string(&checkpoint).unwrap();
        assert!(
            text.contains("\"a2\"") && text.contains("\"log_generation\":2"),
            "{text}"
        );
        assert!(!dir.path().join("catalog/manifest-1.log").exists());

        // A forced fold while running, then more changes, then a torn record.
        again.writer.lock().force_checkpoint();
        again.create_table("db2", table("d"), false).unwrap();
        again.create_table("db2", table("e"), false).unwrap();
        let want = json(&again);
        drop(again);
        let log = dir.path().join("catalog/manifest-3.log");
        let mut bytes = std::fs::read(&log).unwrap();
        bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, b'{']);
        std::fs::write(&log, bytes).unwrap();
        let third = Catalog::open(dir.path()).unwrap();
        assert_eq!(json(&third), want);
        assert!(third.snapshot().table("db2", "e").is_ok());
    }
}
