//! The DataFusion context of one connection: a catalog provider that exposes one
//! database's tables, the TimescaleDB-style system views and the PostgreSQL
//! catalogs the SQL layer provides, over the engine's shared runtime.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session};
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DfResult;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::{Analyzer, AnalyzerRule};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::provider::HypertableProvider;
use super::system;
use crate::engine::Engine;

/// What the SQL layer adds to each connection's context: PostgreSQL's catalog
/// schemas and the analyzer rules that must see plans before DataFusion's.
#[derive(Debug, Clone)]
pub struct PgParts {
    /// `pg_catalog`; also consulted for names `public` does not have.
    pub pg_catalog: Arc<dyn SchemaProvider>,
    pub information_schema: Arc<dyn SchemaProvider>,
    /// Run before DataFusion's own analyzer rules (type coercion among them).
    pub first_rules: Vec<Arc<dyn AnalyzerRule + Send + Sync>>,
    /// The session's transaction: its scans show, and its INSERTs add to, these.
    pub staging: Arc<crate::engine::tx::Staging>,
    /// Plans the database's views when a query names one.
    pub views: Arc<dyn ViewSource>,
    /// SQL type names as PostgreSQL means them (`numeric` without a typmod).
    pub types: Arc<dyn datafusion::logical_expr::planner::TypePlanner>,
    /// Plans the SQL layer's logical nodes too (gap filling): a [`Planner`].
    pub planner: Arc<dyn QueryPlanner + Send + Sync>,
    /// Operators planned where their operand types are known (JSON's), after
    /// DataFusion's own.
    pub operators: Vec<Arc<dyn datafusion::logical_expr::planner::ExprPlanner>>,
}

/// DataFusion's physical planner with the SQL layer's extension planners.
pub struct Planner(pub Vec<Arc<dyn ExtensionPlanner + Send + Sync>>);

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Planner({} extension planners)", self.0.len())
    }
}

#[async_trait]
impl QueryPlanner for Planner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(self.0.clone())
            .create_physical_plan(plan, session)
            .await
    }
}

