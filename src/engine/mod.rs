//! The engine: the composition root below the front ends. It opens a data
//! directory (lock, catalog, WAL replay, object store, query runtime), owns the
//! background work, and offers a small API: write a batch, snapshot a table's files
//! and memtable, catalog and chunk operations, a metrics snapshot, shutdown.

mod background;
pub mod compress;
mod convert;
pub mod jobs;
pub mod keys;
pub mod tx;

use std::collections::BTreeSet;
use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow::array::RecordBatch;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::physical_expr::PhysicalExpr;
use object_store::local::LocalFileSystem;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, DatabaseDef, FileEdit, FileMeta, Retention, TableDef};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Snapshot};
use crate::storage::decoded::DecodedColumns;
use crate::storage::derived_rows::DerivedRows;
use crate::storage::rewrite::{self, FileStore, Rewrite};
use crate::storage::stats_cache::StatsCache;
use crate::wal::Wal;
use crate::write::{TableView, WriteService};
use background::Background;
pub use jobs::{JobState, Jobs};

/// URL under which the chunk store is registered with DataFusion.
pub const STORE_URL: &str = "sundial://store/";

/// One table's part of a transaction committed by [`Engine::commit_changes`].
pub struct TableChange<'a> {
    pub table: Arc<TableDef>,
    /// Which rows of the table's files are deleted (`None`: no deletion).
    pub pred: Option<Arc<dyn PhysicalExpr>>,
    /// The files `pred` may match, with whether every row of the file matches.
    pub files: Vec<(&'a FileMeta, bool)>,
    /// Rows the transaction inserted (validated), after its own deletions.
    pub inserts: Vec<RecordBatch>,
    /// A continuous aggregate's refresh: the source ranges this change
    /// re-materializes into the table (they leave its invalidation log).
    pub refreshed: Vec<crate::catalog::cagg::Range>,
    /// How many stored rows `pred` must remove: any other count fails the commit
    /// with [`Error::Changed`] before anything is applied (an UPDATE's check that
    /// it replaces exactly the rows it read).
    pub expect_removed: Option<u64>,
}

/// The time ranges of `files` of `t`, merged (what a change to them invalidates).
fn time_ranges<'a>(
    t: &TableDef,
    files: impl Iterator<Item = &'a FileMeta>,
) -> Vec<crate::catalog::cagg::Range> {
    let mut out = vec![];
    for f in files {
        crate::catalog::cagg::add_range(&mut out, crate::storage::file_time_range(t, f));
    }
    out
}

/// Everything a server needs, shared by all connections.
pub struct Engine {
    config: Config,
    catalog: Arc<Catalog>,
    writer: Arc<WriteService>,
    store: Arc<dyn ObjectStore>,
    store_url: ObjectStoreUrl,
    runtime: Arc<RuntimeEnv>,
    /// Compaction's own memory pool (`compaction_memory`), apart from queries'.
    compaction_runtime: Arc<RuntimeEnv>,
    started: Instant,
    metrics: Metrics,
    /// One compaction at a time.
    compact_lock: tokio::sync::Mutex<()>,
    /// Run state of retention jobs.
    jobs: Jobs,
    /// Typed file statistics for chunk pruning, per table version.
    file_stats: Arc<StatsCache>,
    /// Rows derived per chunk file (newest rows per series).
    derived_rows: Arc<DerivedRows>,
    /// Decoded columns of chunk files, kept per (path, column).
    decoded: Arc<DecodedColumns>,
    /// Per keyed table, the lock writers hold across key check and write.
    key_locks: parking_lot::Mutex<std::collections::HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// State the layers above keep once per engine (one value per type).
    shared: parking_lot::Mutex<SharedState>,
    background: Background,
    _lock: File,
}

/// Values of the types [`Engine::shared`] was asked for.
type SharedState =
    std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("data_dir", &self.config.data_dir)
            .finish()
    }
}

/// Creates (or updates) the configured superuser, and checks that password
/// authentication leaves some role able to log in.
fn open_roles(catalog: &Catalog, config: &Config) -> Result<()> {
    catalog.bootstrap_superuser(&config.superuser, config.superuser_password.as_deref())?;
    if config.auth == crate::config::AuthMethod::Trust {
        tracing::info!(
            addr = %config.pg_addr,
            "authentication: trust (no password configured); any user name is accepted"
        );
        return Ok(());
    }
    let m = catalog.snapshot();
    if !m.roles.values().any(|r| r.login && r.password.is_some()) {
        return Err(Error::Config(format!(
            "auth is {} but no role has a password: set SUNDIAL_SUPERUSER_PASSWORD or superuser_password_file",
            config.auth.name()
        )));
    }
    tracing::info!(method = config.auth.name(), superuser = %config.superuser, "authentication on");
    Ok(())
}

