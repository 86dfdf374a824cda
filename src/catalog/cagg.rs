//! Continuous aggregates in the catalog: the definition a materialization
//! hypertable carries, and invalidation ranges — the time ranges that writes to a
//! source changed since they were last materialized (TimescaleDB's invalidation logs).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Catalog, Manifest, NewTable, TableDef, ViewDef};
use crate::error::{Error, Result};

/// An inclusive time range in microseconds.
pub type Range = (i64, i64);

/// Most ranges a log keeps: past this the two closest are merged (a wider range
/// only costs recomputation, never a wrong answer).
const MAX_RANGES: usize = 256;

/// A continuous aggregate, stored on its materialization hypertable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaggDef {
    /// The user's view name.
    pub view: String,
    /// The table a refresh reads: the raw hypertable, or the materialization
    /// hypertable of the parent continuous aggregate (hierarchical).
    pub source_id: u64,
    /// The raw hypertable at the bottom of the hierarchy.
    pub raw_id: u64,
    /// The parent continuous aggregate's view name (hierarchical), as the defining
    /// query names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The defining query, as Sundial's SQL front door normalized it.
    pub sql: String,
    /// Time column of the source the query buckets.
    pub source_time: String,
    /// The bucket column of the view (the materialization's time column).
    pub bucket_column: String,
    pub bucket: BucketDef,
    /// `timescaledb.materialized_only`: the view shows only materialized buckets.
    pub materialized_only: bool,
    /// The materialization invalidation log: source time ranges not materialized
    /// since they changed (a new aggregate starts with everything).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidations: Vec<Range>,
    /// Source ranges whose chunks were dropped (drop_chunks, retention): a refresh
    /// over them removes their buckets, but until then the view keeps showing what
    /// was materialized, as TimescaleDB does (aggregates outlive raw data).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Range>,
    /// `add_continuous_aggregate_policy`: refreshed by a background job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RefreshPolicy>,
}

/// A refresh policy (TimescaleDB job `policy_refresh_continuous_aggregate`):
/// every `schedule_interval` the window `[now - start_offset, now - end_offset)`
/// is refreshed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefreshPolicy {
    pub job_id: i64,
    /// `None`: from the oldest data (NULL).
    pub start_offset: Option<i64>,
    /// `None`: up to the newest data (NULL).
    pub end_offset: Option<i64>,
    pub schedule_interval_micros: i64,
    /// The offsets as the user wrote them (`timescaledb_information.jobs.config`).
    pub start_offset_text: Option<String>,
    pub end_offset_text: Option<String>,
    /// `initial_start`: the first run is not before this (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_start_micros: Option<i64>,
}

/// The `time_bucket` of a continuous aggregate, evaluated to numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BucketDef {
    /// The width as the user wrote it (`1 hour`).
    pub width: String,
    pub months: i32,
    pub days: i32,
    pub micros: i64,
    /// Origin (microseconds), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<i64>,
    /// Offset (microseconds).
    #[serde(default)]
    pub offset: i64,
    /// Time zone buckets are cut in, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

impl BucketDef {
    /// Whether every bucket has the same width in microseconds.
    pub fn fixed_width(&self) -> Option<i64> {
        // Buckets in a time zone stretch and shrink with daylight saving.
        if self.months != 0 || self.timezone.is_some() {
            return None;
        }
        Some(
            i64::from(self.days)
                .saturating_mul(86_400_000_000)
                .saturating_add(self.micros),
        )
    }

    /// An upper bound of a bucket's width (months of 31 days, days of 25 hours),
    /// less than twice the narrowest bucket: one step past a bucket's start lands
    /// in the next bucket.
    pub fn max_width(&self) -> i64 {
        i64::from(self.months)
            .saturating_mul(31 * 86_400_000_000)
            .saturating_add(i64::from(self.days).saturating_mul(25 * 3_600_000_000))
            .saturating_add(self.micros)
    }
}

/// Adds `r` to a sorted list of disjoint ranges, merging what touches it.
pub fn add_range(list: &mut Vec<Range>, r: Range) {
    let (mut lo, mut hi) = (r.0.min(r.1), r.0.max(r.1));
    let mut out = Vec::with_capacity(list.len() + 1);
    let mut placed = false;
    for &(a, b) in list.iter() {
        if b.saturating_add(1) < lo {
            out.push((a, b));
        } else if hi.saturating_add(1) < a {
            if !placed {
                out.push((lo, hi));
                placed = true;
            }
            out.push((a, b));
        } else {
            lo = lo.min(a);
            hi = hi.max(b);
        }
    }
    if !placed {
        out.push((lo, hi));
    }
    while out.len() > MAX_RANGES {
        let i = (0..out.len() - 1)
            .min_by_key(|&i| out[i + 1].0.saturating_sub(out[i].1))
            .unwrap_or(0);
        let merged = (out[i].0, out[i + 1].1);
        out.splice(i..i + 2, [merged]);
    }
    *list = out;
}

