//! Plain views: `CREATE [OR REPLACE] VIEW`, `DROP VIEW`, and the planner side
//! that turns a stored definition into a DataFusion view when a query names it.
//! A view is stored as its normalized query text and planned afresh each time, so
//! it always reads the tables' current columns and rows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use datafusion::catalog::view::ViewTable;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{self, ObjectType, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use parking_lot::RwLock;

use super::{Output, Session, args, gapfill, names};
use crate::catalog::ViewDef;
use crate::engine::Engine;
use crate::error::{Error, Result};

/// How deeply views may name views (a deeper chain is taken for a cycle).
const MAX_DEPTH: usize = 32;

/// Plans the views of one session's database (see [`crate::query::context::ViewSource`]).
#[derive(Debug)]
pub struct ViewPlanner {
    engine: Arc<Engine>,
    db: String,
    /// The session's DataFusion state, set once the context exists.
    state: OnceLock<Weak<RwLock<SessionState>>>,
    /// Views being planned right now (a view naming a view nests).
    depth: AtomicUsize,
}

impl ViewPlanner {
    pub fn new(engine: Arc<Engine>, db: &str) -> Self {
        ViewPlanner {
            engine,
            db: db.to_string(),
            state: OnceLock::new(),
            depth: AtomicUsize::new(0),
        }
    }

    /// Hands over the context's state (once, right after it is built).
    pub fn attach(&self, state: Weak<RwLock<SessionState>>) {
        let _ = self.state.set(state);
    }
}

/// Decrements the nesting depth when planning a view ends, however it ends.
struct Nesting<'a>(&'a AtomicUsize);

impl Drop for Nesting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn df_error(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[async_trait]
impl crate::query::context::ViewSource for ViewPlanner {
    async fn view(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let m = self.engine.catalog().snapshot();
        let Some(v) = m.database(&self.db).ok().and_then(|d| d.views.get(name)) else {
            return Ok(None);
        };
        if self.depth.fetch_add(1, Ordering::SeqCst) >= MAX_DEPTH {
            self.depth.fetch_sub(1, Ordering::SeqCst);
            return Err(df_error(Error::sql(
                "42P17",
                format!("infinite recursion detected in the definition of view \"{name}\""),
            )));
        }
        let _nesting = Nesting(&self.depth);
        let state = self
            .state
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| df_error(Error::Internal("the session has closed".into())))?
            .read()
            .clone();
        let query = parse_query(&v.sql).map_err(df_error)?;
        let plan = plan_view(&state, query, &v.columns)
            .await
            .map_err(df_error)?;
        Ok(Some(Arc::new(ViewTable::new(plan, Some(v.sql.clone())))))
    }
}

/// A stored definition back as a query (it was normalized before it was stored).
fn parse_query(sql: &str) -> Result<Box<ast::Query>> {
    let mut stmts =
        Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| Error::Parse(e.to_string()))?;
    match (stmts.pop(), stmts.is_empty()) {
        (Some(Statement::Query(q)), true) => Ok(q),
        _ => Err(Error::Internal(format!(
            "stored view is not one query: {sql}"
        ))),
    }
}

/// The view's plan, its columns renamed to `columns`.
async fn plan_view(
    state: &SessionState,
    mut query: Box<ast::Query>,
    columns: &[String],
) -> Result<LogicalPlan> {
    names::alias_duplicates(&mut query);
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(Statement::Query(query))))
        .await?;
    let fields = plan.schema().columns();
    if columns.len() > fields.len() {
        return Err(Error::sql(
            "42601",
            "CREATE VIEW specifies more column names than columns",
        ));
    }
    let exprs: Vec<Expr> = fields
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let name = columns.get(i).cloned().unwrap_or_else(|| c.name.clone());
            Expr::Column(c).alias(name)
        })
        .collect();
    Ok(LogicalPlanBuilder::from(plan).project(exprs)?.build()?)
}

