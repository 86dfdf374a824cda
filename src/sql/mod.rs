//! SQL front door of one connection: parse (after the hypertable pre-pass), route
//! each statement to DDL, session handling, management functions or DataFusion,
//! and return rows or a command tag.

pub mod access;
pub mod advisory;
pub mod args;
pub mod cagg;
pub mod calls;
pub mod checks;
pub mod chunks;
pub mod complexity;
pub mod compression;
pub mod constraints;
pub mod copy;
pub mod copy_binary;
pub mod cursor;
pub mod ddl;
pub mod fkeys;
pub mod functions;
pub mod gapfill;
mod grouping;
pub mod insert;
pub mod lateral;
pub mod maintenance;
pub mod names;
pub mod pg_catalog;
pub mod pgnumeric;
pub mod plan_cache;
pub mod prepass;
pub mod roles;
pub mod schedule;
pub mod sequences;
pub mod session;
pub mod signatures;
pub mod tx;
pub mod update;
pub mod upsert;
pub mod viewdefs;
pub mod views;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{self, Statement, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// What a statement produced.
pub enum Output {
    /// A result set.
    Rows(SchemaRef, SendableRecordBatchStream),
    /// Rows with their own command tag (`UPDATE … RETURNING`: the tag without the
    /// row count, which is the number of rows).
    Tagged(String, SchemaRef, SendableRecordBatchStream),
    /// Rows of a cursor (`FETCH`; the command tag says FETCH).
    Fetched(SchemaRef, SendableRecordBatchStream),
    /// A command tag such as `CREATE TABLE` or `INSERT 0 5`.
    Command(String),
    /// `BEGIN` / `COMMIT` / `ROLLBACK`.
    TxStart(String),
    TxEnd(String),
    /// `COPY ... FROM STDIN`: the client sends the data next.
    CopyIn(Box<copy::CopyIn>),
    /// `COPY ... TO STDOUT`: column count, whether binary, and the rows as COPY data.
    CopyOut(
        usize,
        bool,
        futures::stream::BoxStream<'static, Result<bytes::Bytes>>,
    ),
}

/// A statement ready to execute (the extended protocol keeps these across Binds).
#[derive(Debug, Clone)]
// One per prepared statement: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Prepared {
    /// Planned by DataFusion; may hold `$n` placeholders. `names` are the column
    /// names PostgreSQL would give the result (DataFusion names them by expression).
    Plan {
        plan: LogicalPlan,
        is_dml: bool,
        names: Option<Vec<String>>,
        /// The result columns as execution will produce them (after type coercion),
        /// for Describe; `None` when only the unanalyzed plan's schema is known.
        described: Option<SchemaRef>,
        /// For a query: what its optimized plan is kept under in the engine's plan
        /// cache ([`plan_cache::prepared_key`]), for every execution of any session
        /// that prepares the same statement.
        cache_key: Option<String>,
        /// The statement, when roles are checked: privileges are checked again at
        /// each execution (a REVOKE after the Parse takes effect at once).
        source: Option<Box<Statement>>,
        /// A statement planned again at every execution ([`Fresh`]).
        fresh: Option<Box<Fresh>>,
    },
    /// Handled by Sundial itself.
    Native(Box<Statement>),
}

/// A prepared statement whose plan is made at every execution rather than once.
#[derive(Debug, Clone)]
pub struct Fresh {
    /// The statement as parsed, with its `$n` parameters.
    stmt: Statement,
    /// The parameter types the client declared (`$1` first).
    declared: Vec<Option<arrow::datatypes::DataType>>,
    /// Plan it with the execution's values in place of its parameters: a series
    /// in `FROM` whose bounds are parameters is planned as a list unnested (the
    /// whole series built in memory), with constant bounds as the series table,
    /// which streams. Otherwise (a plan reading a continuous aggregate, which holds what
    /// was materialized when it was planned) it is planned with its parameters.
    bind: bool,
}

/// One step of a simple-protocol query text.
#[derive(Debug)]
pub enum Step {
    /// The optimized plan kept for texts of this shape, and this text's values.
    Cached(plan_cache::Hit),
    /// A query that is the whole text (of this shape): its plan may be kept.
    WholeQuery(Statement, Option<plan_cache::Shape>),
    /// `EXPLAIN` of a query that is the whole text, and what the plan cache holds
    /// for the query's own text (EXPLAIN shows it as a `plan_cache` row).
    Explain(Statement, plan_cache::Status),
    /// One of the text's statements.
    Statement(Statement),
    /// An INSERT of literal rows read by the fast scanner: the table and its rows.
    Insert(Arc<crate::catalog::TableDef>, arrow::array::RecordBatch),
}

impl Step {
    /// Whether this step only reads, so that abandoning it part-way (a cancel, a
    /// `statement_timeout`) leaves nothing changed: a kept plan, or a query or EXPLAIN
    /// that calls no management function and has no `INTO`.
    pub fn read_only(&self) -> bool {
        match self {
            Step::Cached(_) => true,
            Step::WholeQuery(stmt, _)
            | Step::Explain(stmt, _)
            | Step::Statement(stmt @ Statement::Query(_)) => {
                let text = stmt.to_string().to_ascii_lowercase();
                // (a data-modifying WITH included)
                ![" into ", "delete ", "update ", "truncate "]
                    .iter()
                    .any(|w| text.contains(w))
                    && !ddl::FUNCTIONS
                        .iter()
                        .copied()
                        .chain(signatures::writing_names())
                        .any(|f| text.contains(f))
            }
            Step::Statement(_) | Step::Insert(..) => false,
        }
    }
}

/// One connection's SQL state.
pub struct Session {
    pub engine: Arc<Engine>,
    pub db: String,
    pub ctx: SessionContext,
    pub settings: functions::Settings,
    /// Optimized plans of simple-protocol queries, by shape (the engine's, shared
    /// by its sessions).
    pub plans: Arc<plan_cache::PlanCache>,
    /// What of this session's settings changes how a text is planned, hashed.
    plan_settings: std::sync::atomic::AtomicU64,
    /// Whether the session keeps and reuses plans (`sundial.plan_cache`).
    plan_cache_on: std::sync::atomic::AtomicBool,
    /// Scans estimated at no more rows than this run in one partition
    /// (`sundial.small_scan_rows`; 0: never).
    small_scan_rows: std::sync::atomic::AtomicU64,
    /// Writes staged by an open transaction block (shared with `ctx`'s scans).
    pub staging: Arc<crate::engine::tx::Staging>,
    /// Savepoints, the aborted state, tables created in the block.
    tx: parking_lot::Mutex<tx::TxState>,
    /// The DDL the open block ran (ROLLBACK undoes it), shared with `ctx`'s
    /// management functions.
    block_ddl: Arc<tx::BlockDdl>,
    /// The advisory locks this session holds (released when it ends).
    advisory: Arc<advisory::Holder>,
    /// Open cursors (DECLARE ... CURSOR).
    pub cursors: cursor::Cursors,
    /// The role this session logged in as.
    pub user: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("db", &self.db).finish()
    }
}

/// Parses SQL text (after the pre-pass) into statements, normalizing the AST.
pub fn parse(sql: &str) -> Result<Vec<Statement>> {
    complexity::check(sql)?;
    let sql = prepass::rewrite(sql);
    let mut stmts =
        Parser::parse_sql(&PostgreSqlDialect {}, &sql).map_err(|e| Error::Parse(e.to_string()))?;
    for s in &mut stmts {
        let mut n = Normalize::default();
        if s.visit(&mut n).is_break() {
            return Err(n
                .error
                .unwrap_or_else(|| Error::Parse("syntax error".into())));
        }
    }
    Ok(stmts)
}

/// Everything the SQL front door does to a text before planning (the INSERT
/// scanner, the plan cache's shape and literal lifting, the nesting bound, the
/// pre-pass, parsing and normalizing, result names, the gap-fill rewrite), for the
/// fuzz targets: whatever the text, none of it may panic.
#[doc(hidden)]
pub fn front_door(sql: &str) {
    let _ = insert::scan_insert(sql);
    let shape = plan_cache::Shape::of(sql);
    let Ok(stmts) = parse(sql) else {
        return;
    };
    for stmt in stmts {
        let _ = stmt.to_string();
        let _ = args::placeholder_count(&stmt);
        if let Statement::Query(q) = &stmt {
            let _ = names::query_names(q);
            let mut q = q.clone();
            names::alias_duplicates(&mut q);
        }
        if let Some(shape) = &shape {
            let _ = plan_cache::lift(stmt, shape);
        }
    }
}

/// Gives `timestamp[tz]` casts PostgreSQL's microsecond precision, makes casts to
/// text produce PostgreSQL's text (`pg_text`), turns TimescaleDB's `first(v, t)` /
/// `last(v, t)` into DataFusion's ordered `first_value`, and `time_bucket`'s named
/// arguments into positional ones. Select items it rewrites keep PostgreSQL's name.
#[derive(Default)]
struct Normalize {
    /// Why the statement is rejected (a reserved word used as a bare table name, a
    /// bad call).
    error: Option<Error>,
}

