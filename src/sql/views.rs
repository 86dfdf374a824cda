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
use datafusion::sql::sqlparser::ast::{self, ObjectType, Statement};
use parking_lot::RwLock;

use super::viewdefs::{parse_query, plan_view, release};
use super::{Output, Session, args};
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
        // A continuous aggregate reads its materialization (and raw rows where it
        // is not valid), as it is at this moment.
        let sql = match v.cagg {
            Some(id) => super::cagg::view_sql(&self.engine, &self.db, id).map_err(df_error)?,
            None => v.sql.clone(),
        };
        let query = parse_query(&sql).map_err(df_error)?;
        let plan = plan_view(&state, query, &v.columns)
            .await
            .map_err(df_error)?;
        Ok(Some(Arc::new(ViewTable::new(plan, Some(sql)))))
    }
}

/// Runs `CREATE [OR REPLACE] VIEW`.
pub async fn create(s: &Session, cv: &ast::CreateView) -> Result<Output> {
    if cv.materialized {
        return super::cagg::create(s, cv).await;
    }
    if cv.temporary {
        return Err(Error::NotSupported(
            "temporary views are not supported".into(),
        ));
    }
    let name = args::table_name(&cv.name)?;
    let sql = cv.query.to_string();
    // Planned once now, so a bad definition fails here, not in a later query.
    let state = s.ctx.state();
    let probe = plan_view(&state, parse_query(&sql)?, &[]).await?;
    let planned: Vec<String> = probe
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let columns = super::viewdefs::column_names(&cv.columns, &cv.query, &planned, "CREATE VIEW")?;
    let old = s
        .engine
        .catalog()
        .snapshot()
        .database(&s.db)?
        .views
        .get(&name)
        .cloned();
    if let Some(old) = &old
        && old.cagg.is_some()
    {
        return Err(Error::sql(
            "42809",
            format!("\"{name}\" is a continuous aggregate; use DROP MATERIALIZED VIEW first"),
        ));
    }
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
                .map(|f| super::pg_catalog::field_type_oid(f))
                .collect(),
            cagg: None,
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
            let cagg = s
                .engine
                .catalog()
                .snapshot()
                .database(&s.db)?
                .views
                .get(&name)
                .is_some_and(|v| v.cagg.is_some());
            if cagg {
                return Err(Error::NotSupported(format!(
                    "cannot drop continuous aggregate \"{name}\" using DROP VIEW; use DROP MATERIALIZED VIEW"
                )));
            }
            release(s, &name, "view", cascade)?;
        }
        s.engine.catalog().drop_view(&s.db, &name, if_exists)?;
    }
    Ok(Output::Command("DROP VIEW".into()))
}

/// Whether `stmt` is view DDL.
pub fn handles(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::CreateView(_)
            | Statement::Drop {
                object_type: ObjectType::View | ObjectType::MaterializedView,
                ..
            }
    )
}