/// Removes `r` from a sorted list of disjoint ranges.
pub fn remove_range(list: &mut Vec<Range>, r: Range) {
    let (lo, hi) = r;
    let mut out = Vec::with_capacity(list.len() + 1);
    for &(a, b) in list.iter() {
        if b < lo || a > hi {
            out.push((a, b));
            continue;
        }
        if a < lo {
            out.push((a, lo - 1));
        }
        if b > hi {
            out.push((hi + 1, b));
        }
    }
    *list = out;
}

/// The parts of `list` inside `r`.
pub fn intersect(list: &[Range], r: Range) -> Vec<Range> {
    list.iter()
        .filter(|(a, b)| *b >= r.0 && *a <= r.1)
        .map(|&(a, b)| (a.max(r.0), b.min(r.1)))
        .collect()
}

impl Catalog {
    /// Creates a continuous aggregate in one step: its materialization hypertable
    /// `table` (carrying `cagg`, all of whose source range starts invalidated) and
    /// its view. Returns the materialization table's id.
    pub fn create_cagg(
        &self,
        db: &str,
        table: NewTable,
        mut cagg: CaggDef,
        mut view: ViewDef,
    ) -> Result<u64> {
        self.update(|m| {
            let id = m.alloc_id();
            let view_id = m.alloc_id();
            let d = m.database_mut(db)?;
            if d.tables.contains_key(&view.name) || d.views.contains_key(&view.name) {
                return Err(Error::DuplicateTable(view.name));
            }
            if d.tables.contains_key(&table.name) {
                return Err(Error::DuplicateTable(table.name));
            }
            if !d.tables.values().any(|t| t.id == cagg.source_id) {
                return Err(Error::UndefinedTable(format!(
                    "table id {}",
                    cagg.source_id
                )));
            }
            cagg.invalidations = vec![(i64::MIN, i64::MAX)];
            let mut t = table.build(id);
            t.cagg = Some(Box::new(cagg));
            view.id = view_id;
            view.cagg = Some(id);
            d.tables.insert(t.name.clone(), Arc::new(t));
            d.views.insert(view.name.clone(), view);
            Ok(id)
        })
    }

