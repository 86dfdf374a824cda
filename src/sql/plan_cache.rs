//! Optimized query plans kept per query *shape*, shared by the sessions of one
//! engine: dashboards and benchmarks send the same statement with new literals each
//! time, and parsing, analysis and logical optimization cost more than reading a
//! chunk. The string and integer literals a WHERE or HAVING clause compares against
//! become parameters; a later text of the same shape binds its own values into the
//! kept plan and only re-simplifies it. Which files and rows to read is still decided
//! on every run (the table scan picks them when the plan is bound).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::sql::sqlparser::ast::{self, Statement, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, Tokenizer};
use parking_lot::Mutex;

use crate::catalog::{Catalog, ColumnDef, ViewDef};
use crate::query::provider::HypertableProvider;

/// Queries longer than this are not cached (long literal lists rarely repeat).
const MAX_SQL_LEN: usize = 16 * 1024;
/// Shapes kept; the cache starts over when it is full.
const MAX_SHAPES: usize = 1024;
/// Plans kept per shape (for different fixed literals, `LIMIT 5` and `LIMIT 10`).
const MAX_PER_SHAPE: usize = 8;

/// A literal of a query text: a string or an integer.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Str(String),
    Int(String),
}

impl Lit {
    /// The value the literal has as a parameter of type `ty`, when it has that type
    /// as a literal too (an integer is int4 when it fits, else int8).
    fn bind(&self, ty: &DataType) -> Option<ScalarValue> {
        match (self, ty) {
            (Lit::Str(s), DataType::Utf8) => Some(ScalarValue::Utf8(Some(s.clone()))),
            (Lit::Int(_), _) => {
                let v = self.int_value()?;
                (&v.data_type() == ty).then_some(v)
            }
            _ => None,
        }
    }

    fn int_value(&self) -> Option<ScalarValue> {
        let Lit::Int(n) = self else { return None };
        let v: i64 = n.parse().ok()?;
        Some(match i32::try_from(v) {
            Ok(v) => ScalarValue::Int32(Some(v)),
            Err(_) => ScalarValue::Int64(Some(v)),
        })
    }

    /// The parameter type the literal gets, and its value.
    fn as_param(&self) -> Option<(DataType, ScalarValue)> {
        let v = match self {
            Lit::Str(s) => ScalarValue::Utf8(Some(s.clone())),
            Lit::Int(_) => self.int_value()?,
        };
        Some((v.data_type(), v))
    }
}

/// What the cache holds for a query text, as EXPLAIN reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// The session switched the cache off (`sundial.plan_cache`).
    Off,
    /// The text has no shape: not a SELECT or WITH text, or longer than 16 KB.
    NoShape,
    /// A kept plan answers it, with this many of its literals bound as parameters.
    Hit(usize),
    /// Nothing is kept for its shape yet.
    Miss,
}

impl Status {
    /// The `plan_cache` line of EXPLAIN; `cacheable` says whether the query's plan
    /// may be kept at all.
    pub fn describe(self, cacheable: bool) -> String {
        match (self, cacheable) {
            (Status::Off, _) => "not used: sundial.plan_cache is off".into(),
            (Status::Hit(0), _) => "hit: the plan kept for this exact text".into(),
            (Status::Hit(n), _) => format!(
                "hit: the plan kept for this query shape, {n} literal(s) bound as parameters and re-simplified"
            ),
            (_, false) => "not used: the query reads system tables, calls volatile functions or has parameters".into(),
            (Status::NoShape, true) => "not used: only SELECT and WITH texts up to 16 KB are kept".into(),
            (Status::Miss, true) => "miss: nothing kept for this shape yet; a run plans the text and keeps its plan for texts of this shape".into(),
        }
    }
}

/// A query text seen as its shape: the tokens with each string and integer literal
/// taken out, and those literals in order.
#[derive(Debug)]
pub struct Shape {
    key: String,
    literals: Vec<Lit>,
    /// Where each literal starts in the text.
    at: Vec<Location>,
}