/// PostgreSQL keywords that cannot name a table without quotes.
const RESERVED: &[&str] = &[
    "all",
    "and",
    "any",
    "as",
    "asc",
    "case",
    "check",
    "column",
    "create",
    "default",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "from",
    "grant",
    "group",
    "having",
    "in",
    "intersect",
    "into",
    "limit",
    "not",
    "null",
    "offset",
    "on",
    "or",
    "order",
    "select",
    "table",
    "then",
    "to",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "when",
    "where",
    "with",
];

/// PostgreSQL's limit on the entries of a select list (`MaxTupleAttributeNumber`).
const MAX_TARGET_ENTRIES: usize = 1664;

fn too_many_entries() -> Error {
    Error::sql(
        "54011",
        format!("target lists can have at most {MAX_TARGET_ENTRIES} entries"),
    )
}

impl VisitorMut for Normalize {
    type Break = ();
    fn pre_visit_relation(&mut self, rel: &mut ast::ObjectName) -> ControlFlow<()> {
        if let [part] = rel.0.as_slice()
            && let Some(i) = part.as_ident()
            && i.quote_style.is_none()
            && RESERVED.contains(&i.value.to_ascii_lowercase().as_str())
        {
            self.error = Some(Error::Parse(format!(
                "syntax error at or near \"{}\"",
                i.value
            )));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
        if let ast::SetExpr::Values(v) = q.body.as_ref()
            && v.rows.iter().any(|r| r.len() > MAX_TARGET_ENTRIES)
        {
            self.error = Some(too_many_entries());
            return ControlFlow::Break(());
        }
        keep_rewritten_names(q);
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, sel: &mut ast::Select) -> ControlFlow<()> {
        // Before any rewrite looks at the list (DataFusion's planner compares every
        // item with every other one: 100,000 items would plan for hours).
        if sel.projection.len() > MAX_TARGET_ENTRIES {
            self.error = Some(too_many_entries());
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, sel: &mut ast::Select) -> ControlFlow<()> {
        names::mark_duplicates(sel);
        pg_catalog::rewrite::set_returning_items(sel);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
        if let ast::SetExpr::Values(v) = q.body.as_mut() {
            typed_values(v);
        }
        pg_catalog::rewrite::prune_empty(q);
        pg_catalog::rewrite::in_subquery_outside_filter(q);
        pg_catalog::rewrite::sort_by_subquery(q);
        pg_catalog::rewrite::distinct_order_by(q);
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<()> {
        if let ast::TableFactor::Table {
            name,
            args: Some(targs),
            ..
        } = tf
            && let Err(e) = signatures::positional(name, &mut targs.args)
        {
            self.error = Some(e);
            return ControlFlow::Break(());
        }
        pg_catalog::rewrite::table_factor(tf);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        if let ast::Expr::Function(f) = expr
            && let ast::FunctionArguments::List(list) = &mut f.args
            && let Err(e) = signatures::positional(&f.name, &mut list.args)
        {
            self.error = Some(e);
            return ControlFlow::Break(());
        }
        pg_catalog::rewrite::expr(expr);
        // mod(a, b) is PostgreSQL's name for a % b (same types, 22012 on zero).
        if let ast::Expr::Function(f) = expr
            && function_name(f) == "mod"
            && f.over.is_none()
            && let ast::FunctionArguments::List(list) = &f.args
            && let [
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(a)),
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(b)),
            ] = list.args.as_slice()
        {
            *expr = ast::Expr::Nested(Box::new(ast::Expr::BinaryOp {
                left: Box::new(ast::Expr::Nested(Box::new(a.clone()))),
                op: ast::BinaryOperator::Modulo,
                right: Box::new(ast::Expr::Nested(Box::new(b.clone()))),
            }));
        }
        // Gap filling's named arguments, in place (NULL: not given).
        if let ast::Expr::Function(f) = expr
            && let ast::FunctionArguments::List(list) = &mut f.args
            && list
                .args
                .iter()
                .any(|a| !matches!(a, ast::FunctionArg::Unnamed(_)))
        {
            let zone = list.args.iter().any(|a| {
                matches!(a, ast::FunctionArg::Named { name, .. } | ast::FunctionArg::ExprNamed { name: ast::Expr::Identifier(name), .. }
                    if name.value.eq_ignore_ascii_case("timezone"))
            });
            let names: &[&str] = match function_name(f).as_str() {
                "time_bucket_gapfill" if zone => {
                    &["bucket_width", "ts", "timezone", "start", "finish"]
                }
                "time_bucket_gapfill" => &["bucket_width", "ts", "start", "finish"],
                "locf" => &["value", "prev", "treat_null_as_missing"],
                "interpolate" => &["value", "prev", "next"],
                _ => &[],
            };
            if !names.is_empty()
                && let ast::FunctionArguments::List(list) = &mut f.args
            {
                positional(&mut list.args, names);
            }
        }
        pg_interval_text(expr);
        if let ast::Expr::Value(v) = expr
            && let ast::Value::Number(n, _) = &v.value
            && n.contains(['e', 'E'])
        {
            *expr = exponent_literal(n);
        }
        // interval * number, number * interval, interval / number: PostgreSQL's
        // interval_mul / interval_div (DataFusion has no such arithmetic, and fails
        // while planning, before any analyzer rule could see the types).
        if let ast::Expr::BinaryOp { left, op, right } = expr
            && matches!(
                op,
                ast::BinaryOperator::Multiply | ast::BinaryOperator::Divide
            )
        {
            let divide = *op == ast::BinaryOperator::Divide;
            let swap = !divide && is_interval_expr(right) && !is_interval_expr(left);
            if is_interval_expr(left) && !is_interval_expr(right) || swap {
                let null = || Box::new(ast::Expr::value(ast::Value::Null));
                let (l, r) = (
                    std::mem::replace(left, null()),
                    std::mem::replace(right, null()),
                );
                let (iv, n) = if swap { (r, l) } else { (l, r) };
                let n = ast::Expr::Cast {
                    kind: ast::CastKind::DoubleColon,
                    expr: Box::new(ast::Expr::Nested(n)),
                    data_type: ast::DataType::DoublePrecision,
                    array: false,
                    format: None,
                };
                let name = if divide {
                    "interval_div"
                } else {
                    "interval_mul"
                };
                *expr = call(name, vec![*iv, n]);
            }
        }
        // `ts AT TIME ZONE z` is PostgreSQL's timezone(z, ts); `date_trunc(u, ts, z)`
        // truncates the wall-clock time in z.
        if let ast::Expr::AtTimeZone {
            timestamp,
            time_zone,
        } = expr
        {
            let null = || ast::Expr::value(ast::Value::Null);
            let ts = std::mem::replace(timestamp.as_mut(), null());
            let zone = std::mem::replace(time_zone.as_mut(), null());
            *expr = call("timezone", vec![zone, ts]);
        }
        if let ast::Expr::Function(f) = expr
            && function_name(f) == "date_trunc"
            && let ast::FunctionArguments::List(list) = &mut f.args
            && let [
                unit,
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ts)),
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(zone)),
            ] = list.args.as_slice()
        {
            let zone = zone.clone();
            let local = call("timezone", vec![zone.clone(), ts.clone()]);
            list.args = vec![unit.clone(), unnamed(local)];
            let truncated = std::mem::replace(expr, ast::Expr::value(ast::Value::Null));
            *expr = call("timezone", vec![zone, truncated]);
        }
        // EXTRACT is date_part (DataFusion plans it with its own, UTC-only, function
        // instead of the session-zone one registered under that name), as numeric.
        if let ast::Expr::Extract {
            field, expr: inner, ..
        } = expr
        {
            let unit = field.to_string().to_ascii_lowercase();
            let arg = std::mem::replace(inner.as_mut(), ast::Expr::value(ast::Value::Null));
            // PostgreSQL's EXTRACT is numeric (date_part is float8), with the
            // scale its text shows: 6 for epoch and seconds, 3 for milliseconds.
            let scale = match unit.as_str() {
                "epoch" | "second" | "seconds" => 6,
                "millisecond" | "milliseconds" => 3,
                _ => 0,
            };
            let part = call(
                "date_part",
                vec![ast::Expr::value(ast::Value::SingleQuotedString(unit)), arg],
            );
            *expr = ast::Expr::Cast {
                kind: ast::CastKind::Cast,
                expr: Box::new(part),
                data_type: ast::DataType::Numeric(ast::ExactNumberInfo::PrecisionAndScale(
                    38, scale,
                )),
                array: false,
                format: None,
            };
        }
        if let ast::Expr::Function(f) = expr {
            let name = function_name(f);
            if name == "make_interval"
                && let ast::FunctionArguments::List(list) = &mut f.args
            {
                positional(
                    &mut list.args,
                    &["years", "months", "weeks", "days", "hours", "mins", "secs"],
                );
                for a in &mut list.args {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = a
                        && matches!(e, ast::Expr::Value(v) if v.value == ast::Value::Null)
                    {
                        *e = ast::Expr::value(ast::Value::Number("0".into(), false));
                    }
                }
            }
            let res = match name.as_str() {
                "first" | "last" => rewrite_first_last(f, name == "last").map(Some),
                "time_bucket" => rewrite_time_bucket(f).map(|_| None),
                _ => Ok(None),
            };
            match res {
                Ok(Some(new)) => *expr = new,
                Ok(None) => {}
                Err(e) => {
                    self.error = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        match expr {
            ast::Expr::Cast {
                data_type: ast::DataType::Text | ast::DataType::Varchar(None),
                expr: inner,
                ..
            } if !matches!(inner.as_ref(), ast::Expr::Value(_)) => {
                let arg = std::mem::replace(inner.as_mut(), ast::Expr::value(ast::Value::Null));
                *expr = call("pg_text", vec![arg]);
            }
            ast::Expr::Cast { data_type, .. } => micro(data_type),

            ast::Expr::TypedString(ts) => {
                micro(&mut ts.data_type);
                if matches!(
                    ts.data_type,
                    ast::DataType::Timestamp(..) | ast::DataType::TimestampNtz(_)
                ) && let ast::Value::SingleQuotedString(text) = &mut ts.value.value
                {
                    crate::interval::complete_seconds(text);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// A numeric literal written with an exponent (`1e3`, `2.5E-4`), which DataFusion's
/// decimal parsing rejects: the same value in plain digits when it fits a numeric of
/// 38 digits, else (`1e300`, `1e-300`) a float8 literal — what it becomes anyway
/// when it meets a float8, the usual case; beside a numeric it loses digits past 17.
fn exponent_literal(n: &str) -> ast::Expr {
    let float = || ast::Expr::Cast {
        kind: ast::CastKind::DoubleColon,
        expr: Box::new(ast::Expr::value(ast::Value::SingleQuotedString(
            n.to_string(),
        ))),
        data_type: ast::DataType::DoublePrecision,
        array: false,
        format: None,
    };
    match plain_digits(n) {
        Some(p) => ast::Expr::value(ast::Value::Number(p, false)),
        None => float(),
    }
}

/// `n` (`d.ddde±x`, unsigned) in plain digits, if it has at most 38 of them.
fn plain_digits(n: &str) -> Option<String> {
    let (mantissa, exp) = n.split_once(['e', 'E'])?;
    let exp: i64 = exp.parse().ok()?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let point = int.len() as i64 + exp;
    let (int, frac) = if point <= 0 {
        (
            "0".to_string(),
            format!("{}{digits}", "0".repeat((-point) as usize)),
        )
    } else if point as usize >= digits.len() {
        let zeros = point as usize - digits.len();
        if zeros > 38 {
            return None;
        }
        (format!("{digits}{}", "0".repeat(zeros)), String::new())
    } else {
        (
            digits[..point as usize].to_string(),
            digits[point as usize..].to_string(),
        )
    };
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    if int.len() + frac.len() > 38 {
        return None;
    }
    Some(if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    })
}

/// Whether `e` is written as an interval: a literal, a cast to interval, or
/// arithmetic of intervals.
fn is_interval_expr(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Interval(_) => true,
        ast::Expr::Cast { data_type, .. } => matches!(data_type, ast::DataType::Interval { .. }),
        ast::Expr::TypedString(ts) => matches!(ts.data_type, ast::DataType::Interval { .. }),
        ast::Expr::Nested(inner) => is_interval_expr(inner),
        ast::Expr::Function(f) => matches!(
            function_name(f).as_str(),
            "interval_mul" | "interval_div" | "make_interval" | "age"
        ),
        _ => false,
    }
}

/// Lower-case unqualified name of a function call (`public.`/`pg_catalog.` dropped).
fn function_name(f: &ast::Function) -> String {
    match f.name.0.as_slice() {
        [one] | [_, one] => one
            .as_ident()
            .map(|i| i.value.to_ascii_lowercase())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// Whether `e` contains something [`Normalize`] rewrites into a differently named call.
fn is_rewritten(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Function(f) => {
            let n = function_name(f);
            (n == "first" || n == "last" || n == "mod") && f.over.is_none()
        }
        ast::Expr::Cast {
            data_type: ast::DataType::Text | ast::DataType::Varchar(None),
            expr,
            ..
        } => !matches!(expr.as_ref(), ast::Expr::Value(_)),
        ast::Expr::Cast { data_type, .. } => pg_catalog::rewrite::is_reg_cast(data_type),
        ast::Expr::Subquery(_) | ast::Expr::Extract { .. } => true,
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Multiply | ast::BinaryOperator::Divide,
            right,
        } => is_interval_expr(left) || is_interval_expr(right),
        ast::Expr::Nested(inner) => is_rewritten(inner),
        _ => false,
    }
}

/// Aliases unnamed select items that [`Normalize`] will rewrite, with the name
/// PostgreSQL gives them, unless another item already has that name.
fn keep_rewritten_names(q: &mut ast::Query) {
    let ast::SetExpr::Select(sel) = q.body.as_mut() else {
        return;
    };
    let names: Vec<String> = sel
        .projection
        .iter()
        .map(|item| match item {
            ast::SelectItem::UnnamedExpr(e) => names::expr_name(e),
            ast::SelectItem::ExprWithAlias { alias, .. } => alias.value.to_ascii_lowercase(),
            _ => String::new(),
        })
        .collect();
    for (i, item) in sel.projection.iter_mut().enumerate() {
        if let ast::SelectItem::UnnamedExpr(e) = item
            && is_rewritten(e)
        {
            // A repeated name gets a unique alias that `names` reads back as the name.
            let alias = if names.iter().filter(|n| **n == names[i]).count() == 1 {
                names[i].clone()
            } else {
                format!("{}{}{i}", names[i], names::UNIQUE_MARK)
            };
            let e = std::mem::replace(e, ast::Expr::value(ast::Value::Null));
            *item = ast::SelectItem::ExprWithAlias {
                expr: e,
                alias: ast::Ident::with_quote('"', alias),
            };
        }
    }
}

/// Puts named arguments in their positions (`names` is the parameter order),
/// filling gaps with NULL; DataFusion's table functions take positional ones only.
/// A `VALUES` column with a typed value in some row (`timestamptz '…'`, `x::date`)
/// and quoted literals in others: PostgreSQL resolves the literals (type unknown) to
/// that type; DataFusion took them for text and refused the list ("Inconsistent data
/// type across values list").
fn typed_values(v: &mut ast::Values) {
    let width = v.rows.first().map_or(0, |r| r.len());
    for j in 0..width {
        let typed = v.rows.iter().find_map(|r| match r.get(j) {
            Some(ast::Expr::TypedString(ts)) => Some(ts.data_type.clone()),
            Some(ast::Expr::Cast { data_type, .. }) => Some(data_type.clone()),
            _ => None,
        });
        let Some(data_type) = typed else { continue };
        for r in v.rows.iter_mut() {
            if let Some(e) = r.get_mut(j)
                && let ast::Expr::Value(val) = e
                && matches!(val.value, ast::Value::SingleQuotedString(_))
            {
                let lit = std::mem::replace(e, ast::Expr::value(ast::Value::Null));
                *e = ast::Expr::Cast {
                    kind: ast::CastKind::DoubleColon,
                    expr: Box::new(lit),
                    data_type: data_type.clone(),
                    array: false,
                    format: None,
                };
            }
        }
    }
}

fn positional(args: &mut Vec<ast::FunctionArg>, names: &[&str]) {
    let mut out: Vec<Option<ast::Expr>> = vec![];
    for a in args.iter() {
        let (slot, e) = match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => (out.len(), e),
            ast::FunctionArg::Named {
                name,
                arg: ast::FunctionArgExpr::Expr(e),
                ..
            }
            | ast::FunctionArg::ExprNamed {
                name: ast::Expr::Identifier(name),
                arg: ast::FunctionArgExpr::Expr(e),
                ..
            } => match names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(&name.value))
            {
                Some(i) => (i, e),
                None => return,
            },
            _ => return,
        };
        if out.len() <= slot {
            out.resize(slot + 1, None);
        }
        out[slot] = Some(e.clone());
    }
    *args = out
        .into_iter()
        .map(|e| unnamed(e.unwrap_or_else(|| ast::Expr::value(ast::Value::Null))))
        .collect();
}

/// `name(args)` as an AST call.
pub(crate) fn call(name: &str, args: Vec<ast::Expr>) -> ast::Expr {
    ast::Expr::Function(ast::Function {
        name: ast::ObjectName::from(vec![ast::Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: ast::FunctionArguments::None,
        args: ast::FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args.into_iter().map(unnamed).collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn unnamed(e: ast::Expr) -> ast::FunctionArg {
    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))
}

/// `first(v, t)` → `first_value(v ORDER BY t ASC NULLS LAST) FILTER (WHERE t IS NOT NULL)`;
/// `last` orders descending. Rows with a NULL time are ignored, as in TimescaleDB.
fn rewrite_first_last(f: &ast::Function, last: bool) -> Result<ast::Expr> {
    let name = if last { "last" } else { "first" };
    let hint = || {
        Error::sql(
            "42883",
            format!(
                "function {name} with these arguments does not exist. Hint: {name}(value anyelement, time \"any\")"
            ),
        )
    };
    if f.over.is_some() {
        return Err(Error::sql(
            "0A000",
            format!("{name}() cannot be used as a window function; use first_value/last_value"),
        ));
    }
    let ast::FunctionArguments::List(list) = &f.args else {
        return Err(hint());
    };
    let args: Vec<ast::Expr> = list
        .args
        .iter()
        .map(|a| match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e.clone()),
            _ => Err(hint()),
        })
        .collect::<Result<_>>()?;
    let [value, time] = args.as_slice() else {
        return Err(hint());
    };
    let order = ast::OrderByExpr {
        expr: time.clone(),
        options: ast::OrderByOptions {
            asc: Some(!last),
            nulls_first: Some(false),
        },
        with_fill: None,
    };
    let not_null = ast::Expr::IsNotNull(Box::new(time.clone()));
    let filter = match &f.filter {
        Some(prev) => ast::Expr::BinaryOp {
            left: Box::new(ast::Expr::Nested(prev.clone())),
            op: ast::BinaryOperator::And,
            right: Box::new(not_null),
        },
        None => not_null,
    };
    Ok(ast::Expr::Function(ast::Function {
        name: ast::ObjectName::from(vec![ast::Ident::new("first_value")]),
        uses_odbc_syntax: false,
        parameters: ast::FunctionArguments::None,
        args: ast::FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![unnamed(value.clone())],
            clauses: vec![ast::FunctionArgumentClause::OrderBy(vec![order])],
        }),
        filter: Some(Box::new(filter)),
        null_treatment: None,
        over: None,
        within_group: vec![],
    }))
}

/// `time_bucket(w, ts, timezone => .., origin => .., "offset" => ..)` → positional
/// arguments (NULL for an absent origin or offset in the time-zone form).
fn rewrite_time_bucket(f: &mut ast::Function) -> Result<()> {
    let ast::FunctionArguments::List(list) = &mut f.args else {
        return Ok(());
    };
    let mut positional = vec![];
    let mut named: Vec<(String, ast::Expr)> = vec![];
    for a in &list.args {
        match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => positional.push(e.clone()),
            ast::FunctionArg::Named {
                name,
                arg: ast::FunctionArgExpr::Expr(e),
                ..
            }
            | ast::FunctionArg::ExprNamed {
                name: ast::Expr::Identifier(name),
                arg: ast::FunctionArgExpr::Expr(e),
                ..
            } => named.push((name.value.to_ascii_lowercase(), e.clone())),
            _ => return Ok(()),
        }
    }
    if named.is_empty() {
        return Ok(());
    }
    let mut get = |k: &str| -> Option<ast::Expr> {
        let i = named.iter().position(|(n, _)| n == k)?;
        Some(named.remove(i).1)
    };
    let names = ["bucket_width", "ts", "timezone", "origin", "offset"];
    let mut slots: Vec<Option<ast::Expr>> = positional.into_iter().map(Some).collect();
    slots.resize(5.max(slots.len()), None);
    for (i, n) in names.iter().enumerate() {
        if let Some(e) = get(n) {
            slots[i] = Some(e);
        }
    }
    if let Some((n, _)) = named.first() {
        return Err(Error::sql(
            "42883",
            format!("function time_bucket has no parameter named \"{n}\""),
        ));
    }
    // A quoted origin would otherwise read as a time zone name.
    if matches!(slots[3], Some(ast::Expr::Value(_)))
        && let Some(o) = slots[3].take()
    {
        slots[3] = Some(ast::Expr::Cast {
            kind: ast::CastKind::DoubleColon,
            expr: Box::new(o),
            data_type: ast::DataType::Timestamp(Some(6), ast::TimezoneInfo::Tz),
            array: false,
            format: None,
        });
    }
    let tz = slots[2].is_some();
    let args: Vec<Option<ast::Expr>> = if tz {
        slots
    } else {
        // No time zone: origin or offset goes third; both together has no overload.
        match (slots[3].take(), slots[4].take()) {
            (Some(_), Some(_)) => {
                return Err(Error::sql(
                    "42883",
                    "function time_bucket(interval, timestamptz, origin, offset) does not exist. Hint: origin and \"offset\" can only be combined with a timezone",
                ));
            }
            (Some(x), None) | (None, Some(x)) => vec![slots[0].take(), slots[1].take(), Some(x)],
            (None, None) => vec![slots[0].take(), slots[1].take()],
        }
    };
    let last = args.iter().rposition(|a| a.is_some()).unwrap_or(0);
    list.args = args
        .into_iter()
        .take(last + 1)
        .map(|a| unnamed(a.unwrap_or_else(|| ast::Expr::value(ast::Value::Null))))
        .collect();
    Ok(())
}