/// Turns a view's stored definition into a table provider (the SQL layer plans it).
#[async_trait]
pub trait ViewSource: std::fmt::Debug + Send + Sync {
    /// The view `name` of the database, planned; `None` when there is none.
    async fn view(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>>;
}

/// Builds the DataFusion context of one connection to database `db`.
/// DataFusion's own `information_schema` is off: `pg` provides PostgreSQL's.
pub fn new_context(engine: &Arc<Engine>, db: &str, pg: PgParts) -> SessionContext {
    let mut cfg = SessionConfig::new().with_extension(pg.staging.clone());
    configure(cfg.options_mut(), db);
    let rules = pg
        .first_rules
        .iter()
        .cloned()
        .chain(Analyzer::new().rules)
        .collect();
    let mut state = SessionStateBuilder::new()
        .with_config(cfg)
        .with_runtime_env(engine.runtime().clone())
        .with_default_features()
        .with_analyzer_rules(rules)
        .with_type_planner(pg.types.clone())
        .with_query_planner(pg.planner.clone())
        // The order `sql::session` keeps when one is switched off and on again.
        .with_optimizer_rule(Arc::new(super::latest::LatestRows))
        .with_optimizer_rule(Arc::new(super::newest_buckets::NewestBuckets))
        .with_optimizer_rule(Arc::new(super::stats_answers::StatsAnswers))
        .with_physical_optimizer_rules(physical_rules())
        .build();
    for p in &pg.operators {
        // Appending to the planners cannot fail.
        let _ =
            datafusion::execution::FunctionRegistry::register_expr_planner(&mut state, p.clone());
    }
    let ctx = SessionContext::new_with_state(state);
    ctx.register_catalog(
        db,
        Arc::new(DbCatalog {
            engine: engine.clone(),
            db: db.to_string(),
            pg,
        }),
    );
    ctx
}

/// DataFusion's physical optimizer rules but its `FilterPushdown` (both phases).
/// Sundial's scans get their predicates when they are built; under
/// `HypertableScanExec` the rule only copied the time filter's `FilterExec` into the
/// Parquet predicate a second time (pruning then evaluated every time bound twice),
/// and it cost 5% of a one-host query's CPU.
/// Then [`YieldFromJoins`].
fn physical_rules()
-> Vec<Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>> {
    let mut rules: Vec<
        Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>,
    > = datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new()
        .rules
        .into_iter()
        .filter(|r| r.name() != "FilterPushdown" && r.name() != "FilterPushdown(Post)")
        .collect();
    let at = rules
        .iter()
        .position(|r| r.name() == "SanityCheckPlan")
        .unwrap_or(rules.len());
    rules.insert(at, Arc::new(MergeUnkeyedPartitions));
    rules.push(Arc::new(YieldFromJoins));
    rules
}

/// Merges into one partition the input of an operator that needs its rows split by
/// key (a window's PARTITION BY) where DataFusion's distribution rule left them split
/// otherwise: with the key constant (`WHERE dev = 'd3'` beside `PARTITION BY dev`)
/// it took two unkeyed partitions (a chunk file and the memtable) for keyed, and the
/// plan's sanity check refused `count(*) OVER (PARTITION BY dev)`.
#[derive(Debug)]
struct MergeUnkeyedPartitions;

impl datafusion::physical_optimizer::PhysicalOptimizerRule for MergeUnkeyedPartitions {
    fn optimize(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        _config: &datafusion::config::ConfigOptions,
    ) -> DfResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        use datafusion::physical_plan::distribution_requirements::ChildSatisfactionOptions;
        use datafusion::physical_plan::execution_plan::{
            ChildrenPropertiesMode, ReplaceChildrenOptions,
        };
        use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
        use datafusion::physical_plan::{Distribution, ExecutionPlanProperties};
        plan.transform_up(|p| {
            let needs = p.input_distribution_requirements();
            let mut changed = false;
            let mut children = vec![];
            for (i, child) in p.children().into_iter().enumerate() {
                let keyed = matches!(
                    needs.child_distribution(i),
                    Some(Distribution::KeyPartitioned(_))
                );
                if keyed
                    && child.output_partitioning().partition_count() > 1
                    && !needs
                        .child_satisfaction(
                            i,
                            child.as_ref(),
                            ChildSatisfactionOptions::new().with_allow_subset(true),
                        )?
                        .is_satisfied()
                {
                    changed = true;
                    children.push(match child.output_ordering() {
                        Some(o) => {
                            Arc::new(SortPreservingMergeExec::new(o.clone(), child.clone())) as _
                        }
                        None => Arc::new(CoalescePartitionsExec::new(child.clone())) as _,
                    });
                } else {
                    children.push(child.clone());
                }
            }
            if changed {
                Ok(Transformed::yes(p.replace_children(
                    children,
                    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
                )?))
            } else {
                Ok(Transformed::no(p))
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "MergeUnkeyedPartitions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Wraps every join in DataFusion's `CooperativeExec`, which spends the task's Tokio
/// budget on each batch. DataFusion makes leaves cooperative, but a join can make
/// millions of batches from one input batch (a cross join pairs each left row with
/// the right batch) without polling its inputs, and an aggregate above it loops
/// while batches come: the task never yielded, so a canceled or timed-out statement
/// kept its core until the join next read its input (about 4 s for
/// `count(*)` over a cross join of two million-row series).
#[derive(Debug)]
struct YieldFromJoins;

impl datafusion::physical_optimizer::PhysicalOptimizerRule for YieldFromJoins {
    fn optimize(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        _config: &datafusion::config::ConfigOptions,
    ) -> DfResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        use datafusion::physical_plan::coop::CooperativeExec;
        plan.transform_up(|p| {
            if p.name().contains("JoinExec") {
                Ok(Transformed::yes(Arc::new(CooperativeExec::new(p)) as _))
            } else {
                Ok(Transformed::no(p))
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "YieldFromJoins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Sundial's choices among DataFusion's options for a session of database `db` (a
/// new session's, and what `RESET` returns an option to).
pub fn configure(o: &mut datafusion::config::ConfigOptions, db: &str) {
    o.catalog.default_catalog = db.to_string();
    o.catalog.default_schema = "public".to_string();
    o.catalog.information_schema = false;
    o.catalog.create_default_catalog_and_schema = false;
    o.execution.time_zone = Some("UTC".to_string());
    o.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    // Numeric literals are numeric (decimal) in PostgreSQL, not double.
    o.sql_parser.parse_float_as_decimal = true;
    // Chunk scans choose themselves whether to apply their predicate while
    // decoding (`HypertableProvider::parquet_scan`); switched on here, the
    // physical optimizer would push every filter into every scan, which costs
    // narrow scans more than it saves.
    o.execution.parquet.pushdown_filters = false;
    o.execution.parquet.enable_page_index = true;
    // Chunk files are small (a day of one table); let one file's row groups
    // be read on several cores.
    o.optimizer.repartition_file_min_size = 256 * 1024;
    // Common-subexpression elimination names `x IS FALSE` of two FILTER clauses
    // once; its logical field is NOT NULL, the physical one nullable, and the
    // aggregate planner's cross-check refused the query (XX000) over a difference
    // that changes no value.
    o.execution.skip_physical_aggregate_schema_check = true;
}

/// TimescaleDB's schema of internal tables: here, the materialization hypertables of
/// continuous aggregates (which are also found unqualified, in `public`).
pub const INTERNAL_SCHEMA: &str = "_timescaledb_internal";

/// The `_timescaledb_internal` schema.
#[derive(Debug)]
struct InternalSchema {
    engine: Arc<Engine>,
    db: String,
}

impl InternalSchema {
    fn materializations(&self) -> Vec<Arc<crate::catalog::TableDef>> {
        self.engine
            .catalog()
            .snapshot()
            .database(&self.db)
            .map(|d| {
                d.tables
                    .values()
                    .filter(|t| t.cagg.is_some())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[async_trait]
impl SchemaProvider for InternalSchema {
    fn table_names(&self) -> Vec<String> {
        self.materializations()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .materializations()
            .into_iter()
            .find(|t| t.name == name)
            .map(|t| Arc::new(HypertableProvider::new(&t, &self.engine)) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.materializations().iter().any(|t| t.name == name)
    }
}

/// One database as a DataFusion catalog.
#[derive(Debug)]
struct DbCatalog {
    engine: Arc<Engine>,
    db: String,
    pg: PgParts,
}

impl CatalogProvider for DbCatalog {
    fn schema_names(&self) -> Vec<String> {
        vec![
            "public".into(),
            system::INFO_SCHEMA.into(),
            "pg_catalog".into(),
            "information_schema".into(),
            INTERNAL_SCHEMA.into(),
        ]
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        match name {
            "public" => Some(Arc::new(PublicSchema {
                engine: self.engine.clone(),
                db: self.db.clone(),
                pg_catalog: self.pg.pg_catalog.clone(),
                views: self.pg.views.clone(),
            })),
            system::INFO_SCHEMA => Some(Arc::new(system::InfoSchema::new(
                self.engine.clone(),
                self.db.clone(),
            ))),
            "pg_catalog" => Some(self.pg.pg_catalog.clone()),
            "information_schema" => Some(self.pg.information_schema.clone()),
            INTERNAL_SCHEMA => Some(Arc::new(InternalSchema {
                engine: self.engine.clone(),
                db: self.db.clone(),
            })),
            _ => None,
        }
    }
}

/// The `public` schema: the database's tables and views plus `sundial_chunk_files`.
///
/// It also finds the `pg_catalog` relations when no table has the name, for names
/// the SQL front door did not qualify. (That front door qualifies unqualified catalog
/// names in queries with `pg_catalog.`, as PostgreSQL's search path starts with
/// `pg_catalog`: unqualified `pg_class` is the catalog even when `public.pg_class`
/// exists, and `public.pg_class` names the user table.)
#[derive(Debug)]
struct PublicSchema {
    engine: Arc<Engine>,
    db: String,
    pg_catalog: Arc<dyn SchemaProvider>,
    views: Arc<dyn ViewSource>,
}

#[async_trait]
impl SchemaProvider for PublicSchema {
    fn table_names(&self) -> Vec<String> {
        let m = self.engine.catalog().snapshot();
        let mut names: Vec<String> = m
            .database(&self.db)
            .map(|d| d.tables.keys().chain(d.views.keys()).cloned().collect())
            .unwrap_or_default();
        names.push(system::CHUNK_FILES.into());
        names.push(system::CAGG_REFRESHES.into());
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let m = self.engine.catalog().snapshot();
        if let Ok(t) = m.table(&self.db, name) {
            return Ok(Some(Arc::new(HypertableProvider::new(t, &self.engine))));
        }
        if name == system::CHUNK_FILES {
            return Ok(Some(system::chunk_files(
                self.engine.clone(),
                self.db.clone(),
            )));
        }
        if name == system::CAGG_REFRESHES {
            return Ok(Some(system::cagg_refreshes(
                self.engine.clone(),
                self.db.clone(),
            )));
        }
        if let Some(v) = self.views.view(name).await? {
            return Ok(Some(v));
        }
        self.pg_catalog.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.pg_catalog.table_exist(name)
            || name == system::CHUNK_FILES
            || name == system::CAGG_REFRESHES
            || self
                .engine
                .catalog()
                .snapshot()
                .database(&self.db)
                .is_ok_and(|d| d.tables.contains_key(name) || d.views.contains_key(name))
    }
}