impl Shape {
    /// The shape of `sql`, `None` when it does not tokenize or is too long.
    /// Only queries (texts starting with SELECT or WITH, which the pre-pass leaves as
    /// they are) have one.
    pub fn of(sql: &str) -> Option<Shape> {
        let head = sql.trim_start();
        let starts = |w: &str| {
            head.get(..w.len())
                .is_some_and(|h| h.eq_ignore_ascii_case(w))
        };
        if sql.len() > MAX_SQL_LEN || !(starts("select") || starts("with")) {
            return None;
        }
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .ok()?;
        let mut key = String::with_capacity(sql.len());
        let (mut literals, mut at) = (vec![], vec![]);
        for t in tokens {
            let lit = match &t.token {
                Token::Whitespace(_) => continue,
                Token::SingleQuotedString(s) => Some(Lit::Str(s.clone())),
                Token::Number(n, false) if n.bytes().all(|b| b.is_ascii_digit()) => {
                    Some(Lit::Int(n.clone()))
                }
                _ => None,
            };
            match lit {
                Some(l) => {
                    key.push_str(if matches!(l, Lit::Str(_)) {
                        "\u{1}s "
                    } else {
                        "\u{1}i "
                    });
                    literals.push(l);
                    at.push(t.span.start);
                }
                None => {
                    use std::fmt::Write;
                    let _ = write!(key, "{} ", t.token);
                }
            }
        }
        Some(Shape { key, literals, at })
    }
}

/// What a literal of the shape is in a kept plan.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    /// Parameter `$i` (counting from 1) of this type.
    Param(usize, DataType),
    /// Part of the plan: a text of the shape must have this literal here.
    Fixed(Lit),
}

/// A plan to keep and what it depends on.
#[derive(Debug)]
pub struct Kept {
    pub plan: LogicalPlan,
    pub names: Option<Vec<String>>,
    pub tables: Vec<TableKey>,
    pub views: BTreeMap<String, ViewDef>,
}

/// An optimized plan and what it depends on.
#[derive(Debug)]
pub struct Entry {
    /// The analyzed and optimized logical plan; may hold `$n` parameters.
    pub plan: LogicalPlan,
    /// Output column names as the client should see them.
    pub names: Option<Vec<String>>,
    /// The tables the plan reads, as they were when it was planned.
    tables: Vec<TableKey>,
    /// The database's views when it was planned (a plan may have inlined one).
    views: BTreeMap<String, ViewDef>,
    slots: Vec<Slot>,
    /// For a prepared statement's plan: the types its bound values had when it was
    /// checked (a later execution binds values of these types only).
    bound: Vec<DataType>,
}

/// A table as a cached plan saw it: the plan holds while the name still leads to the
/// same table with the same columns.
#[derive(Debug)]
pub struct TableKey {
    name: String,
    id: u64,
    columns: Vec<ColumnDef>,
}

/// What, besides the shape, a plan depends on: the database and the session's
/// settings (time zone, search path, the planner switches).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Scope {
    db: String,
    settings: u64,
}

/// The plans kept for one shape.
type Shaped = Vec<Arc<Entry>>;

/// The plans of one engine, by shape.
#[derive(Debug, Default)]
pub struct PlanCache {
    entries: Mutex<HashMap<(Scope, String), Shaped>>,
}

/// A hit: the kept plan and the values its parameters take.
#[derive(Debug)]
pub struct Hit {
    pub entry: Arc<Entry>,
    pub params: Vec<ScalarValue>,
}

impl PlanCache {
    /// The kept plan for a text of `shape` when every table it reads is unchanged
    /// in `catalog`, with the text's values for its parameters.
    pub fn get(&self, shape: &Shape, catalog: &Catalog, db: &str, settings: u64) -> Option<Hit> {
        let candidates = self
            .entries
            .lock()
            .get(&key(db, settings, &shape.key))
            .cloned()?;
        let (entry, params) = candidates.into_iter().find_map(|e| {
            let params = bind(&e.slots, &shape.literals)?;
            Some((e, params))
        })?;
        unchanged(&entry, catalog, db).then_some(Hit { entry, params })
    }

    /// The kept plan of the prepared statement `statement` (see [`prepared_key`]),
    /// for bound values of `types`, when every table it reads is unchanged.
    pub fn get_prepared(
        &self,
        statement: &str,
        types: &[DataType],
        catalog: &Catalog,
        db: &str,
        settings: u64,
    ) -> Option<Arc<Entry>> {
        let candidates = self
            .entries
            .lock()
            .get(&key(db, settings, statement))
            .cloned()?;
        let entry = candidates.into_iter().find(|e| e.bound == types)?;
        unchanged(&entry, catalog, db).then_some(entry)
    }