fn micro(dt: &mut ast::DataType) {
    if let ast::DataType::Timestamp(p @ None, _) = dt {
        *p = Some(6);
    }
}

impl Session {
    /// Opens a session on database `db` (SQLSTATE 3D000 if it does not exist).
    pub fn new(engine: Arc<Engine>, db: &str, user: &str, pid: i32) -> Result<Session> {
        engine.catalog().snapshot().database(db)?;
        let settings = session::default_settings(db, user);
        let staging = Arc::new(crate::engine::tx::Staging::default());
        let views = Arc::new(views::ViewPlanner::new(engine.clone(), db));
        let cat = Arc::new(pg_catalog::CatalogCtx {
            engine: engine.clone(),
            db: db.to_string(),
            settings: settings.clone(),
        });
        let pg = crate::query::context::PgParts {
            pg_catalog: Arc::new(pg_catalog::CatalogSchema::pg_catalog(cat.clone())),
            information_schema: Arc::new(pg_catalog::CatalogSchema::information_schema(
                cat.clone(),
            )),
            first_rules: functions::pgcoerce::first_rules()
                .into_iter()
                .chain([grouping::rule()])
                .collect(),
            staging: staging.clone(),
            views: views.clone(),
            types: Arc::new(functions::pgtypes::PgTypes),
            planner: Arc::new(crate::query::context::Planner(vec![Arc::new(
                gapfill::GapFillPlanner,
            )])),
            operators: vec![Arc::new(functions::json::JsonOperators)],
        };
        let ctx = crate::query::context::new_context(&engine, db, pg);
        views.attach(ctx.state_weak_ref());
        functions::register(&ctx, db, pid, settings.clone());
        // Gap filling takes its correlated `prev` / `next` subqueries before the
        // lateral rule would join them.
        gapfill::register(&ctx);
        ctx.add_analyzer_rule(lateral::rule());
        chunks::register(&ctx, &engine, db);
        compression::register(&ctx, &engine, db);
        let block_ddl = Arc::new(tx::BlockDdl::default());
        sequences::register(&ctx, &engine, db);
        let advisory = Arc::new(advisory::Holder::new(&engine));
        advisory::register(&ctx, &advisory, &staging);
        calls::register(
            &ctx,
            &engine,
            db,
            user,
            Some((staging.clone(), block_ddl.clone())),
        );
        pg_catalog::functions::register(&ctx, cat);
        let plans = engine.shared();
        let session = Session {
            engine,
            db: db.to_string(),
            ctx,
            settings,
            plans,
            plan_settings: Default::default(),
            plan_cache_on: Default::default(),
            small_scan_rows: Default::default(),
            staging,
            tx: Default::default(),
            block_ddl,
            advisory,
            cursors: Default::default(),
            user: user.to_string(),
        };
        session.note_settings();
        Ok(session)
    }

