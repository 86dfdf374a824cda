//! Transaction blocks as PostgreSQL runs them: `BEGIN` stages the session's writes,
//! `COMMIT` applies them atomically (one WAL record, or one catalog step when rows
//! are deleted), `ROLLBACK` drops them; savepoints, the aborted state (25P02), and
//! which DDL a block may hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::sql::sqlparser::ast::{self, Statement};

use super::{Output, Session};
use crate::catalog::{DROPPED_PREFIX, Manifest, TableDef};
use crate::engine::TableChange;
use crate::engine::tx::StagedOp;
use crate::error::{Error, Result};

/// What the session's transaction looks like to the client (ReadyForQuery).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Idle,
    InBlock,
    /// An error happened in the block: only ROLLBACK (TO) or COMMIT are accepted.
    Failed,
}

/// One savepoint: where the staged changes and the block's DDL stood.
#[derive(Debug, Clone)]
struct Savepoint {
    name: String,
    mark: usize,
    undo: usize,
    /// The session's settings when the savepoint was set, and what the block had
    /// noted about them: ROLLBACK TO puts both back.
    settings: BTreeMap<String, String>,
    set_in_block: SetInBlock,
}

/// What `SET` did inside a block, so that ROLLBACK undoes it and COMMIT ends
/// `SET LOCAL` (PostgreSQL's GUC stack, flattened to one level per block).
#[derive(Debug, Default, Clone)]
struct SetInBlock {
    /// The settings as the block found them, taken at its first SET.
    before: Option<BTreeMap<String, String>>,
    /// Values a plain SET gave inside the block: what COMMIT keeps.
    session: BTreeMap<String, String>,
    /// Settings SET LOCAL changed: COMMIT gives them their session value back.
    local: BTreeSet<String>,
}

/// DDL a block ran, and how ROLLBACK undoes it.
#[derive(Debug, Clone)]
enum Undo {
    /// CREATE TABLE: dropped again.
    Created(String),
    /// DROP TABLE: the table was only renamed to `hidden`; ROLLBACK gives it its
    /// name back, COMMIT drops it.
    Dropped { hidden: String, name: String },
    /// create_hypertable of an empty plain table: plain again, its time column as
    /// nullable as it was.
    MadeHypertable {
        name: String,
        column: String,
        nullable: bool,
    },
    /// DDL that changed only definitions (ALTER TABLE, views, indexes, grants,
    /// roles, policies): ROLLBACK puts back what it changed from `before` to `after`.
    Definitions {
        before: Arc<Manifest>,
        after: Arc<Manifest>,
    },
}

/// The DDL an open block ran, newest last: shared with the management functions a
/// query of the block calls (they run on a session of their own).
#[derive(Debug, Default)]
pub struct BlockDdl {
    undo: parking_lot::Mutex<Vec<Undo>>,
    /// Columns to make NOT NULL once COMMIT has applied the rows that fill them
    /// (the shared catalog must not say NOT NULL while stored rows hold NULL).
    not_null: parking_lot::Mutex<Vec<(String, Vec<String>)>>,
}

impl BlockDdl {
    /// Notes that a statement of the block changed definitions from `before` to
    /// the catalog's current ones.
    pub fn record(&self, before: Arc<Manifest>, catalog: &crate::catalog::Catalog) {
        let after = catalog.snapshot();
        if !Arc::ptr_eq(&before, &after) {
            self.undo.lock().push(Undo::Definitions { before, after });
        }
    }
}

/// Per-session transaction state beyond the staged writes.
#[derive(Debug, Default)]
pub struct TxState {
    aborted: bool,
    savepoints: Vec<Savepoint>,
    set_in_block: SetInBlock,
    /// The statement running is DDL whose definitions [`Undo::Definitions`] puts
    /// back: the block may hold it.
    recording: bool,
}

/// Whether `stmt` ends or repairs a failed block (accepted in the aborted state).
fn leaves_failed_block(stmt: &Statement) -> bool {
    matches!(stmt, Statement::Commit { .. } | Statement::Rollback { .. })
}