    /// Keeps `kept` for texts of `shape`: for every text of it when `lifted` is how
    /// its parameters were made (the caller checked that binding this text's values
    /// gives the plan the text itself optimizes to), else for texts with exactly
    /// these literals.
    pub fn keep(
        &self,
        shape: &Shape,
        db: &str,
        settings: u64,
        kept: Kept,
        lifted: Option<&Lifted>,
    ) {
        let slots = shape
            .literals
            .iter()
            .enumerate()
            .map(|(i, l)| match lifted.and_then(|x| Some((x, x.slots[i]?))) {
                Some((x, p)) => Slot::Param(p, x.types[p - 1].clone()),
                None => Slot::Fixed(l.clone()),
            })
            .collect();
        self.insert(key(db, settings, &shape.key), entry(kept, slots, vec![]));
    }

    /// Keeps `kept`, the optimized plan of prepared statement `statement` with its
    /// parameters in place, for executions that bind values of `types` (the caller
    /// checked that binding one execution's values gives the plan those values
    /// optimize to).
    pub fn keep_prepared(
        &self,
        statement: &str,
        types: Vec<DataType>,
        db: &str,
        settings: u64,
        kept: Kept,
    ) {
        self.insert(key(db, settings, statement), entry(kept, vec![], types));
    }

    fn insert(&self, key: (Scope, String), entry: Entry) {
        let entry = Arc::new(entry);
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_SHAPES && !entries.contains_key(&key) {
            entries.clear();
        }
        let list = entries.entry(key).or_default();
        list.retain(|e| e.slots != entry.slots || e.bound != entry.bound);
        if list.len() >= MAX_PER_SHAPE {
            list.remove(0);
        }
        list.push(entry);
    }

    /// Forgets every plan (after DDL).
    pub fn clear(&self) {
        self.entries.lock().clear();
    }
}

/// The cache key of a prepared statement: its text as parsed and the parameter types
/// the client declared (which the plan depends on). It never equals a shape's key.
pub fn prepared_key(stmt: &Statement, declared: &[Option<DataType>]) -> String {
    format!("\u{2}{stmt}\u{2}{declared:?}")
}

fn key(db: &str, settings: u64, key: &str) -> (Scope, String) {
    (
        Scope {
            db: db.to_string(),
            settings,
        },
        key.to_string(),
    )
}

fn entry(kept: Kept, slots: Vec<Slot>, bound: Vec<DataType>) -> Entry {
    Entry {
        plan: kept.plan,
        names: kept.names,
        tables: kept.tables,
        views: kept.views,
        slots,
        bound,
    }
}

/// Whether every table `entry` reads, and the database's views, are as they were
/// when it was planned.
fn unchanged(entry: &Entry, catalog: &Catalog, db: &str) -> bool {
    let catalog = catalog.snapshot();
    entry.tables.iter().all(|k| {
        catalog
            .table(db, &k.name)
            .is_ok_and(|t| t.id == k.id && t.columns == k.columns)
    }) && catalog.database(db).is_ok_and(|d| d.views == entry.views)
}

/// The parameter values of `literals` for a plan with `slots`, when the literals fit.
fn bind(slots: &[Slot], literals: &[Lit]) -> Option<Vec<ScalarValue>> {
    if slots.len() != literals.len() {
        return None;
    }
    let mut params = vec![ScalarValue::Null; slots.len()];
    let mut count = 0;
    for (s, l) in slots.iter().zip(literals) {
        match s {
            Slot::Fixed(f) if f == l => {}
            Slot::Fixed(_) => return None,
            Slot::Param(i, ty) => {
                *params.get_mut(i.checked_sub(1)?)? = l.bind(ty)?;
                count += 1;
            }
        }
    }
    params.truncate(count);
    Some(params)
}

