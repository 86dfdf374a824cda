//! The threads statements run on: a runtime of their own, apart from the one that
//! serves connections, line-protocol writes and the WAL, so that a statement that
//! plans or computes for seconds delays neither other clients nor acknowledgements.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();

/// The statement runtime, started on first use and kept for the life of the
/// process (the caller's runtime when it cannot be started): four workers per core,
/// so that a statement whose operators compute for seconds without yielding holds a
/// worker per partition while the operating system shares the cores with the
/// statements of other clients; [`crate::STATEMENT_STACK_BYTES`] of stack each.
pub fn handle() -> Handle {
    let rt = RUNTIME.get_or_init(|| {
        let workers = 4 * std::thread::available_parallelism().map_or(2, |n| n.get());
        match Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("sundial-query")
            .thread_stack_size(crate::STATEMENT_STACK_BYTES)
            .enable_all()
            .build()
        {
            Ok(rt) => Some(rt),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the statement runtime; statements share the server's");
                None
            }
        }
    });
    match rt {
        Some(rt) => rt.handle().clone(),
        None => Handle::current(),
    }
}

tokio::task_local! {
    /// The token that ends the statement this task runs.
    static CANCEL: tokio_util::sync::CancellationToken;
}

/// Runs a statement's `work` on the statement runtime under its cancel `token`,
/// which [`canceled`] reads inside work that cannot be abandoned at an await.
pub fn spawn<T: Send + 'static>(
    token: tokio_util::sync::CancellationToken,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    handle().spawn(CANCEL.scope(token, work))
}

/// Whether the statement this task runs has been canceled (or timed out): planning
/// steps that compute long without an await check it and give up.
pub fn canceled() -> bool {
    CANCEL.try_with(|t| t.is_cancelled()).unwrap_or(false)
}