    /// Prepares one statement: plans DataFusion statements, keeps native ones as AST.
    pub async fn prepare(&self, stmt: Statement) -> Result<Prepared> {
        self.prepare_typed(stmt, &[]).await
    }

    /// Like [`Session::prepare`], with parameter types the client declared (`$1` first).
    pub async fn prepare_typed(
        &self,
        stmt: Statement,
        declared: &[Option<arrow::datatypes::DataType>],
    ) -> Result<Prepared> {
        self.check_not_aborted(Some(&stmt))?;
        access::check(self, &stmt)?;
        self.check_calls_in_block(&stmt)?;
        if fkeys::insert_into_referencing(self, &stmt) {
            return Ok(Prepared::Native(Box::new(stmt)));
        }
        let state = self.ctx.state();
        let kept = (self.engine.config().auth != crate::config::AuthMethod::Trust)
            .then(|| Box::new(stmt.clone()));
        let mut p = self.prepare_in(&state, stmt, declared).await?;
        if let Prepared::Plan { source, .. } = &mut p {
            *source = kept;
        }
        // Describe must announce the types the rows will have: the unanalyzed plan
        // types `CASE WHEN .. THEN 100 ELSE 523.5 END` by its first branch (bigint)
        // while execution yields numeric, and a binary-format client would read the
        // numeric bytes as a bigint.
        if let Prepared::Plan {
            plan,
            is_dml: false,
            described,
            ..
        } = &mut p
            && let Ok(analyzed) =
                state
                    .analyzer()
                    .execute_and_check(plan.clone(), state.config_options(), |_, _| {})
        {
            *described = Some(Arc::new(analyzed.schema().as_arrow().clone()));
        }
        Ok(p)
    }

    /// Inside a transaction block, a management call that changes something runs only
    /// on a table created in the block (ROLLBACK undoes it); others are refused before
    /// the statement runs.
    fn check_calls_in_block(&self, stmt: &Statement) -> Result<()> {
        if !self.staging.in_block() {
            return Ok(());
        }
        for (name, table) in signatures::writing_calls(stmt) {
            if !ddl::DEFINITION_CALLS.contains(&name)
                && !table.is_some_and(|t| self.is_created_in_block(&t.to_ascii_lowercase()))
            {
                self.check_ddl_in_block(name)?;
            }
        }
        Ok(())
    }