impl Engine {
    /// Opens the data directory, replays the WAL and starts the background work
    /// (flush, compaction, retention). Must run inside a Tokio runtime.
    pub async fn open(config: Config) -> Result<Arc<Engine>> {
        let dir = &config.data_dir;
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("data directory {} is not usable", dir.display()), e))?;
        let lock = lock_dir(dir)?;
        let catalog = Arc::new(Catalog::open(dir)?);
        let restored = catalog.restore_dropped()?;
        if restored > 0 {
            tracing::info!(
                tables = restored,
                "restored tables dropped by uncommitted transactions"
            );
        }
        open_roles(&catalog, &config)?;
        let manifest = catalog.snapshot();
        let (wal, records) = Wal::open(
            &dir.join("wal"),
            config.wal_fsync,
            manifest.flushed_wal_seq,
            config.wal_accept_loss,
        )?;
        std::fs::create_dir_all(dir.join("data"))
            .map_err(|e| Error::io(format!("cannot create {}/data", dir.display()), e))?;
        let store: Arc<dyn ObjectStore> = Arc::new(
            LocalFileSystem::new_with_prefix(dir)
                .map_err(Error::from)?
                .with_automatic_cleanup(true),
        );
        let referenced = catalog
            .snapshot()
            .databases
            .values()
            .flat_map(|d| d.tables.values())
            .flat_map(|t| t.files.iter().map(|f| f.path.clone()))
            .collect();
        crate::storage::sweep_orphans(&store, &referenced).await?;
        crate::storage::sweep_staging(&dir.join("data"));
        let lost = wal.accepted_loss();
        let writer = Arc::new(WriteService::new(
            catalog.clone(),
            wal,
            store.clone(),
            &config,
        ));
        let n_records = records.len();
        let rows = writer.replay(records)?;
        if n_records > 0 {
            tracing::info!(records = n_records, rows, "replayed WAL");
        }
        if lost {
            // The gap stays in the log until the rows after it are in chunk files.
            match writer.flush_all().await {
                Ok(_) => tracing::warn!(
                    "flushed the rows replayed past the missing WAL records: later starts need no --wal-accept-loss"
                ),
                Err(e) => tracing::warn!(error = %e,
                    "cannot flush the rows replayed past the missing WAL records: later starts need --wal-accept-loss until a flush"),
            }
        }
        let store_url = ObjectStoreUrl::parse(STORE_URL)?;
        // The queries' part of the budget holds the derived-rows cache and the pool.
        let derived = DerivedRows::share_of(config.query_memory_limit);
        let decoded = DecodedColumns::share_of(config.query_memory_limit);
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(
                config
                    .query_memory_limit
                    .saturating_sub(derived)
                    .saturating_sub(decoded) as usize,
                1.0,
            )
            .build_arc()?;
        let compaction_runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(config.compaction_memory as usize, 1.0)
            .build_arc()?;
        let url = url_of(STORE_URL)?;
        runtime.register_object_store(&url, store.clone());
        compaction_runtime.register_object_store(&url, store.clone());
        let engine = Arc::new(Engine {
            config,
            catalog,
            writer,
            store,
            store_url,
            runtime,
            compaction_runtime,
            started: Instant::now(),
            metrics: Default::default(),
            compact_lock: tokio::sync::Mutex::new(()),
            jobs: Default::default(),
            file_stats: Default::default(),
            derived_rows: Arc::new(DerivedRows::with_limit(derived as usize)),
            decoded: Arc::new(DecodedColumns::with_limit(decoded)),
            key_locks: Default::default(),
            shared: Default::default(),
            background: Background::new(CancellationToken::new()),
            _lock: lock,
        });
        background::start(&engine);
        Ok(engine)
    }

    /// Stops background work, waits for it to finish and flushes every memtable.
    /// A flush that fails (a full disk) loses nothing: every acknowledged row is in
    /// the WAL, which the next start replays; the stop says so and succeeds.
    pub async fn close(&self) -> Result<()> {
        self.background.stop().await;
        if let Err(e) = self.writer.flush_all().await {
            tracing::warn!(error = %e,
                "cannot write the memtables to chunk files at stop; their rows stay in the WAL and the next start replays them");
        }
        Ok(())
    }

    /// Asks every part of the server to stop (front ends watch [`Engine::stopping`]).
    pub fn shutdown(&self) {
        self.background.token().cancel();
    }

    /// Fires when shutdown begins.
    pub fn stopping(&self) -> &CancellationToken {
        self.background.token()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The catalog: snapshots to read, typed operations to change it.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Counters the front ends bump.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Run state of the background jobs.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// The query runtime (memory pool, object store registry, metadata cache).
    pub fn runtime(&self) -> &Arc<RuntimeEnv> {
        &self.runtime
    }

    /// URL of the chunk store in [`Engine::runtime`].
    pub fn store_url(&self) -> &ObjectStoreUrl {
        &self.store_url
    }

    /// Typed file statistics for pruning, cached per table version.
    pub fn file_stats(&self) -> &Arc<StatsCache> {
        &self.file_stats
    }

    /// Rows derived from chunk files, kept per file path.
    pub fn derived_rows(&self) -> &Arc<DerivedRows> {
        &self.derived_rows
    }

    /// Decoded columns of chunk files, kept per (path, column).
    pub fn decoded(&self) -> &Arc<DecodedColumns> {
        &self.decoded
    }

    /// The engine's one value of type `T`, made on first use: state a layer above
    /// shares between its connections (the SQL layer's plans).
    pub fn shared<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut map = self.shared.lock();
        let slot = map
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match slot.clone().downcast::<T>() {
            Ok(v) => v,
            // Unreachable (the key is T's type id); start over rather than panic.
            Err(_) => {
                let v = Arc::new(T::default());
                *slot = v.clone();
                v
            }
        }
    }

    /// Validates `batch` for `table`, makes it durable and visible; returns rows written.
    /// A table with PRIMARY KEY or UNIQUE constraints gets every key checked first
    /// (23505 and nothing written on a conflict).
    pub async fn write(&self, table: &TableDef, batch: RecordBatch) -> Result<u64> {
        if !table.checks_keys() {
            return self.writer.write(table, batch).await;
        }
        let _keys = self.lock_keys(table.id).await;
        let batch = crate::write::validate(table, &batch)?;
        self.check_unique(table, &batch).await?;
        self.writer.write(table, batch).await
    }

    /// Writes rows whose keys the caller checked, holding the table's key lock.
    pub async fn write_checked(&self, table: &TableDef, batch: RecordBatch) -> Result<u64> {
        self.writer.write(table, batch).await
    }

    /// Fails with 23505 when a row of `batch` (validated for `t`) repeats a key
    /// value of a stored row or of an earlier row of `batch`. The caller holds the
    /// table's key lock.
    pub async fn check_unique(&self, t: &TableDef, batch: &RecordBatch) -> Result<()> {
        for key in &t.keys {
            let c = self.find_keys(t, key, batch).await?;
            if let Some(i) = c.first_conflict() {
                return Err(Error::Unique {
                    constraint: key.name.clone(),
                    detail: format!("{} already exists.", keys::key_text(batch, key, i)),
                });
            }
        }
        Ok(())
    }

    /// Writes a committed transaction's rows (validated batches, possibly several
    /// tables) as one WAL record: durable and visible all at once.
    pub async fn write_many(&self, writes: &[(Arc<TableDef>, RecordBatch)]) -> Result<u64> {
        // Keyed tables: their locks in id order (no two writers wait on each other),
        // then every key of all the table's rows at once.
        let mut keyed: Vec<&Arc<TableDef>> = writes
            .iter()
            .map(|(t, _)| t)
            .filter(|t| t.checks_keys())
            .collect();
        keyed.sort_by_key(|t| t.id);
        keyed.dedup_by_key(|t| t.id);
        let mut guards = Vec::with_capacity(keyed.len());
        for t in &keyed {
            guards.push(self.lock_keys(t.id).await);
        }
        for t in &keyed {
            let mine: Vec<RecordBatch> = writes
                .iter()
                .filter(|(w, _)| w.id == t.id)
                .map(|(_, b)| crate::storage::adapt_batch(b, &t.schema()))
                .collect::<Result<_>>()?;
            let all = arrow::compute::concat_batches(&t.schema(), &mine)?;
            self.check_unique(t, &all).await?;
        }
        self.writer.write_many(writes).await
    }

    /// Commits a transaction that deletes rows: per table, the rows of `files`
    /// where `pred` is true go (a file marked `true` matches whole) and `inserts`
    /// are written as new chunk files; then every table changes in one catalog
    /// step, so a crash keeps all of it or none. Memtables must have been flushed.
    pub async fn commit_changes(&self, db: &str, changes: Vec<TableChange<'_>>) -> Result<()> {
        let mut steps = vec![];
        let mut old_paths = vec![];
        let mut new_paths = vec![];
        let result = async {
            for c in &changes {
                let t = &c.table;
                let mut edits: Vec<FileEdit> = vec![];
                let mut removed = 0u64;
                if let Some(pred) = &c.pred {
                    for (f, all_match) in &c.files {
                        if *all_match {
                            removed += f.rows;
                            edits.push((f.id, None));
                            old_paths.push(f.path.clone());
                            continue;
                        }
                        let out = rewrite::rewrite(
                            &self.file_store(),
                            db,
                            t,
                            &[f],
                            Rewrite::DeleteWhere(pred),
                        )
                        .await?;
                        if out.rows_removed == 0 {
                            if let Some(n) = &out.file {
                                new_paths.push(n.path.clone());
                            }
                            continue;
                        }
                        if let Some(n) = &out.file {
                            new_paths.push(n.path.clone());
                        }
                        removed += out.rows_removed;
                        edits.push((f.id, out.file));
                        old_paths.push(f.path.clone());
                    }
                }
                if let Some(want) = c.expect_removed
                    && want != removed
                {
                    return Err(Error::Changed(format!(
                        "{} rows of \"{}\" were to be replaced, {removed} matched",
                        want, t.name
                    )));
                }
                let mut added = vec![];
                let schema = t.schema();
                let mut by_chunk: std::collections::BTreeMap<i64, Vec<RecordBatch>> =
                    Default::default();
                for b in &c.inserts {
                    let b = crate::storage::adapt_batch(b, &schema)?;
                    for (start, part) in crate::write::split_by_chunk(t, &b)? {
                        by_chunk.entry(start).or_default().push(part);
                    }
                }
                for (start, parts) in by_chunk {
                    let batch = arrow::compute::concat_batches(&schema, &parts)?;
                    let id = self.catalog.alloc_ids(1)?;
                    let meta = crate::storage::write_chunk_file(
                        &self.store,
                        self.catalog.data_dir(),
                        db,
                        t,
                        start,
                        id,
                        &batch,
                    )
                    .await?;
                    new_paths.push(meta.path.clone());
                    added.push(meta);
                }
                let mut invalidated = time_ranges(
                    t,
                    c.files
                        .iter()
                        .filter(|(f, _)| edits.iter().any(|(id, _)| *id == f.id))
                        .map(|(f, _)| *f),
                );
                for f in &added {
                    let r = crate::storage::file_time_range(t, f);
                    crate::catalog::cagg::add_range(&mut invalidated, r);
                }
                steps.push(crate::catalog::FilesChange {
                    table_id: t.id,
                    edits,
                    added,
                    invalidated,
                    refreshed: c.refreshed.clone(),
                });
            }
            self.writer.commit_files(&steps)
        }
        .await;
        match result {
            Ok(()) => {
                self.delete_later(old_paths);
                Ok(())
            }
            Err(e) => {
                // Nothing was committed: the files written for it are garbage.
                self.delete_later(new_paths);
                Err(e)
            }
        }
    }

    /// A consistent snapshot of a table for a scan: its files and memtable rows.
    pub fn view(&self, table_id: u64) -> Option<TableView> {
        self.writer.view(table_id)
    }

    /// Writes every memtable to Parquet; returns the number of files written.
    pub async fn flush(&self) -> Result<usize> {
        self.writer.flush_all().await
    }

    /// Time since the engine opened.
    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Every value `/metrics` shows.
    pub fn metrics_snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        self.metrics.fill(&mut s);
        let w = &self.writer.stats;
        let wal = &self.writer.wal().stats;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        s.rows_written = get(&w.rows_written);
        s.flushes = get(&w.flushes);
        s.flushed_bytes = get(&w.flushed_bytes);
        s.flushed_files = get(&w.flushed_files);
        s.compaction_merges = get(&w.compactions);
        s.memtable_bytes = self.writer.memtable_bytes() as u64;
        s.wal_appends = get(&wal.appends);
        s.wal_fsyncs = get(&wal.fsyncs);
        s.wal_bytes = get(&wal.bytes);
        let manifest = self.catalog.snapshot();
        for d in manifest.databases.values() {
            for t in d.tables.values() {
                s.tables += 1;
                s.chunk_files += t.files.len() as u64;
                s.chunk_bytes += t.files.iter().map(|f| f.bytes).sum::<u64>();
                let mut starts: Vec<i64> = t.files.iter().map(|f| f.chunk_start).collect();
                starts.sort_unstable();
                starts.dedup();
                s.chunks += starts.len() as u64;
            }
        }
        s.uptime_secs = self.started.elapsed().as_secs();
        s
    }

    /// Chunk starts of a table: with files or only in memory.
    pub fn chunk_starts(&self, t: &TableDef) -> BTreeSet<i64> {
        let mut s: BTreeSet<i64> = t.files.iter().map(|f| f.chunk_start).collect();
        if let Some(v) = self.writer.view(t.id) {
            s.extend(
                v.mem
                    .iter()
                    .filter(|(_, b)| b.iter().any(|b| b.batch.num_rows() > 0))
                    .map(|(c, _)| *c),
            );
        }
        s
    }

    /// Chunks entirely before `older` (end ≤ older) and entirely after `newer`
    /// (start ≥ newer), TimescaleDB's rule.
    pub fn select_chunks(&self, t: &TableDef, older: Option<i64>, newer: Option<i64>) -> Vec<i64> {
        self.chunk_starts(t)
            .into_iter()
            .filter(|start| {
                older.is_none_or(|o| t.chunk_end(*start) <= o) && newer.is_none_or(|n| *start >= n)
            })
            .collect()
    }

    /// Drops whole chunks of `table` (all its files) between the bounds; memtables are
    /// flushed first so the WAL cannot bring the rows back. Returns the table and the
    /// starts of the dropped chunks.
    pub async fn drop_chunks(
        &self,
        db: &str,
        table: &str,
        older: Option<i64>,
        newer: Option<i64>,
    ) -> Result<(Arc<TableDef>, Vec<i64>)> {
        self.writer.flush_all().await?;
        let m = self.catalog.snapshot();
        let t = m.table(db, table)?.clone();
        let starts = self.select_chunks(&t, older, newer);
        let files: Vec<&FileMeta> = t
            .files
            .iter()
            .filter(|f| starts.contains(&f.chunk_start))
            .collect();
        self.remove_files(&t, &files, true)?;
        tracing::info!(
            table,
            chunks = starts.len(),
            files = files.len(),
            "dropped chunks"
        );
        Ok((t, starts))
    }

    /// Runs the retention policy of `table`: drops the chunks older than its
    /// `drop_after`, recording the end of the run in [`Engine::jobs`] (its start is
    /// recorded by the caller: the schedule, or `run_job`).
    pub async fn run_retention(
        &self,
        db: &str,
        table: &TableDef,
        policy: &Retention,
    ) -> Result<()> {
        let job = table.retention_job_id();
        let older = chrono::Utc::now()
            .timestamp_micros()
            .saturating_sub(policy.drop_after_micros);
        match self.drop_chunks(db, &table.name, Some(older), None).await {
            Ok((_, dropped)) => {
                self.jobs.finished(job, true, dropped.len());
                Ok(())
            }
            Err(e) => {
                self.jobs.finished(job, false, 0);
                Err(e)
            }
        }
    }

    /// Removes `files` of `t` from the catalog and deletes them once readers are done;
    /// `dropped`: whole chunks dropped (continuous aggregates keep their buckets until
    /// a refresh), else rows deleted.
    fn remove_files(&self, t: &TableDef, files: &[&FileMeta], dropped: bool) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let edits: Vec<FileEdit> = files.iter().map(|f| (f.id, None)).collect();
        let changed = time_ranges(t, files.iter().copied());
        if dropped {
            self.writer.edit_files(t.id, &edits, &[], &changed)?;
        } else {
            self.writer.edit_files(t.id, &edits, &changed, &[])?;
        }
        self.delete_later(files.iter().map(|f| f.path.clone()).collect());
        Ok(())
    }

    /// Removes every file of `t` (memtables must have been flushed). Returns the rows.
    pub fn truncate(&self, t: &TableDef) -> Result<u64> {
        let files: Vec<&FileMeta> = t.files.iter().collect();
        self.remove_files(t, &files, false)?;
        Ok(t.files.iter().map(|f| f.rows).sum())
    }

    /// Deletes the rows where `pred` is true from the given files of `t` (database
    /// `db`): a file marked `true` (every row matches, by its statistics) is dropped
    /// whole, the others are rewritten without their matching rows. All in one
    /// catalog step. Returns the rows deleted.
    pub async fn delete_rows(
        &self,
        db: &str,
        t: &TableDef,
        files: &[(&FileMeta, bool)],
        pred: &Arc<dyn PhysicalExpr>,
    ) -> Result<u64> {
        let mut edits: Vec<FileEdit> = vec![];
        let mut old_paths = vec![];
        let mut deleted = 0u64;
        let mut changed: Vec<&FileMeta> = vec![];
        for (f, all_match) in files {
            if *all_match {
                deleted += f.rows;
                edits.push((f.id, None));
                old_paths.push(f.path.clone());
                changed.push(f);
                continue;
            }
            let out = rewrite::rewrite(&self.file_store(), db, t, &[f], Rewrite::DeleteWhere(pred))
                .await?;
            if out.rows_removed == 0 {
                continue;
            }
            deleted += out.rows_removed;
            edits.push((f.id, out.file));
            old_paths.push(f.path.clone());
            changed.push(f);
        }
        if !edits.is_empty() {
            let changed = time_ranges(t, changed.into_iter());
            if let Err(e) = self.writer.edit_files(t.id, &edits, &changed, &[]) {
                // Nothing was applied: the rewritten files are garbage.
                let written = edits
                    .iter()
                    .filter_map(|(_, f)| f.as_ref().map(|f| f.path.clone()))
                    .collect();
                self.delete_later(written);
                return Err(e);
            }
            self.delete_later(old_paths);
        }
        Ok(deleted)
    }

    /// DROP TABLE: removes it from the catalog, forgets its memtable rows and deletes
    /// its files. `Ok(false)`: absent and `if_exists`.
    pub async fn drop_table(&self, db: &str, name: &str, if_exists: bool) -> Result<bool> {
        let Some(t) = self.catalog.drop_table(db, name, if_exists)? else {
            return Ok(false);
        };
        self.writer.forget_table(t.id);
        self.delete_files_now(&t).await;
        Ok(true)
    }

    /// Runs `task` in the background until it ends or the engine stops (shutdown
    /// awaits it; it is dropped at its next await once stopping).
    pub fn spawn_background(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.background.spawn(task);
    }

    /// DROP MATERIALIZED VIEW of a continuous aggregate: its view and
    /// materialization hypertable leave the catalog in one step; the table's files
    /// are deleted once readers are done with them.
    pub fn drop_cagg(&self, db: &str, view: &str) -> Result<()> {
        let t = self.catalog.drop_cagg(db, view)?;
        self.writer.forget_table(t.id);
        self.delete_later(t.files.iter().map(|f| f.path.clone()).collect());
        Ok(())
    }

    /// DROP DATABASE: like [`Engine::drop_table`] for every table in it.
    pub async fn drop_database(&self, name: &str, if_exists: bool) -> Result<bool> {
        let Some(d): Option<DatabaseDef> = self.catalog.drop_database(name, if_exists)? else {
            return Ok(false);
        };
        for t in d.tables.values() {
            self.writer.forget_table(t.id);
            self.delete_files_now(t).await;
        }
        Ok(true)
    }

    async fn delete_files_now(&self, t: &TableDef) {
        for f in &t.files {
            self.decoded.forget(&f.path);
            let path = object_store::path::Path::from(f.path.as_str());
            if let Err(e) = self.store.delete(&path).await {
                tracing::warn!(path = %f.path, error = %e, "could not delete chunk file");
            }
        }
    }

    /// Compacts every chunk with more than one file; with `only_cold`, only chunks
    /// that have no rows in memory (nothing written since the last flush). Returns the
    /// number of chunks compacted.
    pub async fn compact(&self, only_cold: bool) -> Result<usize> {
        let _one = self.compact_lock.lock().await;
        let manifest = self.catalog.snapshot();
        let mut done = 0;
        for (db, d) in &manifest.databases {
            for t in d.tables.values() {
                // Files cut with different chunk intervals stay apart.
                let mut starts: Vec<(i64, Option<i64>)> = t
                    .files
                    .iter()
                    .map(|f| (f.chunk_start, f.chunk_end))
                    .collect();
                starts.sort_unstable();
                starts.dedup();
                let hot: Vec<i64> = match self.writer.view(t.id) {
                    Some(v) => v.mem.iter().map(|(s, _)| *s).collect(),
                    None => continue,
                };
                for (start, end) in starts {
                    let files: Vec<&FileMeta> = t
                        .files
                        .iter()
                        .filter(|f| f.chunk_start == start && f.chunk_end == end)
                        .collect();
                    if files.len() < 2 || (only_cold && hot.contains(&start)) {
                        continue;
                    }
                    if self.background.token().is_cancelled() {
                        return Ok(done);
                    }
                    if self.compact_chunk(db, t.id, (start, end)).await? {
                        done += 1;
                    }
                }
            }
        }
        Ok(done)
    }

    /// Merges the files of one chunk (`(start, end)` of table `table_id`) into one,
    /// in rounds: each round merges groups of consecutive files that fit in
    /// `compaction_memory` (at most [`MAX_MERGE_FILES`] each), so memory stays bounded
    /// whatever the file count. Returns false when the chunk changed meanwhile (a
    /// DELETE, drop_chunks or DROP TABLE got there first): the rest is left for next time.
    async fn compact_chunk(
        &self,
        db: &str,
        table_id: u64,
        chunk: (i64, Option<i64>),
    ) -> Result<bool> {
        let chunk_files = |t: &TableDef| -> Vec<FileMeta> {
            t.files
                .iter()
                .filter(|f| (f.chunk_start, f.chunk_end) == chunk)
                .cloned()
                .collect()
        };
        loop {
            let m = self.catalog.snapshot();
            let Some((_, t)) = m.table_by_id(table_id) else {
                return Ok(false);
            };
            let files = chunk_files(t);
            if files.len() < 2 {
                return Ok(true);
            }
            let groups = merge_groups(
                &files,
                t.schema().fields().len(),
                self.config.compaction_memory,
            );
            for group in groups.iter().filter(|g| g.len() > 1) {
                if self.background.token().is_cancelled() {
                    return Ok(false);
                }
                // A fresh view of the table: the previous group's swap changed it.
                let m = self.catalog.snapshot();
                let Some((_, t)) = m.table_by_id(table_id) else {
                    return Ok(false);
                };
                let now: Vec<&FileMeta> = group
                    .iter()
                    .filter_map(|g| t.files.iter().find(|f| f.id == g.id))
                    .collect();
                if now.len() != group.len() || !self.merge_files(db, t, &now).await? {
                    return Ok(false);
                }
            }
        }
    }

    /// Merges `files` (consecutive files of one chunk of `table`) into one and swaps
    /// it in. Returns false, having changed nothing, when the files changed meanwhile.
    async fn merge_files(&self, db: &str, table: &TableDef, files: &[&FileMeta]) -> Result<bool> {
        let fs = FileStore {
            runtime: &self.compaction_runtime,
            ..self.file_store()
        };
        let out = rewrite::rewrite(&fs, db, table, files, Rewrite::Merge).await?;
        let (path, bytes) = out
            .file
            .as_ref()
            .map(|m| (Some(m.path.clone()), m.bytes))
            .unwrap_or((None, 0));
        // The new file takes the place of the oldest of them, keeping arrival order
        // (no file at all when no row was left).
        let mut edits: Vec<FileEdit> = files.iter().map(|f| (f.id, None)).collect();
        if let Some(first) = table
            .files
            .iter()
            .find(|f| edits.iter().any(|(id, _)| *id == f.id))
            && let Some(e) = edits.iter_mut().find(|(id, _)| *id == first.id)
        {
            e.1 = out.file;
        }
        let swapped = self.writer.edit_files(table.id, &edits, &[], &[]);
        match swapped {
            Ok(()) => {
                self.writer
                    .stats
                    .compactions
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    table = %table.name,
                    chunk = files[0].chunk_start,
                    files = files.len(),
                    rows = out.rows_kept,
                    bytes,
                    "compacted chunk"
                );
                self.delete_later(files.iter().map(|f| f.path.clone()).collect());
                Ok(true)
            }
            Err(e) => {
                if let Some(p) = path {
                    let _ = self
                        .store
                        .delete(&object_store::path::Path::from(p.as_str()))
                        .await;
                }
                match e {
                    Error::UndefinedTable(_) | Error::Catalog(_) => {
                        tracing::info!(table = %table.name, chunk = files[0].chunk_start, reason = %e,
                            "compaction skipped: the chunk changed meanwhile");
                        Ok(false)
                    }
                    other => Err(other),
                }
            }
        }
    }

    fn file_store(&self) -> FileStore<'_> {
        FileStore {
            store: &self.store,
            url: &self.store_url,
            runtime: &self.runtime,
            catalog: &self.catalog,
        }
    }

    /// Deletes replaced or dropped files once queries that planned with them are done.
    fn delete_later(&self, paths: Vec<String>) {
        let store = self.store.clone();
        let decoded = self.decoded.clone();
        self.background
            .spawn_deferred(rewrite::DELETE_DELAY, async move {
                for p in paths {
                    decoded.forget(&p);
                    if let Err(e) = store
                        .delete(&object_store::path::Path::from(p.as_str()))
                        .await
                    {
                        tracing::warn!(path = %p, error = %e, "could not delete chunk file");
                    }
                }
            });
    }
}