    /// Removes a continuous aggregate's view and its materialization hypertable in
    /// one step; returns the table (whose files the caller deletes).
    pub fn drop_cagg(&self, db: &str, view: &str) -> Result<Arc<TableDef>> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            let Some(id) = d.views.get(view).and_then(|v| v.cagg) else {
                return Err(Error::sql(
                    "42809",
                    format!("\"{view}\" is not a materialized view"),
                ));
            };
            d.views.remove(view);
            let name = d
                .tables
                .values()
                .find(|t| t.id == id)
                .map(|t| t.name.clone());
            let table = name
                .and_then(|n| d.tables.remove(&n))
                .ok_or_else(|| Error::UndefinedTable(format!("table id {id}")))?;
            let source = table.cagg.as_ref().map(|c| c.source_id);
            // The source keeps its log only while some aggregate reads it.
            if let Some(src) = source
                && !d
                    .tables
                    .values()
                    .any(|t| t.cagg.as_ref().is_some_and(|c| c.source_id == src))
                && let Some(s) = d.tables.values_mut().find(|t| t.id == src)
                && !(s.invalidations.is_empty() && s.dropped.is_empty())
            {
                let s = Arc::make_mut(s);
                s.invalidations.clear();
                s.dropped.clear();
            }
            super::roles::forget_relation(m, db, view);
            Ok(table)
        })
    }

    /// `ALTER MATERIALIZED VIEW … SET (timescaledb.materialized_only = …)`.
    pub fn set_materialized_only(&self, db: &str, view: &str, on: bool) -> Result<()> {
        self.update(|m| {
            let t = cagg_table_mut(m, db, view)?;
            if let Some(c) = Arc::make_mut(t).cagg.as_mut() {
                c.materialized_only = on;
            }
            Ok(())
        })
    }

    /// Sets (or with `None` removes) the refresh policy of continuous aggregate
    /// `view`; a new policy gets a fresh job id. Returns the policy now in place.
    /// An existing policy is kept and returned with `Ok(Err(..))` when adding.
    pub fn set_cagg_policy(
        &self,
        db: &str,
        view: &str,
        policy: Option<RefreshPolicy>,
    ) -> Result<std::result::Result<Option<RefreshPolicy>, RefreshPolicy>> {
        self.update(|m| {
            let job = 1000 + m.alloc_id() as i64;
            let t = cagg_table_mut(m, db, view)?;
            let Some(c) = Arc::make_mut(t).cagg.as_mut() else {
                return Err(Error::Internal(format!("{view} has no definition")));
            };
            match (policy, c.policy.clone()) {
                (Some(_), Some(old)) => Ok(Err(old)),
                (Some(mut p), None) => {
                    p.job_id = job;
                    c.policy = Some(p.clone());
                    Ok(Ok(Some(p)))
                }
                (None, old) => {
                    c.policy = None;
                    Ok(Ok(old))
                }
            }
        })
    }

    /// Moves the hypertable invalidation log of table `source_id` into the log of
    /// every continuous aggregate that reads it (the first step of a refresh).
    pub fn move_invalidations(&self, source_id: u64) -> Result<()> {
        if !self
            .snapshot()
            .databases
            .values()
            .flat_map(|d| d.tables.values())
            .any(|t| t.id == source_id && !(t.invalidations.is_empty() && t.dropped.is_empty()))
        {
            return Ok(());
        }
        self.update(|m| {
            for d in m.databases.values_mut() {
                let Some((log, dropped)) =
                    d.tables.values_mut().find(|t| t.id == source_id).map(|t| {
                        let t = Arc::make_mut(t);
                        (
                            std::mem::take(&mut t.invalidations),
                            std::mem::take(&mut t.dropped),
                        )
                    })
                else {
                    continue;
                };
                for t in d.tables.values_mut() {
                    if t.cagg.as_ref().is_some_and(|c| c.source_id == source_id)
                        && let Some(c) = Arc::make_mut(t).cagg.as_mut()
                    {
                        for r in &log {
                            add_range(&mut c.invalidations, *r);
                        }
                        for r in &dropped {
                            add_range(&mut c.dropped, *r);
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

/// The materialization table of continuous aggregate `view`.
fn cagg_table_mut<'a>(m: &'a mut Manifest, db: &str, view: &str) -> Result<&'a mut Arc<TableDef>> {
    let d = m.database_mut(db)?;
    let Some(id) = d.views.get(view).and_then(|v| v.cagg) else {
        return Err(Error::sql(
            "42809",
            format!("\"{view}\" is not a continuous aggregate"),
        ));
    };
    d.tables
        .values_mut()
        .find(|t| t.id == id)
        .ok_or_else(|| Error::UndefinedTable(view.to_string()))
}

/// The ids of the tables some continuous aggregate reads.
pub(super) fn sources(m: &Manifest) -> std::collections::HashSet<u64> {
    m.databases
        .values()
        .flat_map(|d| d.tables.values())
        .filter_map(|t| t.cagg.as_ref().map(|c| c.source_id))
        .collect()
}

/// Records that `ranges` of table `table_id` changed, when a continuous aggregate
/// reads the table (its hypertable invalidation log); otherwise nothing is kept.
pub(super) fn invalidate(m: &mut Manifest, table_id: u64, ranges: &[Range]) {
    log(m, table_id, ranges, false);
}

/// Records that the chunks of `ranges` of table `table_id` were dropped.
pub(super) fn dropped(m: &mut Manifest, table_id: u64, ranges: &[Range]) {
    log(m, table_id, ranges, true);
}

fn log(m: &mut Manifest, table_id: u64, ranges: &[Range], drop: bool) {
    if ranges.is_empty() {
        return;
    }
    for d in m.databases.values_mut() {
        if !d.tables.values().any(|t| t.id == table_id) {
            continue;
        }
        if !d
            .tables
            .values()
            .any(|t| t.cagg.as_ref().is_some_and(|c| c.source_id == table_id))
        {
            return;
        }
        if let Some(t) = d.tables.values_mut().find(|t| t.id == table_id) {
            let t = Arc::make_mut(t);
            let list = if drop {
                &mut t.dropped
            } else {
                &mut t.invalidations
            };
            for r in ranges {
                add_range(list, *r);
            }
        }
        return;
    }
}

/// Takes `ranges` (just re-materialized) out of the log of the continuous
/// aggregate that table `table_id` materializes.
pub(super) fn refreshed(m: &mut Manifest, table_id: u64, ranges: &[Range]) {
    if ranges.is_empty() {
        return;
    }
    if let Some(t) = m
        .databases
        .values_mut()
        .flat_map(|d| d.tables.values_mut())
        .find(|t| t.id == table_id)
        && let Some(c) = Arc::make_mut(t).cagg.as_mut()
    {
        for r in ranges {
            remove_range(&mut c.invalidations, *r);
            remove_range(&mut c.dropped, *r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_split_and_stay_bounded() {
        let mut l = vec![];
        add_range(&mut l, (10, 20));
        add_range(&mut l, (30, 40));
        add_range(&mut l, (21, 25));
        assert_eq!(l, vec![(10, 25), (30, 40)]);
        add_range(&mut l, (0, 100));
        assert_eq!(l, vec![(0, 100)]);
        remove_range(&mut l, (10, 19));
        assert_eq!(l, vec![(0, 9), (20, 100)]);
        assert_eq!(intersect(&l, (5, 30)), vec![(5, 9), (20, 30)]);
        let mut l = vec![(i64::MIN, i64::MAX)];
        remove_range(&mut l, (0, 9));
        assert_eq!(l, vec![(i64::MIN, -1), (10, i64::MAX)]);
        let mut l = vec![];
        for i in 0..1000 {
            add_range(&mut l, (i * 10, i * 10 + 1));
        }
        assert_eq!(l.len(), MAX_RANGES);
        assert_eq!(l[0].0, 0);
        assert_eq!(l[MAX_RANGES - 1].1, 9991);
    }
}
