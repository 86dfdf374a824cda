//! The one place background work starts: the flusher, the compactor, the retention
//! job runner and deferred file deletions. It keeps every task handle, so shutdown
//! stops them and waits for them to finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Engine;

/// Background tasks and the token that stops them.
pub(super) struct Background {
    token: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
}

impl Background {
    pub(super) fn new(token: CancellationToken) -> Background {
        Background {
            token,
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    pub(super) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Runs `task` until it ends or shutdown begins.
    pub(super) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let token = self.token.clone();
        let mut tasks = self.tasks.lock();
        // Forget tasks that have ended, so the set stays small.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// Runs `task` after `delay`, unless shutdown begins first.
    pub(super) fn spawn_deferred(
        &self,
        delay: Duration,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.spawn(async move {
            tokio::time::sleep(delay).await;
            task.await;
        });
    }

    /// Signals shutdown and waits for every task to end. A loop's work in progress
    /// (a flush, a compaction, a retention run) finishes first: the loops only watch
    /// the token between rounds.
    pub(super) async fn stop(&self) {
        self.token.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks.lock());
        while let Some(r) = tasks.join_next().await {
            if let Err(e) = r
                && e.is_panic()
            {
                tracing::error!(error = %e, "background task panicked");
            }
        }
    }
}

/// Starts the flusher, the compactor and the retention job runner.
pub(super) fn start(engine: &Arc<Engine>) {
    let bg = &engine.background;
    bg.tasks.lock().spawn(flusher(engine.clone()));
    bg.tasks.lock().spawn(compactor(engine.clone()));
    bg.tasks.lock().spawn(retention(engine.clone()));
}

/// Flushes memtables when they pass the size or age bound, until shutdown.
async fn flusher(engine: Arc<Engine>) {
    let svc = &engine.writer;
    loop {
        tokio::select! {
            _ = engine.background.token.cancelled() => return,
            _ = svc.notify.notified() => {},
            _ = tokio::time::sleep(Duration::from_secs(1)) => {},
        }
        if svc.should_flush()
            && let Err(e) = svc.flush_all().await
        {
            tracing::error!(error = %e, "background flush failed");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Compacts cold chunks every 10 s until shutdown.
async fn compactor(engine: Arc<Engine>) {
    loop {
        tokio::select! {
            _ = engine.background.token.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {},
        }
        if let Err(e) = engine.compact(true).await {
            tracing::error!(error = %e, "background compaction failed");
        }
    }
}

/// Runs due retention and compression jobs until shutdown: each policy runs once when added (or at
/// start-up) and then every `schedule_interval`.
async fn retention(engine: Arc<Engine>) {
    loop {
        tokio::select! {
            _ = engine.background.token.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {},
        }
        let m = engine.catalog.snapshot();
        for (db, d) in &m.databases {
            for t in d.tables.values() {
                let Some(r) = &t.retention else { continue };
                let job = t.retention_job_id();
                if !engine
                    .jobs
                    .due(job, r.schedule_interval_micros, r.initial_start_micros)
                {
                    continue;
                }
                if let Err(e) = engine.run_retention(db, t, r).await {
                    tracing::error!(job, table = %t.name, error = %e, "retention job failed");
                }
            }
            for t in d.tables.values() {
                let Some(p) = t.compression.as_ref().and_then(|c| c.policy.as_ref()) else {
                    continue;
                };
                if !engine
                    .jobs
                    .due(p.job_id, p.schedule_interval_micros, p.initial_start_micros)
                {
                    continue;
                }
                if let Err(e) = engine.run_compression(db, t, p).await {
                    tracing::error!(job = p.job_id, table = %t.name, error = %e, "compression job failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn stop_waits_for_loops_and_drops_deferred_work() {
        let bg = Background::new(CancellationToken::new());
        let finished = Arc::new(AtomicBool::new(false));
        let deferred_ran = Arc::new(AtomicBool::new(false));
        // A loop that, like the flusher, finishes its round after the token fires.
        let (token, done) = (bg.token().clone(), finished.clone());
        bg.tasks.lock().spawn(async move {
            token.cancelled().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.store(true, Ordering::SeqCst);
        });
        let ran = deferred_ran.clone();
        bg.spawn_deferred(Duration::from_secs(3600), async move {
            ran.store(true, Ordering::SeqCst);
        });
        bg.stop().await;
        assert!(
            finished.load(Ordering::SeqCst),
            "stop returned before the loop ended"
        );
        assert!(!deferred_ran.load(Ordering::SeqCst));
        assert!(bg.tasks.lock().is_empty());
    }
}