    /// [`Session::prepare_typed`] with a session state the caller goes on using.
    async fn prepare_in(
        &self,
        state: &datafusion::execution::SessionState,
        stmt: Statement,
        declared: &[Option<arrow::datatypes::DataType>],
    ) -> Result<Prepared> {
        let mut stmt = stmt;
        if let Statement::Insert(ins) = &mut stmt {
            insert::leading_columns(self, ins);
            sequences::insert_defaults(self, ins)?;
        }
        if is_native(&stmt) {
            return Ok(Prepared::Native(Box::new(stmt)));
        }
        let original = stmt.clone();
        let bind = pg_catalog::rewrite::series_over_parameters(&stmt);
        let is_dml = matches!(
            stmt,
            Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
        );
        let cache_key =
            matches!(stmt, Statement::Query(_)).then(|| plan_cache::prepared_key(&stmt, declared));
        let names = match &stmt {
            Statement::Query(q) => names::query_names(q),
            _ => None,
        };
        if let Statement::Query(q) = &mut stmt {
            names::alias_duplicates(q);
        }
        let plan = state
            .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
            .await?;
        let plan = infer_placeholders(plan, declared, false)?;
        // Only what runs as a plain query (not `SELECT .. INTO`, planned as DDL).
        let plain_query = !matches!(
            plan,
            LogicalPlan::Ddl(_)
                | LogicalPlan::Dml(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::Statement(_)
        );
        let fresh = (bind || plan_cache::reads_cagg(&plan)).then(|| {
            Box::new(Fresh {
                stmt: original,
                declared: declared.to_vec(),
                bind,
            })
        });
        Ok(Prepared::Plan {
            plan,
            is_dml,
            names,
            cache_key: cache_key.filter(|_| plain_query && fresh.is_none()),
            described: None,
            source: None,
            fresh,
        })
    }

    /// Runs a prepared statement with parameter values.
    pub async fn execute(
        &self,
        prepared: &Prepared,
        params: Option<datafusion::common::ParamValues>,
    ) -> Result<Output> {
        match prepared {
            Prepared::Native(stmt) => {
                self.check_not_aborted(Some(stmt))?;
                access::check(self, stmt)?;
                match params {
                    Some(p) => {
                        self.execute_native(&args::bind_placeholders(stmt, &p)?)
                            .await
                    }
                    None => self.execute_native(stmt).await,
                }
            }
            Prepared::Plan {
                plan,
                is_dml,
                names,
                cache_key,
                source,
                fresh,
                ..
            } => {
                self.check_not_aborted(None)?;
                if let Some(stmt) = source {
                    access::check(self, stmt)?;
                }
                let replanned;
                let mut params = params;
                let plan = match fresh.as_deref() {
                    Some(f) => {
                        let state = self.ctx.state();
                        let again = match (f.bind, params.take()) {
                            (true, Some(p)) => {
                                let mut bound = args::bind_placeholders(&f.stmt, &p)?;
                                pg_catalog::rewrite::constant_series(&mut bound);
                                Box::pin(self.prepare_in(&state, bound, &[])).await?
                            }
                            (_, p) => {
                                params = p;
                                Box::pin(self.prepare_in(&state, f.stmt.clone(), &f.declared))
                                    .await?
                            }
                        };
                        let Prepared::Plan { plan, .. } = again else {
                            return Err(Error::Internal("a query planned as native".into()));
                        };
                        replanned = plan;
                        &replanned
                    }
                    None => plan,
                };
                if let Some(key) = cache_key
                    && self.plan_cache_on()
                {
                    return self.run_prepared_query(key, plan, names, params).await;
                }
                let plan = match params {
                    Some(p) => plan.clone().with_param_values(p)?,
                    None => plan.clone(),
                };
                let df = self.ctx.execute_logical_plan(plan).await?;
                if *is_dml {
                    let batches = df.collect().await?;
                    let n: u64 = batches
                        .iter()
                        .filter_map(|b| {
                            b.column(0)
                                .as_any()
                                .downcast_ref::<arrow::array::UInt64Array>()
                                .map(|a| a.iter().flatten().sum::<u64>())
                        })
                        .sum();
                    return Ok(Output::Command(format!("INSERT 0 {n}")));
                }
                // Planned as a kept plan would be (one partition for small scans),
                // so that EXPLAIN shows the plan a run takes.
                let (state, plan) = df.into_parts();
                let optimized = state.optimize(&plan)?;
                self.run_optimized(&state, &optimized, names.as_deref())
                    .await
            }
        }
    }

    /// Parses and runs every statement of a simple-protocol query string.
    pub async fn run_sql(&self, sql: &str) -> Result<Vec<Output>> {
        let mut out = vec![];
        for step in self.steps(sql)? {
            out.push(self.run_step(step).await?);
        }
        Ok(out)
    }

    /// What simple-protocol query text `sql` turns into: the plan this session kept
    /// for the same text, else its parsed statements (none for only comments).
    pub fn steps(&self, sql: &str) -> Result<Vec<Step>> {
        if let Some((table, batch)) = insert::scanned_insert(self, sql) {
            return Ok(vec![Step::Insert(table, batch)]);
        }
        let shape = match self.plan_cache_on() {
            true => plan_cache::Shape::of(sql),
            false => None,
        };
        if let Some(shape) = &shape
            && let Some(hit) = self.plans.get(
                shape,
                self.engine.catalog(),
                &self.db,
                self.plan_settings
                    .load(std::sync::atomic::Ordering::Relaxed),
            )
        {
            return Ok(vec![Step::Cached(hit)]);
        }
        let mut stmts = parse(sql)?;
        if let [Statement::Query(_)] = stmts.as_slice()
            && let Some(stmt) = stmts.pop()
        {
            return Ok(vec![Step::WholeQuery(stmt, shape)]);
        }
        if let [Statement::Explain { statement, .. }] = stmts.as_slice()
            && let Statement::Query(q) = statement.as_ref()
        {
            let status = self.cache_status(sql, q);
            if let Some(stmt) = stmts.pop() {
                return Ok(vec![Step::Explain(stmt, status)]);
            }
        }
        Ok(stmts.into_iter().map(Step::Statement).collect())
    }

    /// Whether `steps` (one simple-protocol Query message) run as one implicit
    /// transaction: outside a block, two or more statements of which some write or
    /// SET, all of them INSERT, DELETE, TRUNCATE, SET or plain queries. (DDL, COPY, management
    /// calls and transaction statements keep running one by one, each on its own.)
    pub fn implicit_transaction(&self, steps: &[Step]) -> bool {
        if steps.len() < 2 || self.staging.in_block() {
            return false;
        }
        // Writes, or SETs (an error in the message undoes them, as PostgreSQL's
        // implicit transaction does).
        let mut writes = false;
        for step in steps {
            match step {
                Step::Statement(Statement::Set(_)) => writes = true,
                Step::Statement(
                    st @ (Statement::Insert(_) | Statement::Delete(_) | Statement::Truncate(_)),
                ) => {
                    if let Statement::Insert(i) = st
                        && i.source.is_none()
                    {
                        return false;
                    }
                    writes = true;
                }
                Step::Statement(st @ Statement::Query(_)) if !is_native(st) => {}
                _ => return false,
            }
        }
        writes
    }

    /// Runs one step of a simple-protocol query text (see [`Session::steps`]).
    pub async fn run_step(&self, step: Step) -> Result<Output> {
        // Privileges are checked as each statement runs (an earlier statement of
        // the same query text may have created the table it uses).
        match &step {
            Step::Statement(stmt) | Step::WholeQuery(stmt, _) | Step::Explain(stmt, _) => {
                self.check_not_aborted(Some(stmt))?;
                access::check(self, stmt)?;
            }
            Step::Insert(table, _) => {
                self.check_not_aborted(None)?;
                access::check_insert(self, &table.name)?;
            }
            Step::Cached(_) => self.check_not_aborted(None)?,
        }
        match step {
            Step::Cached(hit) => {
                let m = self.engine.metrics();
                if hit.params.is_empty() {
                    m.plan_hits_exact
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else {
                    m.plan_hits_bound
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let state = self.ctx.state();
                let plan = bind_and_simplify(&state, hit.entry.plan.clone(), hit.params)?;
                self.run_optimized(&state, &plan, hit.entry.names.as_deref())
                    .await
            }
            Step::WholeQuery(stmt, shape) => self.run_query_caching(stmt, shape).await,
            Step::Statement(stmt) => self.run_statement(stmt).await,
            Step::Explain(stmt, status) => self.run_explain(stmt, status).await,
            Step::Insert(table, batch) => {
                let n = self.write_rows(&table, batch).await?;
                Ok(Output::Command(format!("INSERT 0 {n}")))
            }
        }
    }

    /// What the plan cache holds for query `q`, the statement an EXPLAIN text `sql`
    /// explains (found in the text by its position).
    fn cache_status(&self, sql: &str, q: &ast::Query) -> plan_cache::Status {
        use datafusion::sql::sqlparser::ast::Spanned;
        if !self.plan_cache_on() {
            return plan_cache::Status::Off;
        }
        let start = prepass::LineIndex::new(sql).offset(&q.span().start);
        let inner = start
            .and_then(|i| sql.get(i..))
            .map(|t| t.trim_end().trim_end_matches(';'));
        let Some(shape) = inner.and_then(plan_cache::Shape::of) else {
            return plan_cache::Status::NoShape;
        };
        let settings = self
            .plan_settings
            .load(std::sync::atomic::Ordering::Relaxed);
        match self
            .plans
            .get(&shape, self.engine.catalog(), &self.db, settings)
        {
            Some(hit) => plan_cache::Status::Hit(hit.params.len()),
            None => plan_cache::Status::Miss,
        }
    }

    /// Runs an EXPLAIN and adds a `plan_cache` row saying whether a run of the query
    /// would take a kept plan.
    async fn run_explain(&self, stmt: Statement, status: plan_cache::Status) -> Result<Output> {
        let p = self.prepare(stmt).await?;
        let cacheable = match &p {
            Prepared::Plan {
                plan: LogicalPlan::Explain(e),
                ..
            } => plan_cache::cacheable(&e.plan, false).is_some(),
            Prepared::Plan {
                plan: LogicalPlan::Analyze(a),
                ..
            } => plan_cache::cacheable(&a.input, false).is_some(),
            _ => false,
        };
        let out = self.execute(&p, None).await?;
        let Output::Rows(schema, stream) = out else {
            return Ok(out);
        };
        let text = |i: usize, name: &str| {
            schema.fields().get(i).is_some_and(|f| {
                f.name() == name && f.data_type() == &arrow::datatypes::DataType::Utf8
            })
        };
        if schema.fields().len() != 2 || !text(0, "plan_type") || !text(1, "plan") {
            return Ok(Output::Rows(schema, stream));
        }
        let row = arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(arrow::array::StringArray::from(vec!["plan_cache"])),
                Arc::new(arrow::array::StringArray::from(vec![
                    status.describe(cacheable),
                ])),
            ],
        )?;
        use futures::StreamExt;
        let rows = stream.chain(futures::stream::iter([Ok(row)]));
        let stream =
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema.clone(), rows);
        Ok(Output::Rows(schema, Box::pin(stream)))
    }

