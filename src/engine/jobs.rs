//! Run state of background jobs (retention policies): when each last ran, how it
//! ended, and when it is due again. Policies themselves live in the catalog; this
//! state is in memory, so every policy runs once soon after start-up.

use std::collections::HashMap;

use parking_lot::Mutex;

/// What `timescaledb_information.jobs` / `job_stats` show about one job.
#[derive(Debug, Clone, Default)]
pub struct JobState {
    /// µs since the epoch of the last start and successful finish.
    pub last_run_started_at: Option<i64>,
    pub last_successful_finish: Option<i64>,
    pub last_run_status: Option<&'static str>,
    pub total_runs: i64,
    pub total_failures: i64,
    /// Chunks dropped by the last run.
    pub last_dropped: usize,
    /// µs since the epoch when the job runs next.
    pub next_start: Option<i64>,
}

/// All jobs' run state.
#[derive(Debug, Default)]
pub struct Jobs {
    state: Mutex<HashMap<i64, JobState>>,
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Jobs {
    /// Makes `job` run first at `start` (µs since the epoch; now when `None`).
    pub fn schedule_from(&self, job: i64, start: Option<i64>) {
        self.state.lock().entry(job).or_default().next_start = Some(start.unwrap_or_else(now));
    }

    /// Whether `job` should run now; marks it started if so. A job that has no next
    /// start yet (new, or after a restart) runs now or at `initial_start`.
    pub fn due(&self, job: i64, interval_micros: i64, initial_start: Option<i64>) -> bool {
        let mut st = self.state.lock();
        let s = st.entry(job).or_default();
        let t = now();
        let next = *s
            .next_start
            .get_or_insert(initial_start.map_or(t, |i| i.max(t)));
        if t < next {
            return false;
        }
        s.last_run_started_at = Some(t);
        s.next_start = Some(t.saturating_add(interval_micros.max(1)));
        true
    }

    /// Records the start of a run outside the schedule (`run_job`).
    pub fn started(&self, job: i64) {
        self.state
            .lock()
            .entry(job)
            .or_default()
            .last_run_started_at = Some(now());
    }

    /// Records the end of a run.
    pub fn finished(&self, job: i64, ok: bool, dropped: usize) {
        let mut st = self.state.lock();
        let s = st.entry(job).or_default();
        s.total_runs += 1;
        s.last_dropped = dropped;
        if ok {
            s.last_successful_finish = Some(now());
            s.last_run_status = Some("Success");
        } else {
            s.total_failures += 1;
            s.last_run_status = Some("Failed");
        }
    }

    /// Run state of `job` (default when it never ran).
    pub fn get(&self, job: i64) -> JobState {
        self.state.lock().get(&job).cloned().unwrap_or_default()
    }
}

/// What the last refresh of each continuous aggregate recomputed (`sundial_cagg_refreshes`).
#[derive(Debug, Default)]
pub struct CaggRefreshes {
    last: Mutex<std::collections::BTreeMap<(String, String), CaggRefresh>>,
}

/// One refresh of a continuous aggregate.
#[derive(Debug, Clone, Default)]
pub struct CaggRefresh {
    /// Buckets recomputed (source ranges, for variable-width buckets).
    pub buckets: u64,
    /// Rows the recomputed buckets hold now.
    pub rows: u64,
    /// µs since the epoch when it finished.
    pub at: i64,
    /// Refreshes of this aggregate since start-up.
    pub count: u64,
}

impl CaggRefreshes {
    /// Records a refresh of view `view` of database `db`.
    pub fn record(&self, db: &str, view: &str, buckets: u64, rows: u64) {
        let mut last = self.last.lock();
        let e = last.entry((db.to_string(), view.to_string())).or_default();
        e.buckets = buckets;
        e.rows = rows;
        e.at = now();
        e.count += 1;
    }

    /// The last refresh of each aggregate of database `db`, by view name.
    pub fn of(&self, db: &str) -> Vec<(String, CaggRefresh)> {
        self.last
            .lock()
            .iter()
            .filter(|((d, _), _)| d == db)
            .map(|((_, v), r)| (v.clone(), r.clone()))
            .collect()
    }
}
