//! TimescaleDB's gap filling: `time_bucket_gapfill(width, ts [, start, finish])`
//! with `locf(agg [, prev, treat_null_as_missing])` and `interpolate(agg)`. The query
//! runs with `time_bucket` in place of `time_bucket_gapfill`; its result is then
//! completed with a row for every missing bucket of every group between start and
//! finish (taken from the WHERE clause when not given), and sorted again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, new_null_array};
use arrow::compute::{SortColumn, SortOptions, lexsort_to_indices, take};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{self, Expr, FunctionArg, FunctionArgExpr, SelectItem};

use super::Session;
use crate::error::{Error, Result};

/// How a column of filled rows gets its value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fill {
    /// NULL (plain aggregates).
    Null,
    /// The previous bucket's value; NULL values are skipped if `skip_nulls`.
    Locf { skip_nulls: bool },
    /// Linear between the neighbouring buckets that have values.
    Interpolate,
}

/// What [`rewrite`] found in a query.
#[derive(Debug, Clone)]
pub struct Spec {
    bucket: usize,
    width: (i32, i32, i64),
    start: i64,
    finish: i64,
    keys: Vec<usize>,
    fills: Vec<(usize, Fill)>,
    /// Values before / after the range: locf's `prev`, interpolate's `prev` and
    /// `next` (`(time, value)` records), per column.
    seeds: Vec<(usize, Option<Seed>, Option<Seed>)>,
    /// Sort after filling: (column, descending).
    order: Vec<(usize, bool)>,
    /// Buckets follow this zone's wall clock (the time-zone form).
    zone: Option<chrono_tz::Tz>,
    /// LIMIT and OFFSET of the filled result.
    limit: Option<usize>,
    offset: usize,
}

/// The gapfill call and its arguments, before start/finish are evaluated.
pub struct Draft {
    bucket: usize,
    width: Expr,
    ts: Expr,
    start: Option<Expr>,
    finish: Option<Expr>,
    keys: Vec<usize>,
    fills: Vec<(usize, Fill)>,
    seeds: Vec<(usize, Option<SeedExpr>, Option<SeedExpr>)>,
    order: Vec<(usize, bool)>,
    zone: Option<chrono_tz::Tz>,
    limit: Option<Expr>,
    offset: Option<Expr>,
}

/// A `prev` / `next` argument as written.
#[derive(Debug, Clone)]
enum SeedExpr {
    /// Stands on its own: evaluated once.
    Once(Expr),
    /// Refers to the outer query's group columns, replaced by `$1`, `$2`, ...: the
    /// output columns `keys` give their values, group by group.
    PerGroup { expr: Expr, keys: Vec<usize> },
}

/// A `prev` / `next` argument ready to use.
#[derive(Debug, Clone)]
enum Seed {
    Value(ScalarValue),
    /// Planned once, run for each group with its key values as parameters.
    PerGroup {
        plan: datafusion::logical_expr::LogicalPlan,
        keys: Vec<usize>,
    },
}

fn fname(f: &ast::Function) -> String {
    f.name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_ascii_lowercase())
        .unwrap_or_default()
}