    /// Runs a query that is all of a text of `shape`, keeping its optimized plan for
    /// the texts of the same shape when [`plan_cache::cacheable`] allows it.
    async fn run_query_caching(
        &self,
        stmt: Statement,
        shape: Option<plan_cache::Shape>,
    ) -> Result<Output> {
        let state = self.ctx.state();
        self.check_calls_in_block(&stmt)?;
        let lifted = shape
            .as_ref()
            .and_then(|s| plan_cache::lift(stmt.clone(), s));
        let p = self.prepare_in(&state, stmt, &[]).await?;
        if let Prepared::Plan {
            plan,
            is_dml: false,
            names,
            ..
        } = &p
            && let Some(shape) = &shape
            && let Some(tables) = plan_cache::cacheable(plan, false)
        {
            let optimized = state.optimize(plan)?;
            // The plan with parameters, when binding this text's values into it
            // gives the plan this text optimizes to.
            let mut with_params = None;
            if let Some(l) = &lifted {
                with_params = self.plan_with_params(&state, l, &optimized).await;
            }
            let views = self.views_now();
            let settings = self
                .plan_settings
                .load(std::sync::atomic::Ordering::Relaxed);
            let kept = plan_cache::Kept {
                plan: with_params.clone().unwrap_or_else(|| optimized.clone()),
                names: names.clone(),
                tables,
                views,
            };
            let m = self.engine.metrics();
            match with_params {
                Some(_) => &m.plans_kept_bound,
                None => &m.plans_kept_exact,
            }
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.plans.keep(
                shape,
                &self.db,
                settings,
                kept,
                lifted.as_ref().filter(|_| with_params.is_some()),
            );
            return self
                .run_optimized(&state, &optimized, names.as_deref())
                .await;
        }
        self.execute(&p, None).await
    }

    /// The optimized plan of a lifted statement, when binding its values gives
    /// `expected` (the plan of the statement it was lifted from).
    async fn plan_with_params(
        &self,
        state: &datafusion::execution::SessionState,
        lifted: &plan_cache::Lifted,
        expected: &LogicalPlan,
    ) -> Option<LogicalPlan> {
        let declared: Vec<_> = lifted.types.iter().cloned().map(Some).collect();
        let Ok(Prepared::Plan { plan, .. }) =
            self.prepare_in(state, lifted.stmt.clone(), &declared).await
        else {
            return None;
        };
        let not_kept = |step: &str, e: &dyn std::fmt::Display| {
            tracing::debug!(step, error = %e, "a lifted plan is not kept");
        };
        // The literals' own types: the planner typed `time >= $1` by the column.
        let plan = infer_placeholders(plan, &declared, true)
            .map_err(|e| not_kept("infer", &e))
            .ok()?;
        let optimized = state
            .optimize(&plan)
            .map_err(|e| not_kept("optimize", &e))
            .ok()?;
        let bound = bind_and_simplify(state, optimized.clone(), lifted.values.clone())
            .map_err(|e| not_kept("bind", &e))
            .ok()?;
        if bound != *expected {
            tracing::debug!(
                bound = %bound.display_indent_schema(),
                expected = %expected.display_indent_schema(),
                "a lifted plan differs from its text's plan: kept for the exact text only"
            );
            return None;
        }
        Some(optimized)
    }

    /// Runs a prepared query through the plan cache: the optimized plan kept for the
    /// statement, with this execution's values bound and re-simplified; else the plan
    /// optimized with the values in place, keeping the plan optimized with its
    /// parameters when binding these values into it gives the same plan.
    async fn run_prepared_query(
        &self,
        key: &str,
        plan: &LogicalPlan,
        names: &Option<Vec<String>>,
        params: Option<datafusion::common::ParamValues>,
    ) -> Result<Output> {
        use datafusion::common::ParamValues;
        let values: Vec<datafusion::common::ScalarValue> = match params {
            Some(ParamValues::List(list)) => list.into_iter().map(|v| v.value).collect(),
            Some(ParamValues::Map(_)) => {
                return Err(Error::Internal(
                    "named parameters in a prepared query".into(),
                ));
            }
            None => vec![],
        };
        let types: Vec<arrow::datatypes::DataType> = values.iter().map(|v| v.data_type()).collect();
        let state = self.ctx.state();
        let settings = self
            .plan_settings
            .load(std::sync::atomic::Ordering::Relaxed);
        let m = self.engine.metrics();
        if let Some(entry) =
            self.plans
                .get_prepared(key, &types, self.engine.catalog(), &self.db, settings)
        {
            m.plan_hits_prepared
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let plan = bind_and_simplify(&state, entry.plan.clone(), values)?;
            return self
                .run_optimized(&state, &plan, entry.names.as_deref())
                .await;
        }
        let bound = match values.is_empty() {
            true => plan.clone(),
            false => plan.clone().with_param_values(values.clone())?,
        };
        let optimized = state.optimize(&bound)?;
        if let Some(tables) = plan_cache::cacheable(plan, true) {
            let general = match values.is_empty() {
                true => Some(optimized.clone()),
                false => state.optimize(plan).ok().filter(|g| {
                    bind_and_simplify(&state, g.clone(), values.clone())
                        .is_ok_and(|b| b == optimized)
                }),
            };
            if let Some(general) = general {
                m.plans_kept_prepared
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let kept = plan_cache::Kept {
                    plan: general,
                    names: names.clone(),
                    tables,
                    views: self.views_now(),
                };
                self.plans
                    .keep_prepared(key, types, &self.db, settings, kept);
            }
        }
        self.run_optimized(&state, &optimized, names.as_deref())
            .await
    }

    /// The database's views as the catalog has them now.
    fn views_now(&self) -> std::collections::BTreeMap<String, crate::catalog::ViewDef> {
        self.engine
            .catalog()
            .snapshot()
            .database(&self.db)
            .map(|d| d.views.clone())
            .unwrap_or_default()
    }

    /// Plans and starts an already optimized query.
    async fn run_optimized(
        &self,
        state: &datafusion::execution::SessionState,
        plan: &LogicalPlan,
        names: Option<&[String]>,
    ) -> Result<Output> {
        // A small scan gains nothing from a second core: one partition plans and
        // runs fewer operators (no repartitioning, no merge) and opens each file once.
        let small = self
            .small_scan_rows
            .load(std::sync::atomic::Ordering::Relaxed);
        let one_partition;
        let state =
            if small > 0 && state.config().target_partitions() > 1 && scanned_rows(plan) <= small {
                let mut s = state.clone();
                s.config_mut().options_mut().execution.target_partitions = 1;
                one_partition = s;
                &one_partition
            } else {
                state
            };
        let physical = state
            .query_planner()
            .create_physical_plan(plan, state)
            .await?;
        let schema = names::rename(physical.schema(), names);
        let task = Arc::new(datafusion::execution::TaskContext::from(state));
        let stream = datafusion::physical_plan::execute_stream(physical, task)?;
        Ok(Output::Rows(schema, stream))
    }