/// Most files one compaction merge reads at once.
const MAX_MERGE_FILES: usize = 16;

/// Splits a chunk's files (in arrival order) into consecutive groups that one merge
/// each reads within half of `budget` (the rest is the merge's and the writer's): a file costs about two decoded batches (8,192
/// rows of `columns` columns at 16 bytes a value) plus one compressed row group.
/// At most [`MAX_MERGE_FILES`] and at least two files a group.
fn merge_groups(files: &[FileMeta], columns: usize, budget: u64) -> Vec<Vec<FileMeta>> {
    let batch = 2 * 8192 * 16 * columns.max(1) as u64;
    let cost = |f: &FileMeta| {
        let groups = f
            .rows
            .div_ceil(crate::storage::ROW_GROUP_ROWS as u64)
            .max(1);
        batch + f.bytes / groups
    };
    let mut out: Vec<Vec<FileMeta>> = vec![];
    let mut used = 0u64;
    for f in files {
        let c = cost(f);
        match out.last_mut() {
            Some(g) if g.len() < MAX_MERGE_FILES && (g.len() < 2 || used + c <= budget / 2) => {
                g.push(f.clone());
                used += c;
            }
            _ => {
                out.push(vec![f.clone()]);
                used = c;
            }
        }
    }
    out
}