fn args_of(f: &ast::Function) -> Vec<(Option<String>, Expr)> {
    match &f.args {
        ast::FunctionArguments::List(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some((None, e.clone())),
                FunctionArg::Named {
                    name,
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => Some((Some(name.value.to_ascii_lowercase()), e.clone())),
                FunctionArg::ExprNamed {
                    name: Expr::Identifier(name),
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => Some((Some(name.value.to_ascii_lowercase()), e.clone())),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

fn item_expr(item: &mut SelectItem) -> Option<&mut Expr> {
    match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
        _ => None,
    }
}

fn is_null(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, ast::Value::Null))
}

fn unsupported(msg: &str) -> Error {
    Error::sql("0A000", msg.to_string())
}

/// Whether the query uses gap filling.
pub fn uses_gapfill(q: &ast::Query) -> bool {
    let text = q.to_string().to_ascii_lowercase();
    text.contains("time_bucket_gapfill") || text.contains("locf(") || text.contains("interpolate(")
}

/// Turns a gapfill query into a plain `time_bucket` query; `None` if it has no
/// `time_bucket_gapfill` in its top-level select list.
pub fn rewrite(q: &mut ast::Query) -> Result<Option<Draft>> {
    let order_by: Vec<ast::OrderByExpr> = match &q.order_by {
        Some(ast::OrderBy {
            kind: ast::OrderByKind::Expressions(e),
            ..
        }) => e.clone(),
        _ => vec![],
    };
    let ast::SetExpr::Select(sel) = q.body.as_mut() else {
        return Ok(None);
    };
    // (column, width, ts, start, finish) of the gapfill call.
    type Call = (usize, Expr, Expr, Option<Expr>, Option<Expr>);
    let mut found: Option<Call> = None;
    let mut fills = vec![];
    let mut seeds: Vec<(usize, Option<Expr>, Option<Expr>)> = vec![];
    let mut zone: Option<chrono_tz::Tz> = None;
    let mut texts = vec![];
    let mut aliases = vec![];
    for (i, item) in sel.projection.iter_mut().enumerate() {
        aliases.push(match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.to_ascii_lowercase()),
            _ => None,
        });
        let unnamed = matches!(item, SelectItem::UnnamedExpr(_));
        let Some(e) = item_expr(item) else {
            texts.push(String::new());
            continue;
        };
        texts.push(e.to_string());
        let Expr::Function(f) = e else { continue };
        let name = fname(f);
        match name.as_str() {
            "time_bucket_gapfill" => {
                let args = args_of(f);
                let pos: Vec<&Expr> = args
                    .iter()
                    .filter(|(n, _)| n.is_none())
                    .map(|(_, e)| e)
                    .collect();
                let named = |k: &str| {
                    args.iter()
                        .find(|(n, _)| n.as_deref() == Some(k))
                        .map(|(_, e)| e.clone())
                };
                let (Some(width), Some(ts)) = (
                    pos.first()
                        .cloned()
                        .cloned()
                        .or_else(|| named("bucket_width")),
                    pos.get(1).cloned().cloned().or_else(|| named("ts")),
                ) else {
                    return Err(Error::sql(
                        "42883",
                        "function time_bucket_gapfill with these arguments does not exist. Hint: time_bucket_gapfill(bucket_width interval, ts timestamptz [, start timestamptz, finish timestamptz])",
                    ));
                };
                // The time-zone form: a zone name as third argument or `timezone =>`.
                let zone_text = |e: &Expr| match e {
                    Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(t) => Some(t.clone()),
                        _ => None,
                    },
                    _ => None,
                };
                // A quoted third argument that is not a zone name is the start.
                let tz_pos = pos
                    .get(2)
                    .and_then(|e| zone_text(e))
                    .filter(|t| crate::sql::functions::time_bucket::parse_zone(t).is_ok());
                let tz_named = named("timezone");

                let shift = usize::from(tz_pos.is_some());
                if pos.len() > 4 + shift {
                    return Err(Error::sql(
                        "42883",
                        "function time_bucket_gapfill with these arguments does not exist",
                    ));
                }
                let tz_name = match (tz_pos, &tz_named) {
                    (Some(t), _) => Some(t),
                    (None, Some(e)) => Some(zone_text(e).ok_or_else(|| {
                        unsupported("time_bucket_gapfill: the time zone must be a literal")
                    })?),
                    (None, None) => None,
                };
                if let Some(t) = &tz_name {
                    zone = Some(crate::sql::functions::time_bucket::parse_zone(t).map_err(
                        |_| Error::sql("22023", format!("time zone \"{t}\" not recognized")),
                    )?);
                }
                let start = pos
                    .get(2 + shift)
                    .cloned()
                    .cloned()
                    .or_else(|| named("start"))
                    .filter(|e| !is_null(e));
                let finish = pos
                    .get(3 + shift)
                    .cloned()
                    .cloned()
                    .or_else(|| named("finish"))
                    .filter(|e| !is_null(e));
                if found.is_some() {
                    return Err(unsupported(
                        "multiple time_bucket_gapfill calls are not supported",
                    ));
                }
                found = Some((i, width.clone(), ts.clone(), start, finish));
                let mut args = vec![width, ts];
                args.extend(
                    tz_name
                        .iter()
                        .map(|t| Expr::value(ast::Value::SingleQuotedString(t.clone()))),
                );
                *e = super::pg_catalog::rewrite::call("time_bucket", args);
                if unnamed {
                    let e = std::mem::replace(e, Expr::value(ast::Value::Null));
                    *item = SelectItem::ExprWithAlias {
                        expr: e,
                        alias: ast::Ident::with_quote('"', "time_bucket_gapfill"),
                    };
                }
            }
            "locf" | "interpolate" => {
                let args = args_of(f);
                let Some((_, inner)) = args.first().cloned() else {
                    return Err(Error::sql(
                        "42883",
                        format!("function {name}() needs a value argument"),
                    ));
                };
                let arg = |k: usize, name: &str| -> Option<Expr> {
                    args.iter()
                        .find(|(n, _)| n.as_deref() == Some(name))
                        .or_else(|| args.get(k).filter(|(n, _)| n.is_none()))
                        .map(|(_, e)| e.clone())
                        .filter(|e| !is_null(e))
                };
                let fill = if name == "locf" {
                    let skip = arg(2, "treat_null_as_missing")
                        .is_some_and(|e| e.to_string().eq_ignore_ascii_case("true"));
                    seeds.push((i, arg(1, "prev"), None));
                    Fill::Locf { skip_nulls: skip }
                } else {
                    seeds.push((i, arg(1, "prev"), arg(2, "next")));
                    Fill::Interpolate
                };
                fills.push((i, fill));
                *e = inner;
                if unnamed {
                    let e = std::mem::replace(e, Expr::value(ast::Value::Null));
                    *item = SelectItem::ExprWithAlias {
                        expr: e,
                        alias: ast::Ident::with_quote(
                            '"',
                            format!("{name}{}{i}", super::names::UNIQUE_MARK),
                        ),
                    };
                }
            }
            _ => {}
        }
    }
    let Some((bucket, width, ts, start, finish)) = found else {
        if !fills.is_empty() {
            return Err(Error::sql(
                "0A000",
                "locf/interpolate must be used together with time_bucket_gapfill",
            ));
        }
        return Ok(None);
    };
    // Group keys: select items that appear in GROUP BY (by expression, position or alias).
    let group: Vec<String> = match &sel.group_by {
        ast::GroupByExpr::Expressions(es, _) => es.iter().map(|e| e.to_string()).collect(),
        ast::GroupByExpr::All(_) => vec![],
    };
    let mut keys = vec![];
    for (i, t) in texts.iter().enumerate() {
        if i == bucket || fills.iter().any(|(c, _)| *c == i) {
            continue;
        }
        let pos = (i + 1).to_string();
        let alias = aliases[i].clone().unwrap_or_default();
        if group
            .iter()
            .any(|g| g == t || *g == pos || (!alias.is_empty() && g.eq_ignore_ascii_case(&alias)))
        {
            keys.push(i);
        }
    }
    // ORDER BY, mapped to output columns; the query itself is not sorted.
    let mut order = vec![];
    for o in &order_by {
        let t = o.expr.to_string();
        let idx = t
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .or_else(|| texts.iter().position(|x| *x == t))
            .or_else(|| {
                aliases
                    .iter()
                    .position(|a| a.as_deref() == Some(t.to_ascii_lowercase().as_str()))
            })
            .or_else(|| {
                (t.eq_ignore_ascii_case(&format!("time_bucket_gapfill({}, {})", width, ts)))
                    .then_some(bucket)
            });
        match idx {
            Some(i) if i < texts.len() => order.push((i, o.options.asc == Some(false))),
            _ => {
                return Err(unsupported(
                    "ORDER BY of a gapfill query must name output columns",
                ));
            }
        }
    }
    if order.is_empty() {
        order = keys.iter().map(|k| (*k, false)).collect();
        order.push((bucket, false));
    }
    // Seeds that refer to the outer query are evaluated per group.
    let outer = outer_names(sel);
    let mut classified = vec![];
    for (c, prev, next) in seeds {
        let per = |e: Option<Expr>| -> Result<Option<SeedExpr>> {
            e.map(|e| correlate(e, &outer, &texts, &keys)).transpose()
        };
        classified.push((c, per(prev)?, per(next)?));
    }
    let seeds = classified;
    // LIMIT / OFFSET apply to the filled rows.
    let (limit, offset) = match q.limit_clause.take() {
        None => (None, None),
        Some(ast::LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) if limit_by.is_empty() => (limit, offset.map(|o| o.value)),
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => (Some(limit), Some(offset)),
        Some(_) => return Err(unsupported("LIMIT BY on a gapfill query")),
    };
    q.order_by = None;
    let (start, finish) = (
        start.or_else(|| bound_from_where(q, &ts, true)),
        finish.or_else(|| bound_from_where(q, &ts, false)),
    );
    Ok(Some(Draft {
        bucket,
        width,
        ts,
        start,
        finish,
        keys,
        fills,
        seeds,
        order,
        zone,
        limit,
        offset,
    }))
}