    /// Hashes what of this session's settings changes how a text is planned (the
    /// DataFusion options, the PostgreSQL settings, the optimizer rules switched
    /// on); kept plans are shared between sessions that agree on it.
    fn note_settings(&self) {
        let state = self.ctx.state();
        let options = state
            .config_options()
            .entries()
            .into_iter()
            .map(|e| (e.key, e.value.unwrap_or_default()));
        let settings: Vec<(String, String)> = self
            .settings
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let rules = state
            .optimizer()
            .rules
            .iter()
            .map(|r| ("rule".to_string(), r.name().to_string()));
        let fp = plan_cache::fingerprint(options.chain(settings).chain(rules));
        self.plan_settings
            .store(fp, std::sync::atomic::Ordering::Relaxed);
        let on = self
            .settings
            .read()
            .get(session::PLAN_CACHE)
            .is_none_or(|v| v == "on");
        self.plan_cache_on
            .store(on, std::sync::atomic::Ordering::Relaxed);
        let small = self
            .settings
            .read()
            .get(session::SMALL_SCAN_ROWS)
            .and_then(|v| v.parse().ok())
            .unwrap_or(session::DEFAULT_SMALL_SCAN_ROWS);
        self.small_scan_rows
            .store(small, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this session keeps and reuses plans.
    fn plan_cache_on(&self) -> bool {
        self.plan_cache_on
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Evaluates a constant expression through DataFusion (`SELECT e`); NULL when the
    /// query returns no row.
    pub(crate) async fn scalar(&self, e: &ast::Expr) -> Result<datafusion::common::ScalarValue> {
        // Interval text in PostgreSQL's forms (`'01:00:00'`) reads as PostgreSQL reads it.
        let mut e = e.clone();
        let _ = ast::visit_expressions_mut(&mut e, |x| {
            pg_interval_text(x);
            std::ops::ControlFlow::<()>::Continue(())
        });
        let batches = self
            .ctx
            .sql(&format!("SELECT {e}"))
            .await?
            .collect()
            .await?;
        first_value(&batches)
    }

    /// Runs one parsed statement without parameters (simple protocol).
    pub async fn run_statement(&self, stmt: Statement) -> Result<Output> {
        let mut stmt = stmt;
        if let Statement::Insert(ins) = &mut stmt {
            insert::leading_columns(self, ins);
        }
        if let Statement::Insert(ins) = &stmt
            && let Some(n) = insert::try_fast_insert(self, ins).await?
        {
            return Ok(Output::Command(format!("INSERT 0 {n}")));
        }
        let p = self.prepare(stmt).await?;
        self.execute(&p, None).await
    }

    async fn execute_native(&self, stmt: &Statement) -> Result<Output> {
        // DDL changes what a query text means; SET does too (time zone, search path),
        // for this session only: its plans are looked up by its settings.
        if ddl::handles(stmt) {
            self.plans.clear();
        }
        if let Some(out) = self.transaction_statement(stmt).await? {
            return Ok(out);
        }
        if let Some(out) = self.cursor_statement(stmt).await? {
            return Ok(out);
        }
        if copy::handles(stmt) {
            return copy::start(self, stmt).await;
        }
        let set = session::execute(self, stmt);
        if session::handles(stmt) {
            self.note_settings();
        }
        if let Some(out) = set? {
            return Ok(out);
        }
        if self.staging.in_block() && ddl::changes_definitions(stmt) {
            return self.run_recorded(self.execute_ddl(stmt)).await;
        }
        self.execute_ddl(stmt).await
    }

    /// The DDL part of [`Session::execute_native`]: roles, grants, tables, views.
    async fn execute_ddl(&self, stmt: &Statement) -> Result<Output> {
        if roles::handles(stmt) {
            self.plans.clear();
            return roles::execute(self, stmt);
        }
        if access::handles(stmt) {
            return access::execute(self, stmt);
        }
        let created = self.new_relation(stmt);
        let out = ddl::execute(self, stmt).await?;
        if let Some(name) = created
            && !self.is_superuser()
        {
            self.engine
                .catalog()
                .set_owner(&self.db, &name, &self.user)?;
        }
        Ok(out)
    }

    /// The table or view `stmt` creates, when it does not exist yet.
    fn new_relation(&self, stmt: &Statement) -> Option<String> {
        let name = match stmt {
            Statement::CreateTable(ct) => args::table_name(&ct.name).ok()?,
            Statement::CreateView(v) => args::table_name(&v.name).ok()?,
            _ => return None,
        };
        let m = self.engine.catalog().snapshot();
        let d = m.databases.get(&self.db)?;
        (!d.tables.contains_key(&name) && !d.views.contains_key(&name)).then_some(name)
    }
}

/// The rows the scans of `plan` (subqueries included) are estimated to read, for
/// choosing one partition: hypertables by their files' and memtable's time ranges,
/// other tables by their statistics (unknown: `u64::MAX`). A join or recursive query
/// also counts as `u64::MAX`: its work is not bounded by what it scans.
fn scanned_rows(plan: &LogicalPlan) -> u64 {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut rows = 0u64;
    let _ = plan.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::Join(_) | LogicalPlan::RecursiveQuery(_) => rows = u64::MAX,
            LogicalPlan::TableScan(scan) => {
                let n = match datafusion::datasource::source_as_provider(&scan.source) {
                    Ok(provider) => {
                        crate::query::stats_answers::estimated_scan_rows(&provider, &scan.filters)
                    }
                    Err(_) => None,
                };
                rows = rows.saturating_add(n.unwrap_or(u64::MAX));
            }
            _ => {}
        }
        Ok(match rows {
            u64::MAX => TreeNodeRecursion::Stop,
            _ => TreeNodeRecursion::Continue,
        })
    });
    rows
}

/// `plan` (optimized, with parameters) with `params` bound and its expressions
/// simplified again: casts of the bound literals folded, so scans see constants.
/// Only the expressions holding a parameter or a function DataFusion folds at
/// planning time (`now()`) are touched, and only their nodes' schemas recomputed: the
/// rest of a kept plan is already simplified (a whole-plan pass cost 10% of a
/// one-host query's CPU). An aggregate or grouping over a parameter takes the
/// whole-plan pass, which keeps the aggregate well formed.
fn bind_and_simplify(
    state: &datafusion::execution::SessionState,
    plan: LogicalPlan,
    params: Vec<datafusion::common::ScalarValue>,
) -> Result<LogicalPlan> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::common::{DFSchema, ParamValues};
    use datafusion::logical_expr::expr_rewriter::NamePreserver;
    use datafusion::logical_expr::{Expr, Volatility};
    use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
    if params.is_empty() {
        return Ok(plan);
    }
    let values = ParamValues::from(params);
    // What needs binding or folding in an expression.
    let pending = |e: &Expr| {
        e.exists(|x| {
            Ok(match x {
                Expr::Placeholder(_) => true,
                Expr::ScalarFunction(f) => {
                    f.func.signature().volatility != Volatility::Immutable
                        && f.func.name() != "random"
                }
                _ => false,
            })
        })
        .unwrap_or(true)
    };
    let aggregate_param = plan
        .exists(|node| {
            Ok(matches!(node, LogicalPlan::Aggregate(a)
                if a.aggr_expr.iter().chain(&a.group_expr).any(&pending)))
        })
        .unwrap_or(true);
    if aggregate_param {
        let plan = plan.with_param_values(values)?;
        let simplify = datafusion::optimizer::Optimizer::with_rules(vec![Arc::new(
            datafusion::optimizer::simplify_expressions::SimplifyExpressions::new(),
        )]);
        return Ok(simplify.optimize(plan, state, |_, _| {})?);
    }
    let options = Arc::new(state.config_options().as_ref().clone());
    let start = state.execution_props().query_execution_start_time;
    let out = plan.transform_up_with_subqueries(|node| {
        let schema = match &node {
            LogicalPlan::TableScan(scan) => Arc::new(DFSchema::try_from_qualified_schema(
                scan.table_name.clone(),
                &scan.source.schema(),
            )?),
            n if n.inputs().is_empty() => Arc::new(DFSchema::empty()),
            n => {
                let mut merged = DFSchema::empty();
                for input in n.inputs() {
                    merged.merge(input.schema());
                }
                Arc::new(merged)
            }
        };
        if !node.expressions().iter().any(&pending) {
            return Ok(Transformed::no(node));
        }
        let info = SimplifyContext::builder()
            .with_schema(schema)
            .with_config_options(options.clone())
            .with_query_execution_start_time(start)
            .build();
        let simplifier = ExprSimplifier::new(info);
        let simplifier = if let LogicalPlan::Join(_) = node {
            simplifier.with_canonicalize(false)
        } else {
            simplifier
        };
        let names = NamePreserver::new(&node);
        let changed = node.map_expressions(|e| {
            if !pending(&e) {
                return Ok(Transformed::no(e));
            }
            let saved = names.save(&e);
            let bound = e
                .transform_up(|x| match x {
                    Expr::Placeholder(p) => {
                        let (value, metadata) =
                            values.get_placeholders_with_values(&p.id)?.into_inner();
                        Ok(Transformed::yes(Expr::Literal(value, metadata)))
                    }
                    other => Ok(Transformed::no(other)),
                })?
                .data;
            let simple = simplifier.simplify(bound)?;
            Ok(Transformed::yes(saved.restore(simple)))
        })?;
        changed.map_data(|p| p.recompute_schema())
    })?;
    Ok(out.data)
}