/// Runs `CREATE [OR REPLACE] VIEW`.
pub async fn create(s: &Session, cv: &ast::CreateView) -> Result<Output> {
    if cv.materialized {
        return Err(Error::NotSupported(
            "CREATE MATERIALIZED VIEW (continuous aggregates) is not supported yet".into(),
        ));
    }
    if cv.temporary {
        return Err(Error::NotSupported(
            "temporary views are not supported".into(),
        ));
    }
    let name = args::table_name(&cv.name)?;
    if gapfill::uses_gapfill(&cv.query) {
        return Err(Error::NotSupported(
            "a view cannot use time_bucket_gapfill".into(),
        ));
    }
    let explicit: Vec<String> = cv.columns.iter().map(|c| c.name.value.clone()).collect();
    // The query's own names (PostgreSQL's: `avg`, `?column?`), then the list given.
    let own = names::query_names(&cv.query).unwrap_or_default();
    let sql = cv.query.to_string();
    // Planned once now, so a bad definition fails here, not in a later query.
    let state = s.ctx.state();
    let probe = plan_view(&state, parse_query(&sql)?, &[]).await?;
    let width = probe.schema().fields().len();
    if explicit.len() > width {
        return Err(Error::sql(
            "42601",
            "CREATE VIEW specifies more column names than columns",
        ));
    }
    let columns: Vec<String> = (0..width)
        .map(|i| {
            explicit
                .get(i)
                .or(own.get(i))
                .cloned()
                .unwrap_or_else(|| probe.schema().field(i).name().clone())
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = columns.iter().find(|c| !seen.insert(c.as_str())) {
        return Err(Error::sql(
            "42701",
            format!("column \"{dup}\" specified more than once"),
        ));
    }
    let old = s
        .engine
        .catalog()
        .snapshot()
        .database(&s.db)?
        .views
        .get(&name)
        .cloned();
    if cv.or_replace
        && let Some(old) = &old
        && old.columns.len() > columns.len()
    {
        return Err(Error::sql("42P16", "cannot drop columns from view"));
    }
    s.engine.catalog().create_view(
        &s.db,
        ViewDef {
            id: 0,
            name: name.clone(),
            sql,
            columns,
            column_types: probe
                .schema()
                .fields()
                .iter()
                .map(|f| super::pg_catalog::arrow_type_oid(f.data_type()))
                .collect(),
        },
        cv.or_replace,
    )?;
    // The definition must not name itself, directly or through other views.
    if let Err(e) = plan_view(&s.ctx.state(), parse_query(&cv.query.to_string())?, &[]).await {
        let _ = match old {
            Some(old) if cv.or_replace => s.engine.catalog().create_view(&s.db, old, true),
            _ => s.engine.catalog().drop_view(&s.db, &name, true).map(|_| ()),
        };
        return Err(e);
    }
    Ok(Output::Command("CREATE VIEW".into()))
}

/// Runs `DROP VIEW [IF EXISTS] a, b [CASCADE]`.
pub fn drop(
    s: &Session,
    names: &[ast::ObjectName],
    if_exists: bool,
    cascade: bool,
) -> Result<Output> {
    for n in names {
        let name = args::table_name(n)?;
        let is_view = s
            .engine
            .catalog()
            .snapshot()
            .database(&s.db)?
            .views
            .contains_key(&name);
        if is_view {
            release(s, &name, "view", cascade)?;
        }
        s.engine.catalog().drop_view(&s.db, &name, if_exists)?;
    }
    Ok(Output::Command("DROP VIEW".into()))
}

/// The views whose definitions name relation `name`.
fn dependents(s: &Session, name: &str) -> Result<Vec<String>> {
    use std::ops::ControlFlow;
    let m = s.engine.catalog().snapshot();
    let mut out = vec![];
    for v in m.database(&s.db)?.views.values() {
        let Ok(q) = parse_query(&v.sql) else { continue };
        let names = ast::visit_relations(&q, |r| {
            if args::table_name(r).is_ok_and(|t| t == name) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        if names.is_break() && v.name != name {
            out.push(v.name.clone());
        }
    }
    Ok(out)
}

/// Whether views depend on relation `name`.
pub fn dependents_exist(s: &Session, name: &str) -> Result<bool> {
    Ok(!dependents(s, name)?.is_empty())
}

/// Before relation `name` (a `kind`) is dropped: the views that depend on it are
/// dropped too with CASCADE, else the drop is refused (2BP01), as in PostgreSQL.
pub fn release(s: &Session, name: &str, kind: &str, cascade: bool) -> Result<()> {
    let deps = dependents(s, name)?;
    if deps.is_empty() {
        return Ok(());
    }
    if !cascade {
        return Err(Error::sql(
            "2BP01",
            format!(
                "cannot drop {kind} {name} because other objects depend on it (view {}); \
                 use DROP ... CASCADE to drop the dependent objects too",
                deps.join(", view ")
            ),
        ));
    }
    for d in deps {
        release(s, &d, "view", true)?;
        s.engine.catalog().drop_view(&s.db, &d, true)?;
    }
    Ok(())
}

/// Whether `stmt` is view DDL.
pub fn handles(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::CreateView(_)
            | Statement::Drop {
                object_type: ObjectType::View,
                ..
            }
    )
}
