//! Per-session cache of optimized query plans keyed by the exact text of a
//! simple-protocol query: dashboards repeat the same statements, and parsing, analysis
//! and logical optimization cost more than reading one chunk. Which files and memtable
//! rows to read is still decided on every run (the table scan picks them).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use parking_lot::Mutex;

use crate::catalog::{Catalog, ColumnDef};
use crate::query::provider::HypertableProvider;

/// Queries longer than this are not cached (long literal lists rarely repeat).
const MAX_SQL_LEN: usize = 16 * 1024;
/// Entries kept per session; the cache starts over when it is full.
const MAX_ENTRIES: usize = 256;

/// An optimized plan and what it depends on.
#[derive(Debug)]
pub struct Entry {
    /// The analyzed and optimized logical plan.
    pub plan: LogicalPlan,
    /// Output column names as the client should see them.
    pub names: Option<Vec<String>>,
    /// The tables the plan reads, as they were when it was planned.
    tables: Vec<TableKey>,
}

/// A table as a cached plan saw it: the plan holds while the name still leads to the
/// same table with the same columns.
#[derive(Debug)]
pub struct TableKey {
    name: String,
    id: u64,
    columns: Vec<ColumnDef>,
}

/// One session's cached plans.
#[derive(Debug, Default)]
pub struct PlanCache {
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

impl PlanCache {
    /// The cached plan for `sql` when every table it reads is unchanged in `catalog`.
    pub fn get(&self, sql: &str, catalog: &Catalog, db: &str) -> Option<Arc<Entry>> {
        if sql.len() > MAX_SQL_LEN {
            return None;
        }
        let entry = self.entries.lock().get(sql).cloned()?;
        let catalog = catalog.snapshot();
        let unchanged = entry.tables.iter().all(|k| {
            catalog
                .table(db, &k.name)
                .is_ok_and(|t| t.id == k.id && t.columns == k.columns)
        });
        if unchanged {
            Some(entry)
        } else {
            self.entries.lock().remove(sql);
            None
        }
    }

    /// Keeps `plan` (optimized) for `sql`; `tables` comes from [`cacheable`].
    pub fn insert(
        &self,
        sql: &str,
        plan: LogicalPlan,
        names: Option<Vec<String>>,
        tables: Vec<TableKey>,
    ) -> Arc<Entry> {
        let entry = Arc::new(Entry {
            plan,
            names,
            tables,
        });
        if sql.len() <= MAX_SQL_LEN {
            let mut entries = self.entries.lock();
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(sql.to_string(), entry.clone());
        }
        entry
    }

    /// Forgets every plan (after SET, DDL and other statements that change what a
    /// query text means).
    pub fn clear(&self) {
        self.entries.lock().clear();
    }
}

/// The tables an unoptimized query plan reads, when its optimized form may be reused:
/// it reads only user tables (whose scans pick files when they run) and calls only
/// immutable functions (the optimizer folds `now()` and session-dependent functions
/// into constants), and has no parameters.
pub fn cacheable(plan: &LogicalPlan) -> Option<Vec<TableKey>> {
    let mut tables = vec![];
    let mut ok = true;
    let walk = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let provider = source_as_provider(&scan.source).ok();
            let table = provider
                .as_deref()
                .and_then(|p| (p as &dyn std::any::Any).downcast_ref::<HypertableProvider>())
                .map(|p| p.table());
            match table {
                Some(t) => tables.push(TableKey {
                    name: t.name.clone(),
                    id: t.id,
                    columns: t.columns.clone(),
                }),
                None => {
                    ok = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                let fixed = match e {
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    Expr::Placeholder(_) => false,
                    _ => true,
                };
                if fixed {
                    Ok(TreeNodeRecursion::Continue)
                } else {
                    ok = false;
                    Ok(TreeNodeRecursion::Stop)
                }
            })
        })
    });
    (walk.is_ok() && ok).then_some(tables)
}