/// The first column of the first row of `batches`; NULL when there is no row.
pub(crate) fn first_value(
    batches: &[arrow::array::RecordBatch],
) -> Result<datafusion::common::ScalarValue> {
    match batches.iter().find(|b| b.num_rows() > 0) {
        Some(b) => Ok(datafusion::common::ScalarValue::try_from_array(
            b.column(0),
            0,
        )?),
        None => Ok(datafusion::common::ScalarValue::Null),
    }
}

/// Gives untyped `$n` placeholders a type: the client's declared one, else the type
/// of a cast directly around it (`$1::timestamptz`). With `force`, a declared type
/// also replaces the one DataFusion's planner inferred from the context.
fn infer_placeholders(
    plan: LogicalPlan,
    declared: &[Option<arrow::datatypes::DataType>],
    force: bool,
) -> Result<LogicalPlan> {
    use arrow::datatypes::DataType;
    use datafusion::common::ScalarValue;
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::logical_expr::expr::{BinaryExpr, Cast, Placeholder};
    use datafusion::logical_expr::{Expr, ExprSchemable};
    let field = |dt: &DataType| Some(Arc::new(arrow::datatypes::Field::new("", dt.clone(), true)));
    let declared_for = |id: &str| -> Option<DataType> {
        let i: usize = id.trim_start_matches('$').parse().ok()?;
        declared.get(i.checked_sub(1)?).cloned().flatten()
    };
    let untyped = |e: &Expr| matches!(e, Expr::Placeholder(Placeholder { field: None, .. }));
    let typed = |e: Expr, dt: &DataType| match e {
        Expr::Placeholder(Placeholder { id, .. }) => Expr::Placeholder(Placeholder {
            id,
            field: field(dt),
        }),
        other => other,
    };
    // An int4 literal (DataFusion's planner saw int8) beside a placeholder it typed.
    let int4_literal = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Int64(Some(v)), _) if i32::try_from(*v).is_ok());
    let int8_placeholder = |e: &Expr| {
        matches!(e, Expr::Placeholder(Placeholder { field: Some(f), .. })
            if f.data_type() == &DataType::Int64)
    };
    let out = plan.transform_up_with_subqueries(|node| {
        let mut schema = datafusion::common::DFSchema::empty();
        for input in node.inputs() {
            schema.merge(input.schema());
        }
        let sibling_type = |args: &[Expr]| -> Option<DataType> {
            args.iter().filter(|a| !untyped(a)).find_map(|a| {
                if int4_literal(a) {
                    return Some(DataType::Int32);
                }
                a.get_type(&schema).ok().filter(|t| !t.is_null())
            })
        };
        let is_projection = matches!(node, LogicalPlan::Projection(_));
        let node = node.map_expressions(|e| {
            let e = e.transform_up(|e| {
                Ok(match e {
                    Expr::Placeholder(Placeholder { id, field: f }) => match declared_for(&id) {
                        Some(dt) if force && f.as_ref().map(|f| f.data_type()) != Some(&dt) => {
                            Transformed::yes(Expr::Placeholder(Placeholder {
                                field: field(&dt),
                                id,
                            }))
                        }
                        // The client's numeric type wins over the one DataFusion
                        // guessed (`$1 > 1` with a float8 $1 compares floats), and
                        // over a Null guess (`$1 > $2`).
                        Some(dt)
                            if f.as_ref().is_some_and(|f| {
                                let guess = f.data_type();
                                guess != &dt
                                    && (guess.is_null() || (guess.is_numeric() && dt.is_numeric()))
                            }) =>
                        {
                            Transformed::yes(Expr::Placeholder(Placeholder {
                                field: field(&dt),
                                id,
                            }))
                        }
                        Some(dt) if f.is_none() => {
                            Transformed::yes(Expr::Placeholder(Placeholder {
                                field: field(&dt),
                                id,
                            }))
                        }
                        _ => Transformed::no(Expr::Placeholder(Placeholder { id, field: f })),
                    },
                    // `$1 + 1`: PostgreSQL types $1 as int4 from the int4 literal.
                    Expr::BinaryExpr(BinaryExpr { left, op, right })
                        if (int8_placeholder(&left) && int4_literal(&right))
                            || (int4_literal(&left) && int8_placeholder(&right)) =>
                    {
                        let fix = |e: Box<Expr>| -> Box<Expr> {
                            match *e {
                                Expr::Placeholder(Placeholder { id, field: _ })
                                    if declared_for(&id).is_none() =>
                                {
                                    Box::new(Expr::Placeholder(Placeholder {
                                        id,
                                        field: field(&DataType::Int32),
                                    }))
                                }
                                other => Box::new(other),
                            }
                        };
                        Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                            fix(left),
                            op,
                            fix(right),
                        )))
                    }
                    // `coalesce($1, 5)`: an untyped placeholder takes its siblings' type.
                    Expr::ScalarFunction(mut f)
                        if matches!(
                            f.func.name(),
                            "coalesce" | "nullif" | "greatest" | "least"
                        ) && f.args.iter().any(untyped) =>
                    {
                        match sibling_type(&f.args) {
                            Some(dt) => {
                                f.args = f
                                    .args
                                    .into_iter()
                                    .map(|a| if untyped(&a) { typed(a, &dt) } else { a })
                                    .collect();
                                Transformed::yes(Expr::ScalarFunction(f))
                            }
                            None => Transformed::no(Expr::ScalarFunction(f)),
                        }
                    }
                    Expr::Cast(Cast {
                        expr,
                        field: target,
                    }) => match *expr {
                        Expr::Placeholder(Placeholder { id, field: None }) => {
                            let ph = Expr::Placeholder(Placeholder {
                                id,
                                field: field(target.data_type()),
                            });
                            Transformed::yes(Expr::Cast(Cast {
                                expr: Box::new(ph),
                                field: target,
                            }))
                        }
                        inner => Transformed::no(Expr::Cast(Cast {
                            expr: Box::new(inner),
                            field: target,
                        })),
                    },
                    other => Transformed::no(other),
                })
            })?;
            // `SELECT $1`: a placeholder nothing types is text, as in PostgreSQL.
            if is_projection {
                e.transform_data(|e| {
                    Ok(match e {
                        Expr::Placeholder(Placeholder { id, field: None }) => {
                            Transformed::yes(Expr::Placeholder(Placeholder {
                                id,
                                field: field(&DataType::Utf8),
                            }))
                        }
                        Expr::Alias(mut a) if untyped(&a.expr) => {
                            a.expr = Box::new(typed(*a.expr, &DataType::Utf8));
                            Transformed::yes(Expr::Alias(a))
                        }
                        other => Transformed::no(other),
                    })
                })
            } else {
                Ok(e)
            }
        })?;
        if node.transformed {
            node.map_data(|p| p.recompute_schema())
        } else {
            Ok(node)
        }
    })?;
    Ok(out.data)
}

/// Statements Sundial runs itself rather than through DataFusion.
fn is_native(stmt: &Statement) -> bool {
    tx::handles(stmt)
        || cursor::handles(stmt)
        || session::handles(stmt)
        || ddl::handles(stmt)
        || copy::handles(stmt)
        || roles::handles(stmt)
        || access::handles(stmt)
}

/// Interval text in PostgreSQL's forms Arrow's parser lacks (`'1 day 01:00'`,
/// `'@ 1 hour ago'`, `'P1DT2H'`, `'1.5 years'`) in `INTERVAL '…'`, `'…'::interval`
/// and `CAST('…' AS interval)`: rewritten as months, days and microseconds when
/// Arrow would refuse it or read it otherwise. Text PostgreSQL would refuse is
/// left for DataFusion to refuse.
fn pg_interval_text(expr: &mut ast::Expr) {
    let value = match expr {
        ast::Expr::Interval(iv)
            if iv.leading_field.is_none()
                && iv.last_field.is_none()
                && iv.fractional_seconds_precision.is_none() =>
        {
            iv.value.as_mut()
        }
        ast::Expr::Cast {
            expr: inner,
            data_type: ast::DataType::Interval { fields: None, .. },
            ..
        } => inner.as_mut(),
        _ => return,
    };
    if let ast::Expr::Value(v) = value
        && let ast::Value::SingleQuotedString(text) = &mut v.value
        && let Ok(iv) = crate::interval::parse_pg_interval(text)
    {
        // Text Arrow reads as PostgreSQL does stays as written (functions that
        // keep an argument's text, such as policy configs, show it).
        let same = arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(text)
            .is_ok_and(|a| {
                (a.months, a.days, a.nanoseconds)
                    == (iv.months, iv.days, iv.micros.saturating_mul(1000))
            });
        if !same {
            *text = format!("{} mons {} days {} us", iv.months, iv.days, iv.micros);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain_digits;

    #[test]
    fn exponent_literals_in_plain_digits() {
        assert_eq!(plain_digits("1e3").as_deref(), Some("1000"));
        assert_eq!(plain_digits("1.5E3").as_deref(), Some("1500"));
        assert_eq!(plain_digits("2.5e-5").as_deref(), Some("0.000025"));
        assert_eq!(plain_digits("12.34e1").as_deref(), Some("123.4"));
        assert_eq!(plain_digits("0e0").as_deref(), Some("0"));
        assert_eq!(plain_digits("1e37").map(|s| s.len()), Some(38));
        assert_eq!(plain_digits("1e38"), None);
        assert_eq!(plain_digits("1e300"), None);
        assert_eq!(plain_digits("1e-300"), None);
    }
}