fn aborted_error() -> Error {
    Error::sql(
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

impl Session {
    /// The transaction status to report.
    pub fn tx_status(&self) -> Status {
        if !self.staging.in_block() {
            Status::Idle
        } else if self.tx.lock().aborted {
            Status::Failed
        } else {
            Status::InBlock
        }
    }

    /// A new block: no savepoints, no DDL, not aborted.
    fn reset_block(&self) {
        *self.tx.lock() = TxState::default();
        self.block_ddl.undo.lock().clear();
        self.block_ddl.not_null.lock().clear();
    }

    /// Makes `columns` of `table` NOT NULL: now, or inside a block at COMMIT, once
    /// the rows the block filled them with are applied.
    pub(crate) fn set_not_null(&self, table: &str, columns: Vec<String>) -> Result<()> {
        if columns.is_empty() {
            return Ok(());
        }
        if self.staging.in_block() {
            self.block_ddl
                .not_null
                .lock()
                .push((table.to_string(), columns));
            return Ok(());
        }
        self.engine
            .catalog()
            .set_not_null(&self.db, table, &columns)
    }

    /// Records that a statement failed: inside a block, the block is now aborted.
    pub fn note_error(&self) {
        if self.staging.in_block() {
            self.tx.lock().aborted = true;
        }
    }

    /// 25P02 when the block is aborted and `stmt` (`None`: a statement known not to
    /// end a block) is not ROLLBACK or COMMIT.
    pub fn check_not_aborted(&self, stmt: Option<&Statement>) -> Result<()> {
        if self.tx_status() == Status::Failed && !stmt.is_some_and(leaves_failed_block) {
            return Err(aborted_error());
        }
        Ok(())
    }

    /// Opens the implicit transaction of a simple-protocol Query message that holds
    /// several writes (PostgreSQL runs such a message as one transaction).
    pub fn begin_implicit(&self) {
        self.staging.begin();
        self.reset_block();
    }

    /// Ends the implicit transaction: commits it when every statement succeeded,
    /// else discards it (an error rolls back the statements before it).
    pub async fn end_implicit(&self, ok: bool) -> Result<()> {
        let out = if ok {
            let out = self.commit().await;
            if out.is_err() {
                self.discard().await;
            }
            out
        } else {
            self.discard().await;
            Ok(())
        };
        self.cursors.end_of_block().await;
        self.advisory.end_of_block();
        out
    }

    /// Writes rows now, or stages them inside a transaction block.
    pub async fn write_rows(&self, table: &Arc<TableDef>, batch: RecordBatch) -> Result<u64> {
        super::fkeys::check_new_rows(self, table, &batch).await?;
        if self.staging.in_block() {
            self.staging.insert(table, batch)
        } else {
            self.engine.write(table, batch).await
        }
    }

    /// Inside a block: refuses DDL that ROLLBACK could not undo (25001), before it
    /// changes anything, as PostgreSQL refuses `CREATE DATABASE` in a block.
    pub fn check_ddl_in_block(&self, what: &str) -> Result<()> {
        if self.staging.in_block() && !self.tx.lock().recording {
            return Err(Error::sql(
                "25001",
                format!(
                    "{what} cannot run inside a transaction block (Sundial runs CREATE TABLE, DROP TABLE and changes to tables created in the block transactionally; run it outside BEGIN ... COMMIT, or in autocommit mode)"
                ),
            ));
        }
        Ok(())
    }

    /// Runs `stmt`, DDL [`changes_definitions`] accepts, inside the open block:
    /// ROLLBACK puts back the definitions it changed (even when it fails part way).
    pub(crate) async fn run_recorded<T>(
        &self,
        run: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let before = self.engine.catalog().snapshot();
        self.tx.lock().recording = true;
        let out = run.await;
        self.tx.lock().recording = false;
        self.block_ddl.record(before, self.engine.catalog());
        out
    }

    /// Remembers a table created inside the block (ROLLBACK drops it).
    pub fn created_in_block(&self, name: &str) {
        if self.staging.in_block() {
            self.block_ddl
                .undo
                .lock()
                .push(Undo::Created(name.to_string()));
        }
    }

    /// Remembers a table the block made a hypertable (ROLLBACK makes it plain).
    pub fn made_hypertable_in_block(&self, name: &str, column: &str, nullable: bool) {
        if self.staging.in_block() {
            self.block_ddl.undo.lock().push(Undo::MadeHypertable {
                name: name.to_string(),
                column: column.to_string(),
                nullable,
            });
        }
    }

    /// Whether table `name` was created in the open block (its DDL may follow).
    pub fn is_created_in_block(&self, name: &str) -> bool {
        self.staging.in_block()
            && self
                .block_ddl
                .undo
                .lock()
                .iter()
                .any(|u| matches!(u, Undo::Created(n) if n == name))
    }

    /// DROP TABLE inside a block: a table the block created goes at once; another
    /// is renamed out of the way until COMMIT drops it (ROLLBACK renames it back).
    pub async fn drop_table_in_block(&self, name: &str, if_exists: bool) -> Result<()> {
        let m = self.engine.catalog().snapshot();
        let t = match m.table(&self.db, name) {
            Ok(t) => t.clone(),
            Err(_) if if_exists => return Ok(()),
            Err(e) => return Err(e),
        };
        self.plans.clear();
        if self.is_created_in_block(name) {
            self.engine.drop_table(&self.db, name, true).await?;
            return Ok(());
        }
        let hidden = format!("{DROPPED_PREFIX}{}_{name}", t.id);
        self.engine
            .catalog()
            .rename_table(&self.db, name, &hidden)?;
        self.block_ddl.undo.lock().push(Undo::Dropped {
            hidden,
            name: name.to_string(),
        });
        Ok(())
    }

    /// Runs a transaction-control statement; `None` if `stmt` is not one.
    pub(crate) async fn transaction_statement(&self, stmt: &Statement) -> Result<Option<Output>> {
        Ok(Some(match stmt {
            Statement::StartTransaction { begin, .. } => {
                if self.staging.in_block() {
                    tracing::debug!("BEGIN inside a transaction block: already in one");
                } else {
                    self.staging.begin();
                    self.reset_block();
                }
                Output::TxStart(if *begin { "BEGIN" } else { "START TRANSACTION" }.into())
            }
            Statement::Commit { chain, .. } => {
                let failed = self.tx_status() == Status::Failed;
                let tag = if failed { "ROLLBACK" } else { "COMMIT" };
                if failed {
                    self.discard().await;
                } else if self.staging.in_block() {
                    self.commit().await?;
                }
                self.end_block(*chain, tag).await
            }
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => {
                self.rollback_to(&name.value).await?;
                Output::Command("ROLLBACK".into())
            }
            Statement::Rollback { chain, .. } => {
                self.discard().await;
                self.end_block(*chain, "ROLLBACK").await
            }
            Statement::Savepoint { name } => {
                if !self.staging.in_block() {
                    return Err(Error::sql(
                        "25P01",
                        "SAVEPOINT can only be used in transaction blocks",
                    ));
                }
                let mark = self.staging.mark();
                let settings = self.settings.read().clone();
                let mut tx = self.tx.lock();
                let undo = self.block_ddl.undo.lock().len();
                let set_in_block = tx.set_in_block.clone();
                tx.savepoints.push(Savepoint {
                    name: name.value.clone(),
                    mark,
                    undo,
                    settings,
                    set_in_block,
                });
                Output::Command("SAVEPOINT".into())
            }
            Statement::ReleaseSavepoint { name } => {
                let mut tx = self.tx.lock();
                let Some(i) = find_savepoint(&tx.savepoints, &name.value) else {
                    drop(tx);
                    return Err(no_savepoint(self, &name.value));
                };
                tx.savepoints.truncate(i);
                Output::Command("RELEASE".into())
            }
            _ => return Ok(None),
        }))
    }

    /// Output of COMMIT / ROLLBACK; `AND CHAIN` opens the next block at once.
    /// Cursors without HOLD close either way.
    async fn end_block(&self, chain: bool, tag: &str) -> Output {
        self.cursors.end_of_block().await;
        self.advisory.end_of_block();
        if chain {
            self.staging.begin();
            self.reset_block();
            Output::TxStart(tag.into())
        } else {
            Output::TxEnd(tag.into())
        }
    }

    /// `ROLLBACK TO SAVEPOINT name`: forgets what came after it, keeps it, and
    /// leaves the aborted state.
    async fn rollback_to(&self, name: &str) -> Result<()> {
        let (mark, dropped, settings) = {
            let mut tx = self.tx.lock();
            let Some(i) = find_savepoint(&tx.savepoints, name) else {
                drop(tx);
                return Err(no_savepoint(self, name));
            };
            let sp = tx.savepoints[i].clone();
            tx.savepoints.truncate(i + 1);
            tx.aborted = false;
            let undo = self.block_ddl.undo.lock().split_off(sp.undo);
            let changed = tx.set_in_block.before.is_some();
            tx.set_in_block = sp.set_in_block;
            (sp.mark, undo, changed.then_some(sp.settings))
        };
        self.staging.rollback_to(mark);
        self.undo(dropped).await;
        if let Some(s) = settings {
            super::session::restore(self, &s);
        }
        Ok(())
    }

    /// Before a `SET` (`local`: `SET LOCAL`) of setting `key`: notes what the block
    /// must undo. Returns whether the SET takes effect: outside a block SET LOCAL
    /// has none (PostgreSQL warns and ends it with the statement).
    pub(crate) fn before_set(&self, key: &str, local: bool) -> bool {
        if !self.staging.in_block() {
            return !local;
        }
        let mut tx = self.tx.lock();
        if tx.set_in_block.before.is_none() {
            tx.set_in_block.before = Some(self.settings.read().clone());
        }
        if local {
            tx.set_in_block.local.insert(key.to_string());
        }
        true
    }

    /// After a plain `SET` of `key` inside a block: its value is what COMMIT keeps.
    pub(crate) fn after_set(&self, key: &str) {
        if !self.staging.in_block() {
            return;
        }
        let value = self.settings.read().get(key).cloned();
        let mut tx = self.tx.lock();
        match value {
            Some(v) => tx.set_in_block.session.insert(key.to_string(), v),
            None => tx.set_in_block.session.remove(key),
        };
    }

    /// At the end of a block: ROLLBACK puts every setting back as the block found
    /// it; COMMIT ends SET LOCAL.
    fn end_settings(&self, set: SetInBlock, committed: bool) {
        let Some(before) = set.before else { return };
        if !committed {
            super::session::restore(self, &before);
            return;
        }
        if set.local.is_empty() {
            return;
        }
        let mut target = self.settings.read().clone();
        for k in &set.local {
            match set.session.get(k).or_else(|| before.get(k)) {
                Some(v) => target.insert(k.clone(), v.clone()),
                None => target.remove(k),
            };
        }
        super::session::restore(self, &target);
    }

    /// Ends the block dropping everything it staged and undoing its DDL.
    async fn discard(&self) {
        self.staging.finish();
        let state = std::mem::take(&mut *self.tx.lock());
        let undo = std::mem::take(&mut *self.block_ddl.undo.lock());
        self.block_ddl.not_null.lock().clear();
        self.end_settings(state.set_in_block, false);
        self.undo(undo).await;
    }

    /// Undoes DDL, newest first.
    async fn undo(&self, steps: Vec<Undo>) {
        if !steps.is_empty() {
            self.plans.clear();
        }
        undo_steps(&self.engine, &self.db, steps).await;
    }

    /// After COMMIT: the tables the block dropped go for good.
    async fn finish_drops(&self, steps: &[Undo]) {
        for u in steps {
            if let Undo::Dropped { hidden, .. } = u
                && let Err(e) = self.engine.drop_table(&self.db, hidden, true).await
            {
                tracing::warn!(table = %hidden, error = %e, "could not drop a table dropped by a committed block");
            }
        }
    }

    /// Applies the block's staged changes. Inserts only: one WAL record for every
    /// table. With deletions: memtables are flushed, then every table's deletions
    /// (file rewrites) and inserts (new chunk files) become one catalog step. On
    /// failure nothing is applied and the block stays, aborted.
    async fn commit(&self) -> Result<()> {
        let ops = self.staging.finish();
        let state = std::mem::take(&mut *self.tx.lock());
        let undo = std::mem::take(&mut *self.block_ddl.undo.lock());
        match self.apply(ops).await {
            Ok(()) => {
                self.end_settings(state.set_in_block, true);
                self.finish_drops(&undo).await;
                let not_null = std::mem::take(&mut *self.block_ddl.not_null.lock());
                for (table, cols) in not_null {
                    if let Err(e) = self.engine.catalog().set_not_null(&self.db, &table, &cols) {
                        tracing::warn!(%table, error = %e, "could not make columns NOT NULL at COMMIT");
                    }
                }
                Ok(())
            }
            Err(e) => {
                // Keep PostgreSQL's shape: the client must ROLLBACK the failed block.
                self.staging.begin();
                let mut tx = self.tx.lock();
                tx.aborted = true;
                *self.block_ddl.undo.lock() = undo;
                tx.set_in_block = state.set_in_block;
                Err(e)
            }
        }
    }

    async fn apply(&self, ops: Vec<StagedOp>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        if !ops.iter().any(|o| matches!(o, StagedOp::Delete { .. })) {
            let writes: Vec<(Arc<TableDef>, RecordBatch)> = ops
                .into_iter()
                .filter_map(|o| match o {
                    StagedOp::Insert { table, batch } => Some((table, batch)),
                    StagedOp::Delete { .. } => None,
                })
                .collect();
            // Rows for a table dropped meanwhile would come back on replay as
            // nothing: refuse instead.
            let m = self.engine.catalog().snapshot();
            let mut current = Vec::with_capacity(writes.len());
            for (t, b) in writes {
                let (_, now) = m
                    .table_by_id(t.id)
                    .ok_or_else(|| Error::UndefinedTable(t.name.clone()))?;
                current.push((now.clone(), b));
            }
            self.engine.write_many(&current).await?;
            return Ok(());
        }
        // A compaction may replace files between the snapshot and the commit: then
        // nothing was applied and the block's changes are worked out again.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.apply_changes(&ops).await {
                Err(Error::Catalog(e)) if attempt < 4 => {
                    tracing::info!(reason = %e, "COMMIT runs again");
                }
                other => return other,
            }
        }
    }

    /// The part of [`Session::apply`] for blocks that delete: file rewrites and new
    /// chunk files, one catalog step.
    async fn apply_changes(&self, ops: &[StagedOp]) -> Result<()> {
        self.engine.flush().await?;
        let m = self.engine.catalog().snapshot();
        let mut ids: Vec<u64> = vec![];
        for o in ops {
            if !ids.contains(&o.table_id()) {
                ids.push(o.table_id());
            }
        }
        let state = self.ctx.state();
        let mut tables = vec![];
        for id in ids {
            let (_, t) = m
                .table_by_id(id)
                .ok_or_else(|| Error::UndefinedTable(format!("table id {id}")))?;
            let mine: Vec<StagedOp> = ops.iter().filter(|o| o.table_id() == id).cloned().collect();
            let folded = crate::query::staged::fold(&state, t, &mine)?;
            tables.push((t.clone(), folded));
        }
        let mut changes = vec![];
        for (t, folded) in &tables {
            let (pred, files) = match &folded.deleted {
                Some(deleted) => {
                    let df_schema = crate::query::staged::qualified_schema(t)?;
                    let pred = state.create_physical_expr(deleted.clone(), &df_schema)?;
                    let files =
                        crate::query::provider::files_to_delete_from(&state, t, deleted, &pred)?;
                    (Some(pred), files)
                }
                None => (None, vec![]),
            };
            if t.checks_keys() && !folded.inserts.is_empty() {
                let rows = arrow::compute::concat_batches(&t.schema(), &folded.inserts)?;
                super::upsert::check_keys_after(self, t, &rows, pred.as_ref()).await?;
            }
            changes.push(TableChange {
                table: t.clone(),
                pred,
                files,
                inserts: folded.inserts.clone(),
                refreshed: vec![],
                expect_removed: None,
            });
        }
        self.engine.commit_changes(&self.db, changes).await
    }
}

