//! The engine: opens a data directory (lock, catalog, WAL replay, object store,
//! query runtime), runs the background flusher, and shuts down cleanly.

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::wal::Wal;
use crate::write::WriteService;

/// URL under which the chunk store is registered with DataFusion.
pub const STORE_URL: &str = "sundial://store/";

/// Everything a server needs, shared by all connections.
pub struct Engine {
    pub config: Config,
    pub catalog: Arc<Catalog>,
    pub writer: Arc<WriteService>,
    pub store: Arc<dyn ObjectStore>,
    pub store_url: ObjectStoreUrl,
    pub runtime: Arc<RuntimeEnv>,
    pub shutdown: CancellationToken,
    pub started: Instant,
    pub metrics: crate::metrics::Metrics,
    /// One compaction at a time.
    pub compact_lock: tokio::sync::Mutex<()>,
    /// Run state of retention jobs.
    pub jobs: crate::jobs::Jobs,
    /// Typed file statistics for chunk pruning, per table version.
    pub file_stats: Arc<crate::query::stats_cache::StatsCache>,
    _lock: File,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("data_dir", &self.config.data_dir)
            .finish()
    }
}

impl Engine {
    /// Opens the data directory and replays the WAL. Must run inside a Tokio runtime.
    pub async fn open(config: Config) -> Result<Arc<Engine>> {
        let dir = &config.data_dir;
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("data directory {} is not usable", dir.display()), e))?;
        let lock = lock_dir(dir)?;
        let catalog = Arc::new(Catalog::open(dir)?);
        let manifest = catalog.snapshot();
        let (wal, records) =
            Wal::open(&dir.join("wal"), config.wal_fsync, manifest.flushed_wal_seq)?;
        std::fs::create_dir_all(dir.join("data"))
            .map_err(|e| Error::io(format!("cannot create {}/data", dir.display()), e))?;
        let store: Arc<dyn ObjectStore> = Arc::new(
            LocalFileSystem::new_with_prefix(dir)
                .map_err(Error::from)?
                .with_automatic_cleanup(true),
        );
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
        let store_url = ObjectStoreUrl::parse(STORE_URL)?;
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(config.query_memory_limit as usize, 1.0)
            .build_arc()?;
        let url = url_of(STORE_URL)?;
        runtime.register_object_store(&url, store.clone());
        let engine = Arc::new(Engine {
            config,
            catalog,
            writer,
            store,
            store_url,
            runtime,
            shutdown: CancellationToken::new(),
            started: Instant::now(),
            metrics: Default::default(),
            compact_lock: tokio::sync::Mutex::new(()),
            jobs: Default::default(),
            file_stats: Default::default(),
            _lock: lock,
        });
        tokio::spawn(crate::write::run_flusher(
            engine.writer.clone(),
            engine.shutdown.clone(),
        ));
        tokio::spawn(crate::storage::compact::run_compactor(engine.clone()));
        tokio::spawn(crate::sql::chunks::run_jobs(engine.clone()));
        Ok(engine)
    }

    /// Stops background work and flushes every memtable.
    pub async fn close(&self) -> Result<()> {
        self.shutdown.cancel();
        self.writer.flush_all().await.map(|_| ())
    }
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