fn url_of(s: &str) -> Result<url::Url> {
    url::Url::parse(s).map_err(|e| Error::Internal(format!("bad store url {s}: {e}")))
}

/// Takes an exclusive lock on the data directory so two servers never share it.
fn lock_dir(dir: &std::path::Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            Error::io(
                format!("data directory {} is not writable", dir.display()),
                e,
            )
        })?;
    // SAFETY: flock on a valid, owned file descriptor.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(Error::Config(format!(
            "data directory {} is in use by another sundial process",
            dir.display()
        )));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(id: u64, rows: u64, bytes: u64) -> FileMeta {
        FileMeta {
            id,
            chunk_start: 0,
            chunk_end: None,
            path: format!("f{id}"),
            rows,
            bytes,
            raw_bytes: None,
            sorted_by: None,
            stats: vec![],
        }
    }

    #[test]
    fn merge_groups_are_consecutive_and_bounded() {
        let files: Vec<FileMeta> = (0..40).map(|i| file(i, 10_000, 1 << 20)).collect();
        // A generous budget: groups of MAX_MERGE_FILES, in order, every file once.
        let groups = merge_groups(&files, 10, 1 << 40);
        assert_eq!(
            groups.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![16, 16, 8]
        );
        let ids: Vec<u64> = groups.iter().flatten().map(|f| f.id).collect();
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
        // A small budget: smaller groups, but never fewer than two files.
        let per_file = 2 * 8192 * 16 * 10 + (1 << 20);
        let groups = merge_groups(&files, 10, 8 * per_file);
        assert!(
            groups.iter().all(|g| g.len() <= 4),
            "{:?}",
            groups.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let groups = merge_groups(&files, 10, 1);
        assert!(groups.iter().all(|g| g.len() == 2));
    }
}