/// Undoes a block's DDL, newest first.
async fn undo_steps(engine: &crate::engine::Engine, db: &str, steps: Vec<Undo>) {
    for u in steps.into_iter().rev() {
        let r = match &u {
            Undo::Created(t) => engine.drop_table(db, t, true).await.map(|_| ()),
            Undo::Dropped { hidden, name } => engine.catalog().rename_table(db, hidden, name),
            Undo::MadeHypertable {
                name,
                column,
                nullable,
            } => engine
                .catalog()
                .unmake_hypertable(db, name, column, *nullable),
            Undo::Definitions { before, after } => {
                engine.catalog().revert_definitions(db, before, after)
            }
        };
        if let Err(e) = r {
            tracing::warn!(step = ?u, error = %e, "could not undo DDL of a rolled-back block");
        }
    }
}

/// A session that ends inside a block (the client went away) rolls it back, DDL
/// included, as PostgreSQL does.
impl Drop for Session {
    fn drop(&mut self) {
        if !self.staging.in_block() {
            return;
        }
        self.staging.finish();
        let steps = std::mem::take(&mut *self.block_ddl.undo.lock());
        if steps.is_empty() {
            return;
        }
        let (engine, db) = (self.engine.clone(), self.db.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move { undo_steps(&engine, &db, steps).await });
            }
            Err(_) => tracing::warn!(
                database = %db,
                "a session ended inside a block outside the runtime: its DDL stays"
            ),
        }
    }
}