/// Names (tables and aliases, lower case) by which the query's FROM clause can be
/// referred to.
fn outer_names(sel: &ast::Select) -> Vec<String> {
    let mut names = vec![];
    let mut add = |tf: &ast::TableFactor| {
        let alias = match tf {
            ast::TableFactor::Table { name, alias, .. } => {
                if alias.is_none()
                    && let Some(last) = name.0.last().and_then(|p| p.as_ident())
                {
                    names.push(last.value.to_ascii_lowercase());
                }
                alias
            }
            ast::TableFactor::Derived { alias, .. } => alias,
            _ => &None,
        };
        if let Some(a) = alias {
            names.push(a.name.value.to_ascii_lowercase());
        }
    };
    for twj in &sel.from {
        add(&twj.relation);
        for j in &twj.joins {
            add(&j.relation);
        }
    }
    names
}

/// Turns a seed that refers to the outer query (`outer.col`, where `outer` names a
/// relation of the outer FROM clause and of no FROM clause inside the seed) into a
/// per-group seed: each such reference becomes a parameter bound to the group column
/// `col` (or `outer.col`) of the select list.
fn correlate(mut e: Expr, outer: &[String], texts: &[String], keys: &[usize]) -> Result<SeedExpr> {
    use std::ops::ControlFlow;
    // Relations the seed's subqueries define shadow the outer ones (by alias, else by
    // table name).
    let mut inner: Vec<String> = vec![];
    let _ = ast::visit_expressions(&e, |x| {
        let q = match x {
            Expr::Subquery(q) | Expr::Exists { subquery: q, .. } => q,
            Expr::InSubquery { subquery: q, .. } => q,
            _ => return ControlFlow::<()>::Continue(()),
        };
        if let ast::SetExpr::Select(sel) = q.body.as_ref() {
            for twj in &sel.from {
                let joined = twj.joins.iter().map(|j| &j.relation);
                for tf in std::iter::once(&twj.relation).chain(joined) {
                    match tf {
                        ast::TableFactor::Table { alias: Some(a), .. }
                        | ast::TableFactor::Derived { alias: Some(a), .. } => {
                            inner.push(a.name.value.to_ascii_lowercase())
                        }
                        ast::TableFactor::Table { name, .. } => {
                            if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                                inner.push(last.value.to_ascii_lowercase());
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    let mut params: Vec<(String, usize)> = vec![];
    let mut error = None;
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        let Expr::CompoundIdentifier(parts) = x else {
            return ControlFlow::<()>::Continue(());
        };
        let [q, col] = parts.as_slice() else {
            return ControlFlow::Continue(());
        };
        let (q, col) = (q.value.to_ascii_lowercase(), col.value.to_ascii_lowercase());
        if !outer.contains(&q) || inner.contains(&q) {
            return ControlFlow::Continue(());
        }
        let qualified = format!("{q}.{col}");
        let key = keys.iter().copied().find(|k| {
            let t = texts[*k].to_ascii_lowercase();
            t == col || t == qualified
        });
        let Some(key) = key else {
            error = Some(Error::sql(
                "42803",
                format!(
                    "subquery uses ungrouped column \"{qualified}\" from outer query (a gapfill prev/next argument may refer to group columns of the select list)"
                ),
            ));
            return ControlFlow::Break(());
        };
        let n = match params.iter().position(|(t, _)| *t == qualified) {
            Some(i) => i + 1,
            None => {
                params.push((qualified, key));
                params.len()
            }
        };
        *x = Expr::value(ast::Value::Placeholder(format!("${n}")));
        ControlFlow::Continue(())
    });
    if let Some(err) = error {
        return Err(err);
    }
    Ok(if params.is_empty() {
        SeedExpr::Once(e)
    } else {
        SeedExpr::PerGroup {
            expr: e,
            keys: params.into_iter().map(|(_, k)| k).collect(),
        }
    })
}

/// `ts >= X` / `ts > X` (start) or `ts < X` / `ts <= X` (finish) among the
/// top-level AND terms of the WHERE clause.
fn bound_from_where(q: &ast::Query, ts: &Expr, start: bool) -> Option<Expr> {
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    let mut terms = vec![];
    super::pg_catalog::rewrite::split_and(sel.selection.clone()?, &mut terms);
    let ts_text = ts.to_string();
    for t in &terms {
        let t = match t {
            Expr::Nested(inner) => inner.as_ref(),
            other => other,
        };
        match t {
            Expr::BinaryOp { left, op, right } => {
                use ast::BinaryOperator::*;
                let (col_left, other) = if left.to_string() == ts_text {
                    (true, right)
                } else if right.to_string() == ts_text {
                    (false, left)
                } else {
                    continue;
                };
                let is_start = match (op, col_left) {
                    (GtEq | Gt, true) | (LtEq | Lt, false) => true,
                    (Lt | LtEq, true) | (Gt | GtEq, false) => false,
                    _ => continue,
                };
                if is_start == start {
                    return Some(other.as_ref().clone());
                }
            }
            Expr::Between {
                expr,
                negated: false,
                low,
                high,
            } if expr.to_string() == ts_text => {
                return Some(if start {
                    low.as_ref().clone()
                } else {
                    high.as_ref().clone()
                });
            }
            _ => {}
        }
    }
    None
}

async fn micros(s: &Session, e: &Expr) -> Result<i64> {
    let v = s.scalar(e).await?;
    let v = match v {
        ScalarValue::Utf8(Some(mut t)) => {
            crate::interval::complete_seconds(&mut t);
            ScalarValue::Utf8(Some(t))
        }
        other => other,
    };
    match v.cast_to(&DataType::Timestamp(
        TimeUnit::Microsecond,
        Some("UTC".into()),
    )) {
        Ok(ScalarValue::TimestampMicrosecond(Some(m), _)) => Ok(m),
        _ => Err(Error::sql(
            "22023",
            format!("invalid time_bucket_gapfill bound: {e}"),
        )),
    }
}

/// Evaluates a `prev` / `next` argument that stands on its own, or plans one that
/// is evaluated per group.
async fn seed(s: &Session, e: SeedExpr) -> Result<Seed> {
    match e {
        SeedExpr::Once(e) => Ok(Seed::Value(s.scalar(&e).await.map_err(|err| {
            Error::sql(
                "22023",
                format!("could not evaluate the gapfill prev/next argument {e}: {err}"),
            )
        })?)),
        SeedExpr::PerGroup { expr, keys } => {
            let sql = format!("SELECT {expr}");
            let stmt = datafusion::sql::sqlparser::parser::Parser::parse_sql(
                &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
                &sql,
            )
            .map_err(|err| Error::Parse(err.to_string()))?
            .pop()
            .ok_or_else(|| Error::Parse(format!("empty gapfill seed: {sql}")))?;
            let plan = s
                .ctx
                .state()
                .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                    stmt,
                )))
                .await?;
            Ok(Seed::PerGroup { plan, keys })
        }
    }
}

/// The value of a seed for the group whose first row is `row`.
async fn seed_for(
    s: &Session,
    seed: &Seed,
    batch: &RecordBatch,
    row: usize,
) -> Result<ScalarValue> {
    match seed {
        Seed::Value(v) => Ok(v.clone()),
        Seed::PerGroup { plan, keys } => {
            let params = keys
                .iter()
                .map(|k| ScalarValue::try_from_array(batch.column(*k), row))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let plan = plan
                .clone()
                .with_param_values(datafusion::common::ParamValues::from(params))?;
            let batches = s.ctx.execute_logical_plan(plan).await?.collect().await?;
            super::first_value(&batches)
        }
    }
}

impl Draft {
    /// Evaluates width, start and finish.
    pub async fn finish(self, s: &Session) -> Result<Spec> {
        let missing = |what: &str| {
            Error::sql(
                "0A000",
                format!(
                    "missing time_bucket_gapfill argument: could not infer {what} from WHERE clause. Hint: Specify start and finish as arguments or in the WHERE clause."
                ),
            )
        };
        let start = self.start.as_ref().ok_or_else(|| missing("start"))?;
        let finish = self.finish.as_ref().ok_or_else(|| missing("finish"))?;
        let start = micros(s, start).await?;
        let finish = micros(s, finish).await?;
        let width = match s
            .scalar(&Expr::Cast {
                kind: ast::CastKind::DoubleColon,
                expr: Box::new(self.width.clone()),
                data_type: ast::DataType::Interval {
                    fields: None,
                    precision: None,
                },
                array: false,
                format: None,
            })
            .await?
        {
            ScalarValue::IntervalMonthDayNano(Some(v)) => (v.months, v.days, v.nanoseconds),
            _ => {
                return Err(Error::sql(
                    "22023",
                    "time_bucket_gapfill: the width must be an interval",
                ));
            }
        };
        let _ = &self.ts;
        let mut evaluated = vec![];
        for (c, prev, next) in self.seeds.clone() {
            let prev = match prev {
                Some(e) => Some(seed(s, e).await?),
                None => None,
            };
            let next = match next {
                Some(e) => Some(seed(s, e).await?),
                None => None,
            };
            evaluated.push((c, prev, next));
        }
        let count = async |e: &Option<Expr>, what: &str| -> Result<Option<usize>> {
            let Some(e) = e else { return Ok(None) };
            match s.scalar(e).await?.cast_to(&DataType::Int64) {
                Ok(ScalarValue::Int64(None)) => Ok(None),
                Ok(ScalarValue::Int64(Some(n))) if n >= 0 => Ok(Some(n as usize)),
                _ => Err(Error::sql(
                    "2201W",
                    format!("{what} must be a non-negative integer: {e}"),
                )),
            }
        };
        let limit = count(&self.limit, "LIMIT").await?;
        let offset = count(&self.offset, "OFFSET").await?.unwrap_or(0);
        Ok(Spec {
            limit,
            offset,
            bucket: self.bucket,
            width,
            start,
            finish,
            keys: self.keys,
            fills: self.fills,
            seeds: evaluated,
            order: self.order,
            zone: self.zone,
        })
    }
}

/// Bucket starts from the bucket of `start` up to (not including) `finish`.
fn buckets(spec: &Spec) -> Result<Vec<i64>> {
    use crate::sql::functions::time_bucket::{from_local, to_local};
    let (m, d, n) = spec.width;
    // With a zone, buckets are computed on its wall clock and converted back.
    let (local_start, to_utc): (i64, Box<dyn Fn(i64) -> Result<i64>>) = match spec.zone {
        Some(tz) => (
            to_local(&tz, spec.start)?,
            Box::new(move |b| Ok(from_local(&tz, b)?)),
        ),
        None => (spec.start, Box::new(Ok)),
    };
    let first = crate::sql::functions::time_bucket::bucket(m, d, n, local_start, None, 0)?;
    let mut out = vec![];
    let mut b = first;
    while to_utc(b)? < spec.finish {
        out.push(to_utc(b)?);
        if out.len() > 1_000_000 {
            return Err(Error::sql(
                "54000",
                "time_bucket_gapfill: more than 1,000,000 buckets per group",
            ));
        }
        let next = if m != 0 {
            let dt = chrono::DateTime::from_timestamp_micros(b)
                .ok_or_else(|| Error::sql("22008", "timestamp out of range"))?;
            dt.checked_add_months(chrono::Months::new(m.unsigned_abs()))
                .ok_or_else(|| Error::sql("22008", "timestamp out of range"))?
                .timestamp_micros()
        } else {
            b + d as i64 * 86_400_000_000 + n / 1000
        };
        if next <= b {
            return Err(Error::sql("22023", "period must be greater than 0"));
        }
        b = next;
    }
    Ok(out)
}

/// Completes the query's result with the missing buckets and sorts it.
pub async fn apply(s: &Session, spec: &Spec, batch: RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    let n = batch.num_rows();
    let bucket_col = arrow::compute::cast(
        batch.column(spec.bucket),
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )?;
    let bucket_col = bucket_col
        .as_primitive::<TimestampMicrosecondType>()
        .clone();
    // Rows by group key.
    let key_cols: Vec<ArrayRef> = spec.keys.iter().map(|k| batch.column(*k).clone()).collect();
    let conv = RowConverter::new(
        key_cols
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )?;
    let rows = if key_cols.is_empty() {
        None
    } else {
        Some(conv.convert_columns(&key_cols)?)
    };
    let mut groups: BTreeMap<Vec<u8>, (usize, BTreeMap<i64, usize>)> = BTreeMap::new();
    for i in 0..n {
        let key = rows
            .as_ref()
            .map(|r| r.row(i).as_ref().to_vec())
            .unwrap_or_default();
        let g = groups.entry(key).or_insert((i, BTreeMap::new()));
        if bucket_col.is_valid(i) {
            g.1.insert(bucket_col.value(i), i);
        }
    }
    let all = buckets(spec)?;
    // Output plan: for each group and bucket, the source row (or None) and the
    // group's representative row for the key columns.
    let mut src: Vec<Option<u32>> = vec![];
    let mut rep: Vec<u32> = vec![];
    let mut times: Vec<i64> = vec![];
    for (first, by_time) in groups.values() {
        let mut ts: Vec<i64> = all.clone();
        ts.extend(
            by_time
                .keys()
                .filter(|t| **t < spec.start || **t >= spec.finish || !all.contains(t)),
        );
        ts.sort_unstable();
        ts.dedup();
        for t in ts {
            src.push(by_time.get(&t).map(|i| *i as u32));
            rep.push(*first as u32);
            times.push(t);
        }
    }
    // Groups with no rows at all are unknown; with no group keys, one group exists
    // even for an empty result.
    if groups.is_empty() && spec.keys.is_empty() {
        for t in &all {
            src.push(None);
            rep.push(0);
            times.push(*t);
        }
    }
    // Seeds per group, by the group's first row.
    let mut reps: Vec<u32> = groups.values().map(|(first, _)| *first as u32).collect();
    if groups.is_empty() && spec.keys.is_empty() {
        reps.push(0);
    }
    let mut seeds: HashMap<usize, SeedValues> = HashMap::new();
    for (c, prev, next) in &spec.seeds {
        let mut v = SeedValues::default();
        for r in &reps {
            if let Some(p) = prev {
                v.prev
                    .insert(*r, seed_for(s, p, &batch, *r as usize).await?);
            }
            if let Some(n) = next {
                v.next
                    .insert(*r, seed_for(s, n, &batch, *r as usize).await?);
            }
        }
        seeds.insert(*c, v);
    }
    let no_seeds = SeedValues::default();
    let m = src.len();
    let src_idx = arrow::array::UInt32Array::from(src.clone());
    let rep_idx = arrow::array::UInt32Array::from(rep);
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (c, f) in schema.fields().iter().enumerate() {
        let col = batch.column(c);
        let out: ArrayRef = if c == spec.bucket {
            let arr: ArrayRef =
                Arc::new(arrow::array::TimestampMicrosecondArray::from(times.clone()));
            arrow::compute::cast(&arr, f.data_type())?
        } else if spec.keys.contains(&c) {
            if n == 0 {
                new_null_array(f.data_type(), m)
            } else {
                take(col, &rep_idx, None)?
            }
        } else {
            let taken = if n == 0 {
                new_null_array(f.data_type(), m)
            } else {
                take(col, &src_idx, None)?
            };
            match spec
                .fills
                .iter()
                .find(|(i, _)| *i == c)
                .map(|(_, f)| *f)
                .unwrap_or(Fill::Null)
            {
                Fill::Null => taken,
                Fill::Locf { skip_nulls } => {
                    let v = seeds.get(&c).unwrap_or(&no_seeds);
                    locf(&taken, &src, &rep_idx, skip_nulls, &v.prev)?
                }
                Fill::Interpolate => {
                    let v = seeds.get(&c).unwrap_or(&no_seeds);
                    let mut points = HashMap::new();
                    for r in &reps {
                        let p = point(v.prev.get(r))?;
                        let n = point(v.next.get(r))?;
                        points.insert(*r, (p, n));
                    }
                    interpolate(&taken, &times, &rep_idx, &points)?
                }
            }
        };
        cols.push(out);
    }
    // Filled rows have NULLs even where the query's column could not (count(*)).
    let schema = nullable(&schema);
    let filled = RecordBatch::try_new(schema.clone(), cols)?;
    // Sort as the query asked.
    let sort: Vec<SortColumn> = spec
        .order
        .iter()
        .map(|(c, desc)| SortColumn {
            values: filled.column(*c).clone(),
            options: Some(SortOptions {
                descending: *desc,
                nulls_first: *desc,
            }),
        })
        .collect();
    let sorted = if sort.is_empty() || filled.num_rows() == 0 {
        filled
    } else {
        let idx = lexsort_to_indices(&sort, None)?;
        let cols = filled
            .columns()
            .iter()
            .map(|c| take(c, &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        RecordBatch::try_new(schema, cols)?
    };
    let from = spec.offset.min(sorted.num_rows());
    let len = (sorted.num_rows() - from).min(spec.limit.unwrap_or(usize::MAX));
    Ok(sorted.slice(from, len))
}

/// The `prev` and `next` values of one column, by the first row of each group.
#[derive(Default)]
struct SeedValues {
    prev: HashMap<u32, ScalarValue>,
    next: HashMap<u32, ScalarValue>,
}

/// A `(time, value)` seed: µs and a float.
type Point = (i64, f64);

/// A `(time, value)` seed record as µs and a float.
fn point(v: Option<&ScalarValue>) -> Result<Option<(i64, f64)>> {
    let Some(ScalarValue::Struct(st)) = v else {
        return match v {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            Some(_) => Err(Error::sql(
                "42804",
                "interpolate: prev and next must be (time, value) records",
            )),
        };
    };
    if st.num_columns() != 2 || st.is_null(0) {
        return Ok(None);
    }
    let t = arrow::compute::cast(
        st.column(0),
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )?;
    let t = t.as_primitive::<TimestampMicrosecondType>();
    let v = arrow::compute::cast(st.column(1), &DataType::Float64)?;
    let v = v.as_primitive::<arrow::datatypes::Float64Type>();
    if t.is_null(0) || v.is_null(0) {
        return Ok(None);
    }
    Ok(Some((t.value(0), v.value(0))))
}

/// `schema` with every field nullable.
pub fn nullable(schema: &arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// Carries the last value forward within each group (rows are grouped and in time
/// order). Real rows keep their value; with `skip_nulls`, NULL real values are
/// filled too.
fn locf(
    col: &ArrayRef,
    src: &[Option<u32>],
    group: &arrow::array::UInt32Array,
    skip_nulls: bool,
    prev: &HashMap<u32, ScalarValue>,
) -> Result<ArrayRef> {
    // The groups' seeds are appended after the rows; each group starts from its own.
    let mut extra = vec![];
    let mut seed_at: HashMap<u32, u32> = HashMap::new();
    for (g, v) in prev {
        if !v.is_null() {
            seed_at.insert(*g, (col.len() + extra.len()) as u32);
            extra.push(v.cast_to(col.data_type())?);
        }
    }
    let col = if extra.is_empty() {
        col.clone()
    } else {
        let more = ScalarValue::iter_to_array(extra)?;
        arrow::compute::concat(&[col.as_ref(), more.as_ref()])?
    };
    let n = src.len();
    let mut idx: Vec<Option<u32>> = Vec::with_capacity(n);
    let mut last: Option<u32> = None;
    for (i, s) in src.iter().enumerate().take(n) {
        if i == 0 || group.value(i) != group.value(i - 1) {
            last = seed_at.get(&group.value(i)).copied();
        }
        let real = s.is_some();
        if real && (col.is_valid(i) || !skip_nulls) {
            last = Some(i as u32);
            idx.push(Some(i as u32));
        } else {
            idx.push(last);
        }
    }
    Ok(take(&col, &arrow::array::UInt32Array::from(idx), None)?)
}

/// Linear interpolation between the previous and next non-NULL values of the
/// group, by bucket time; the result keeps the column's type.
fn interpolate(
    col: &ArrayRef,
    times: &[i64],
    group: &arrow::array::UInt32Array,
    seeds: &HashMap<u32, (Option<Point>, Option<Point>)>,
) -> Result<ArrayRef> {
    let f = arrow::compute::cast(col, &DataType::Float64)?;
    let f = f.as_primitive::<arrow::datatypes::Float64Type>();
    let len = f.len();
    let mut out: Vec<Option<f64>> = (0..len)
        .map(|i| f.is_valid(i).then(|| f.value(i)))
        .collect();
    let mut i = 0;
    while i < len {
        let mut j = i;
        while j < len && group.value(j) == group.value(i) {
            j += 1;
        }
        let (seed_prev, seed_next) = seeds.get(&group.value(i)).copied().unwrap_or_default();
        let mut prev: Option<(i64, f64)> = seed_prev;
        for k in i..j {
            if f.is_valid(k) {
                prev = Some((times[k], f.value(k)));
                continue;
            }
            let next = (k + 1..j)
                .find(|x| f.is_valid(*x))
                .map(|x| (times[x], f.value(x)))
                .or(seed_next);
            if let (Some((t0, v0)), Some((t1, v1))) = (prev, next)
                && t1 != t0
            {
                let (t0, t1, t) = (t0 as f64, t1 as f64, times[k] as f64);
                out[k] = Some(v0 + (v1 - v0) * (t - t0) / (t1 - t0));
            }
        }
        i = j;
    }
    let arr: ArrayRef = Arc::new(arrow::array::Float64Array::from(out));
    let target = col.data_type();
    if matches!(target, DataType::Int16 | DataType::Int32 | DataType::Int64) {
        // PostgreSQL rounds when interpolating integers.
        let rounded: ArrayRef = Arc::new(arrow::array::Float64Array::from(
            arr.as_primitive::<arrow::datatypes::Float64Type>()
                .iter()
                .map(|v| v.map(f64::round))
                .collect::<Vec<_>>(),
        ));
        return Ok(arrow::compute::cast(&rounded, target)?);
    }
    Ok(arrow::compute::cast(&arr, target)?)
}