/// Whether a plan reads the materialization of a continuous aggregate (what it
/// shows depends on when it was planned).
pub fn reads_cagg(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && source_as_provider(&scan.source)
                .ok()
                .as_deref()
                .and_then(|p| (p as &dyn std::any::Any).downcast_ref::<HypertableProvider>())
                .is_some_and(|p| p.table().cagg.is_some())
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The tables an unoptimized query plan reads, when its optimized form may be reused:
/// it reads only user tables (whose scans pick files when they run), calls only
/// immutable functions (the optimizer folds `now()` and session-dependent functions
/// into constants) and has no parameters of its own unless `params` (a prepared
/// statement's, bound on every execution).
pub fn cacheable(plan: &LogicalPlan, params: bool) -> Option<Vec<TableKey>> {
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
                // A real-time continuous aggregate's plan holds its watermark.
                Some(t) if t.cagg.as_ref().is_some_and(|c| !c.materialized_only) => {
                    ok = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
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
                    Expr::Placeholder(_) => params,
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

/// A query statement with the literals WHERE and HAVING compare against turned into
/// parameters `$1..`: the statement, the type of each parameter, and each literal's
/// slot (`None` for the literals left in place).
pub struct Lifted {
    pub stmt: Statement,
    pub types: Vec<DataType>,
    pub values: Vec<ScalarValue>,
    slots: Vec<Option<usize>>,
}

/// [`Lifted`] for `stmt` (parsed from the text of `shape`); `None` when no literal
/// can be lifted.
pub fn lift(mut stmt: Statement, shape: &Shape) -> Option<Lifted> {
    let mut v = Lifter {
        shape,
        types: vec![],
        values: vec![],
        slots: vec![None; shape.literals.len()],
    };
    let _ = stmt.visit(&mut v);
    if v.types.is_empty() {
        return None;
    }
    Some(Lifted {
        stmt,
        types: v.types,
        values: v.values,
        slots: v.slots,
    })
}

struct Lifter<'a> {
    shape: &'a Shape,
    types: Vec<DataType>,
    values: Vec<ScalarValue>,
    slots: Vec<Option<usize>>,
}

impl VisitorMut for Lifter<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
        self.set_expr(&mut q.body);
        ControlFlow::Continue(())
    }
}

impl Lifter<'_> {
    fn set_expr(&mut self, body: &mut ast::SetExpr) {
        match body {
            ast::SetExpr::Select(s) => {
                if let Some(w) = &mut s.selection {
                    self.predicate(w);
                }
                if let Some(h) = &mut s.having {
                    self.predicate(h);
                }
            }
            ast::SetExpr::SetOperation { left, right, .. } => {
                self.set_expr(left);
                self.set_expr(right);
            }
            _ => {}
        }
    }

    /// Lifts the operands of the comparisons a predicate is made of (subqueries are
    /// visited as queries of their own).
    fn predicate(&mut self, e: &mut ast::Expr) {
        use ast::BinaryOperator as B;
        match e {
            ast::Expr::Nested(inner) => self.predicate(inner),
            ast::Expr::UnaryOp {
                op: ast::UnaryOperator::Not,
                expr,
            } => self.predicate(expr),
            ast::Expr::BinaryOp { left, op, right } => match op {
                B::And | B::Or => {
                    self.predicate(left);
                    self.predicate(right);
                }
                B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => {
                    self.operand(left);
                    self.operand(right);
                }
                _ => {}
            },
            ast::Expr::InList { list, .. } => {
                for item in list {
                    self.operand(item);
                }
            }
            ast::Expr::Between { low, high, .. } => {
                self.operand(low);
                self.operand(high);
            }
            _ => {}
        }
    }

    /// Lifts `e` when it is a literal of the text (possibly cast or parenthesized).
    fn operand(&mut self, e: &mut ast::Expr) {
        match e {
            ast::Expr::Nested(inner) | ast::Expr::Cast { expr: inner, .. } => self.operand(inner),
            ast::Expr::Value(v) => {
                let lit = match &v.value {
                    ast::Value::SingleQuotedString(s) => Lit::Str(s.clone()),
                    ast::Value::Number(n, false) => Lit::Int(n.clone()),
                    _ => return,
                };
                // The literal the text has at this place, unchanged by normalization.
                let Some(i) = self.shape.at.iter().position(|l| *l == v.span.start) else {
                    return;
                };
                if self.slots[i].is_some() || self.shape.literals[i] != lit {
                    return;
                }
                let Some((ty, value)) = lit.as_param() else {
                    return;
                };
                self.types.push(ty);
                self.values.push(value);
                self.slots[i] = Some(self.types.len());
                v.value = ast::Value::Placeholder(format!("${}", self.types.len()));
            }
            _ => {}
        }
    }
}

/// A fingerprint of what, in a session, changes how a text is planned.
pub fn fingerprint(parts: impl IntoIterator<Item = (String, String)>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (k, v) in parts {
        k.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}