fn find_savepoint(sps: &[Savepoint], name: &str) -> Option<usize> {
    sps.iter().rposition(|s| s.name == name)
}

fn no_savepoint(s: &Session, name: &str) -> Error {
    if !s.staging.in_block() {
        return Error::sql(
            "25P01",
            "ROLLBACK TO SAVEPOINT can only be used in transaction blocks",
        );
    }
    Error::sql("3B001", format!("savepoint \"{name}\" does not exist"))
}

/// Whether `stmt` is transaction control.
pub fn handles(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. }
            | Statement::Savepoint { .. }
            | Statement::ReleaseSavepoint { .. }
    )
}

/// The name DDL refused in a block goes by in the error.
pub fn ddl_name(stmt: &Statement) -> String {
    match stmt {
        Statement::Drop { object_type, .. } => format!("DROP {object_type}"),
        Statement::AlterTable(_) => "ALTER TABLE".into(),
        Statement::CreateDatabase { .. } => "CREATE DATABASE".into(),
        Statement::Call(_) => "CALL".into(),
        Statement::CreateView(cv) if cv.materialized => "CREATE MATERIALIZED VIEW".into(),
        Statement::Query(q) => match q.body.as_ref() {
            ast::SetExpr::Select(s) => match s.projection.first() {
                Some(ast::SelectItem::UnnamedExpr(ast::Expr::Function(f))) => f.name.to_string(),
                _ => "this statement".into(),
            },
            _ => "this statement".into(),
        },
        _ => "this statement".into(),
    }
}
