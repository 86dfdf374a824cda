//! Continuous aggregates, as TimescaleDB names them: `CREATE MATERIALIZED VIEW …
//! WITH (timescaledb.continuous)` checks the definition and makes a materialization
//! hypertable; `refresh_continuous_aggregate` re-materializes the invalidated buckets
//! of a window; a query of the view reads the materialization, plus (real-time) the
//! aggregate of raw rows wherever nothing valid is materialized.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    self, CreateTableOptions, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr,
    SelectItem, SetExpr, SqlOption, TableFactor,
};
use futures::TryStreamExt;

use super::functions::time_bucket;
use super::{Output, Session, args, viewdefs};
use crate::catalog::cagg::{Range, add_range, intersect};
use crate::catalog::{
    BucketDef, CaggDef, ColumnDef, Manifest, NewTable, RefreshPolicy, SqlType, TableDef, ViewDef,
};
use crate::engine::{Engine, TableChange};
use crate::error::{Error, Result};

/// The procedure that refreshes a continuous aggregate.
pub const REFRESH: &str = "refresh_continuous_aggregate";

/// Functions whose value is not fixed by their arguments: a definition using one
/// could never be materialized once and for all.
const MUTABLE: [&str; 14] = [
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtimestamp",
    "localtime",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "random",
    "gen_random_uuid",
    "uuid",
    "setseed",
];

/// `WITH (…)` of `CREATE MATERIALIZED VIEW`.
#[derive(Debug, Default)]
struct Options {
    continuous: bool,
    materialized_only: Option<bool>,
    no_data: bool,
}

fn options(opts: &CreateTableOptions) -> Result<Options> {
    let list: &[SqlOption] = match opts {
        CreateTableOptions::With(o) => o,
        _ => &[],
    };
    let mut out = Options::default();
    for o in list {
        let SqlOption::KeyValue { key, value } = o else {
            continue;
        };
        let k = key.value.to_ascii_lowercase();
        let v = args::literal_text(value).unwrap_or_else(|| value.to_string());
        if k == super::prepass::NO_DATA_OPTION {
            out.no_data = args::truthy(&v);
            continue;
        }
        let short = k
            .strip_prefix("timescaledb.")
            .or_else(|| k.strip_prefix("tsdb."))
            .unwrap_or(&k);
        match short {
            "continuous" => out.continuous = args::truthy(&v),
            "materialized_only" => out.materialized_only = Some(args::truthy(&v)),
            // Sundial's materializations are always compressed, sorted Parquet.
            "create_group_indexes"
            | "compress"
            | "columnstore"
            | "enable_columnstore"
            | "segmentby"
            | "orderby"
            | "compress_segmentby"
            | "compress_orderby"
            | "chunk_interval"
            | "chunk_time_interval"
            | "enable_granular_refresh" => {}
            _ => {
                return Err(Error::sql(
                    "22023",
                    format!("unrecognized parameter \"{k}\""),
                ));
            }
        }
    }
    Ok(out)
}

fn invalid(detail: &str) -> Error {
    Error::NotSupported(format!("invalid continuous aggregate query: {detail}"))
}

/// What the definition's time bucket is, found in its GROUP BY.
struct Bucketing {
    /// Index of the select item that is the bucket.
    item: usize,
    bucket: BucketDef,
}

/// Runs `CREATE MATERIALIZED VIEW name [(cols)] WITH (timescaledb.continuous …) AS
/// SELECT … [WITH [NO] DATA]`.
pub async fn create(s: &Session, cv: &ast::CreateView) -> Result<Output> {
    let opts = options(&cv.options)?;
    if !opts.continuous {
        return Err(Error::NotSupported(
            "materialized views other than continuous aggregates are not supported; \
             add WITH (timescaledb.continuous)"
                .into(),
        ));
    }
    let name = args::table_name(&cv.name)?;
    let m = s.engine.catalog().snapshot();
    let d = m.database(&s.db)?;
    if d.tables.contains_key(&name) || d.views.contains_key(&name) {
        if cv.if_not_exists {
            return Ok(Output::Command("CREATE MATERIALIZED VIEW".into()));
        }
        return Err(Error::DuplicateTable(name));
    }
    if cv.or_replace {
        return Err(Error::NotSupported(
            "CREATE OR REPLACE on a continuous aggregate; drop it and create it again".into(),
        ));
    }
    let query = &cv.query;
    let select = check_shape(query)?;
    let (source, parent) = source_of(s, &m, select)?;
    let source_time = source
        .time_column
        .clone()
        .ok_or_else(|| invalid("the source has no time column"))?;
    let b = bucketing(s, select, &source_time).await?;
    if let Some(p) = &parent
        && let Some(pc) = &p.cagg
    {
        check_hierarchy(&name, &b.bucket, &pc.view, &pc.bucket)?;
    }

    // Plan it once: a bad definition fails here, and the plan gives the columns.
    let sql = query.to_string();
    let state = s.ctx.state();
    let probe = viewdefs::plan_view(&state, viewdefs::parse_query(&sql)?, &[]).await?;
    let planned: Vec<String> = probe
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let width = planned.len();
    let columns = viewdefs::column_names(&cv.columns, query, &planned, "CREATE MATERIALIZED VIEW")?;
    // Types as queries see them: after the analyzer's PostgreSQL rules (avg of
    // integers is numeric, …).
    let analyzed = state.optimize(&probe)?;
    if analyzed.schema().fields().len() != width {
        return Err(Error::Internal(
            "the analyzed definition changed width".into(),
        ));
    }
    let mut defs = vec![];
    for (i, f) in analyzed.schema().fields().iter().enumerate() {
        let sql_type = SqlType::from_arrow(f.data_type()).ok_or_else(|| {
            Error::NotSupported(format!(
                "column \"{}\" of type {} in a continuous aggregate",
                columns[i],
                f.data_type()
            ))
        })?;
        defs.push(ColumnDef {
            name: columns[i].clone(),
            sql_type,
            nullable: i != b.item,
            default: None,
            identity: None,
        });
    }
    let bucket_column = columns[b.item].clone();
    if !defs[b.item].sql_type.is_time() {
        return Err(invalid("the time bucket must be of a time type"));
    }
    let first = s.engine.catalog().alloc_ids(1)?;
    let mat_name = format!("_materialized_hypertable_{first}");
    let interval = source
        .chunk_interval_micros
        .unwrap_or(s.engine.config().chunk_interval_micros)
        .saturating_mul(10);
    let cagg = CaggDef {
        view: name.clone(),
        source_id: source.id,
        raw_id: parent
            .as_ref()
            .and_then(|p| p.cagg.as_ref().map(|c| c.raw_id))
            .unwrap_or(source.id),
        parent: parent
            .as_ref()
            .and_then(|p| p.cagg.as_ref().map(|c| c.view.clone())),
        sql: sql.clone(),
        source_time,
        bucket_column,
        bucket: b.bucket,
        materialized_only: opts.materialized_only.unwrap_or(true),
        invalidations: vec![],
        dropped: vec![],
        policy: None,
    };
    let view = ViewDef {
        id: 0,
        name: name.clone(),
        sql,
        columns: columns.clone(),
        column_types: analyzed
            .schema()
            .fields()
            .iter()
            .map(|f| super::pg_catalog::field_type_oid(f))
            .collect(),
        cagg: None,
    };
    let table = NewTable {
        name: mat_name,
        columns: defs,
        time_column: Some(cagg.bucket_column.clone()),
        chunk_interval_micros: Some(interval),
        line_protocol: false,
        lp_columns: false,
        keys: vec![],
        checks: vec![],
        foreign_keys: vec![],
        compression: None,
    };
    s.engine.catalog().create_cagg(&s.db, table, cagg, view)?;
    if !opts.no_data
        && let Err(e) = refresh(s, &name, None, None, false).await
    {
        // Nothing half-built stays behind.
        let _ = s.engine.drop_cagg(&s.db, &name);
        return Err(e);
    }
    Ok(Output::Command("CREATE MATERIALIZED VIEW".into()))
}

/// The definition's SELECT, when its shape is one a continuous aggregate can have.
fn check_shape(q: &ast::Query) -> Result<&ast::Select> {
    if q.with.is_some() {
        return Err(invalid(
            "CTEs and subqueries are not supported by continuous aggregates",
        ));
    }
    if q.limit_clause.is_some() || q.fetch.is_some() {
        return Err(invalid(
            "LIMIT and LIMIT OFFSET are not supported in queries defining continuous aggregates",
        ));
    }
    let SetExpr::Select(select) = q.body.as_ref() else {
        return Err(invalid(
            "UNION, EXCEPT & INTERSECT are not supported by continuous aggregates",
        ));
    };
    if select.distinct.is_some() {
        return Err(invalid(
            "DISTINCT / DISTINCT ON queries are not supported by continuous aggregates",
        ));
    }
    match &select.group_by {
        GroupByExpr::Expressions(e, mods) if !e.is_empty() && mods.is_empty() => {}
        GroupByExpr::Expressions(_, mods) if !mods.is_empty() => {
            return Err(invalid(
                "GROUP BY GROUPING SETS, ROLLUP and CUBE are not supported by continuous aggregates",
            ));
        }
        _ => {
            return Err(invalid(
                "include at least one aggregate function and a GROUP BY clause with time bucket",
            ));
        }
    }
    let mut bad: Option<Error> = None;
    let _ = ast::visit_expressions(select, |e| {
        match e {
            Expr::Function(f) => {
                let n = f.name.to_string().to_ascii_lowercase();
                let n = n.rsplit('.').next().unwrap_or(&n).to_string();
                if f.over.is_some() {
                    bad = Some(invalid(
                        "window functions are not supported by continuous aggregates",
                    ));
                    return ControlFlow::Break(());
                }
                if MUTABLE.contains(&n.as_str()) {
                    bad = Some(Error::NotSupported(
                        "only immutable functions supported in continuous aggregate view".into(),
                    ));
                    return ControlFlow::Break(());
                }
            }
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                bad = Some(invalid(
                    "CTEs and subqueries are not supported by continuous aggregates",
                ));
                return ControlFlow::Break(());
            }
            _ => {}
        }
        ControlFlow::Continue(())
    });
    if let Some(e) = bad {
        return Err(e);
    }
    Ok(select)
}

/// The table the definition reads (a hypertable, or a continuous aggregate's
/// materialization) and, for a continuous aggregate on one, the parent's table.
fn source_of(
    s: &Session,
    m: &Manifest,
    select: &ast::Select,
) -> Result<(Arc<TableDef>, Option<Arc<TableDef>>)> {
    let [from] = select.from.as_slice() else {
        return Err(invalid(
            "only one hypertable is allowed in continuous aggregate view",
        ));
    };
    if !from.joins.is_empty() {
        return Err(invalid(
            "JOINs are not supported in Sundial's continuous aggregates yet",
        ));
    }
    let TableFactor::Table { name, .. } = &from.relation else {
        return Err(invalid("sub-queries are not supported in FROM clause"));
    };
    let rel = args::table_name(name)?;
    let d = m.database(&s.db)?;
    if let Some(t) = d.tables.get(&rel) {
        if t.cagg.is_some() {
            return Err(Error::NotSupported(format!(
                "hypertable is a continuous aggregate materialization table; use continuous aggregate \"{}\" instead",
                t.cagg.as_ref().map(|c| c.view.as_str()).unwrap_or("")
            )));
        }
        if !t.is_hypertable() {
            return Err(Error::NotSupported(format!(
                "invalid continuous aggregate view: at least one hypertable should be used in \
                 the view definition (\"{rel}\" is not a hypertable)"
            )));
        }
        return Ok((t.clone(), None));
    }
    if let Some(v) = d.views.get(&rel) {
        if let Some(id) = v.cagg
            && let Some(t) = d.tables.values().find(|t| t.id == id)
        {
            return Ok((t.clone(), Some(t.clone())));
        }
        return Err(Error::NotSupported(
            "invalid continuous aggregate query: a continuous aggregate needs to query a \
             hypertable or another continuous aggregate"
                .into(),
        ));
    }
    Err(Error::UndefinedTable(rel))
}

/// Whether `e` names column `col` (bare or qualified).
fn is_column(e: &Expr, col: &str) -> bool {
    match e {
        Expr::Identifier(i) => i.value == col,
        Expr::CompoundIdentifier(parts) => parts.last().is_some_and(|i| i.value == col),
        Expr::Nested(e) => is_column(e, col),
        _ => false,
    }
}

/// The select item a GROUP BY entry stands for: a position, an output name that
/// is not an input column (PostgreSQL's rule), or the same expression.
fn group_item(select: &ast::Select, g: &Expr, input_time: &str) -> Option<usize> {
    if let Expr::Value(v) = g
        && let ast::Value::Number(n, _) = &v.value
    {
        return n.parse::<usize>().ok().and_then(|i| i.checked_sub(1));
    }
    if let Expr::Identifier(id) = g
        && id.value != input_time
        && let Some(i) = select.projection.iter().position(
            |p| matches!(p, SelectItem::ExprWithAlias { alias, .. } if alias.value == id.value),
        )
    {
        return Some(i);
    }
    select.projection.iter().position(|p| match p {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e == g,
        _ => false,
    })
}

/// The `time_bucket(width, <time column> …)` the definition groups by.
async fn bucketing(s: &Session, select: &ast::Select, time: &str) -> Result<Bucketing> {
    let GroupByExpr::Expressions(groups, _) = &select.group_by else {
        return Err(invalid("a GROUP BY clause with time bucket is required"));
    };
    let mut found: Option<(usize, &ast::Function)> = None;
    for g in groups {
        let Some(i) = group_item(select, g, time) else {
            continue;
        };
        let e = match select.projection.get(i) {
            Some(SelectItem::UnnamedExpr(e)) | Some(SelectItem::ExprWithAlias { expr: e, .. }) => e,
            _ => continue,
        };
        let Expr::Function(f) = e else { continue };
        let fname = f.name.to_string().to_ascii_lowercase();
        if fname.rsplit('.').next() != Some("time_bucket") {
            continue;
        }
        let FunctionArguments::List(l) = &f.args else {
            continue;
        };
        let on_time = matches!(
            l.args.get(1),
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) if is_column(e, time)
        );
        if !on_time {
            continue;
        }
        if found.is_some() {
            return Err(Error::NotSupported(
                "continuous aggregate view cannot contain multiple time bucket functions".into(),
            ));
        }
        found = Some((i, f));
    }
    let Some((item, f)) = found else {
        return Err(Error::NotSupported(
            "continuous aggregate view must include a valid time bucket function".into(),
        ));
    };
    let FunctionArguments::List(l) = &f.args else {
        return Err(Error::Internal("time_bucket without arguments".into()));
    };
    let arg = |i: usize| -> Option<&Expr> {
        match l.args.get(i) {
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => Some(e),
            _ => None,
        }
    };
    let width_expr = arg(0).ok_or_else(|| invalid("time_bucket needs a width"))?;
    let width = s
        .scalar(&Expr::Cast {
            kind: ast::CastKind::DoubleColon,
            expr: Box::new(width_expr.clone()),
            data_type: ast::DataType::Interval {
                fields: None,
                precision: None,
            },
            array: false,
            format: None,
        })
        .await?;
    let ScalarValue::IntervalMonthDayNano(Some(iv)) = width else {
        return Err(invalid("the time bucket width must be an interval"));
    };
    if iv.months < 0
        || iv.days < 0
        || iv.nanoseconds < 0
        || (iv.months == 0 && iv.days == 0 && iv.nanoseconds == 0)
    {
        return Err(Error::sql("22023", "period must be greater than 0"));
    }
    if iv.months != 0 && (iv.days != 0 || iv.nanoseconds != 0) {
        return Err(Error::NotSupported(
            "invalid interval specified: use either months or days and hours, but not months, days and hours together".into(),
        ));
    }
    let mut bucket = BucketDef {
        width: args::literal_text(width_expr).unwrap_or_else(|| width_expr.to_string()),
        months: iv.months,
        days: iv.days,
        micros: iv.nanoseconds / 1000,
        origin: None,
        offset: 0,
        timezone: None,
    };
    // (width, ts, origin | offset) or (width, ts, zone [, origin [, offset]])
    for i in 2..l.args.len() {
        let e = arg(i).ok_or_else(|| invalid("named time_bucket arguments"))?;
        let v = s.scalar(e).await?;
        match v {
            // A third text argument is a time zone, else an origin (as time_bucket reads it).
            ScalarValue::Utf8(Some(z)) | ScalarValue::Utf8View(Some(z))
                if i == 2 && time_bucket::parse_zone(&z).is_ok() =>
            {
                bucket.timezone = Some(z);
            }
            ScalarValue::IntervalMonthDayNano(Some(o)) => {
                if o.months != 0 {
                    return Err(invalid("a time bucket offset in months"));
                }
                bucket.offset = i64::from(o.days)
                    .saturating_mul(86_400_000_000)
                    .saturating_add(o.nanoseconds / 1000);
            }
            ScalarValue::TimestampMicrosecond(Some(t), _) => bucket.origin = Some(t),
            ScalarValue::TimestampNanosecond(Some(t), _) => bucket.origin = Some(t / 1000),
            ScalarValue::Date32(Some(d)) => bucket.origin = Some(i64::from(d) * 86_400_000_000),
            ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t)) => {
                let tstz = arrow::datatypes::DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Microsecond,
                    Some("UTC".into()),
                );
                match ScalarValue::Utf8(Some(t.clone())).cast_to(&tstz) {
                    Ok(ScalarValue::TimestampMicrosecond(Some(v), _)) => bucket.origin = Some(v),
                    _ => return Err(invalid(&format!("time_bucket argument {t}"))),
                }
            }
            other => return Err(invalid(&format!("time_bucket argument {other}"))),
        }
    }
    Ok(Bucketing { item, bucket })
}

/// TimescaleDB's rule for a continuous aggregate on another: its bucket is at
/// least as wide as the parent's and a multiple of it.
fn check_hierarchy(name: &str, b: &BucketDef, parent: &str, pb: &BucketDef) -> Result<()> {
    if b.timezone != pb.timezone || b.origin != pb.origin || b.offset != pb.offset {
        return Err(Error::NotSupported(format!(
            "cannot create continuous aggregate \"{name}\" with a different time zone, origin \
             or offset than \"{parent}\": its buckets would split the parent's"
        )));
    }
    if b.fixed_width().is_some() && pb.fixed_width().is_none() {
        return Err(Error::NotSupported(
            "cannot create continuous aggregate with fixed-width bucket on top of one using variable-width bucket".into(),
        ));
    }
    // TimescaleDB compares widths with months as 30 days.
    let w = |b: &BucketDef| {
        (i64::from(b.months) * 30 + i64::from(b.days))
            .saturating_mul(86_400_000_000)
            .saturating_add(b.micros)
    };
    let (c, p) = (w(b), w(pb));
    let msg = if c < p {
        Some("greater or equal than")
    } else if p > 0 && c % p != 0 {
        Some("multiple of")
    } else {
        None
    };
    if let Some(msg) = msg {
        return Err(Error::NotSupported(format!(
            "cannot create continuous aggregate with incompatible bucket width: time bucket width of \"{name}\" [{}] should be {msg} the time bucket width of \"{parent}\" [{}]",
            b.width, pb.width
        )));
    }
    Ok(())
}

/// Start of the bucket holding `ts`.
fn bucket_start(b: &BucketDef, ts: i64) -> Result<i64> {
    let nanos = b.micros.saturating_mul(1000);
    Ok(match &b.timezone {
        None => time_bucket::bucket(b.months, b.days, nanos, ts, b.origin, b.offset)?,
        Some(z) => time_bucket::bucket_in_zone(
            &time_bucket::parse_zone(z)?,
            b.months,
            b.days,
            nanos,
            ts,
            b.origin,
            b.offset,
        )?,
    })
}

/// End (exclusive) of the bucket starting at `start`.
fn bucket_end(b: &BucketDef, start: i64) -> Result<i64> {
    match b.fixed_width() {
        Some(w) => Ok(start.saturating_add(w)),
        None => bucket_start(b, start.saturating_add(b.max_width())),
    }
}

/// The smallest instant whose bucket starts at or after `label` (µs; rows of the
/// buckets from `label` on begin here). Exact for every bucket kind: buckets in a
/// time zone move with daylight saving, so this searches the monotonic mapping
/// from instants to bucket starts rather than assuming a width.
fn first_instant(b: &BucketDef, label: i64) -> Result<i64> {
    if label == i64::MIN {
        return Ok(i64::MIN);
    }
    if let Some(w) = b.fixed_width() {
        let start = bucket_start(b, label)?;
        return Ok(if start == label {
            label
        } else {
            start.saturating_add(w)
        });
    }
    let slack = b.max_width().saturating_add(86_400_000_000);
    let (mut lo, mut hi) = (label.saturating_sub(slack), label.saturating_add(slack));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if bucket_start(b, mid)? >= label {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

/// The bucket starts (labels) of the rows in time range `r` (inclusive ranges).
fn labels_of(b: &BucketDef, r: Range) -> Result<Range> {
    let lo = if r.0 == i64::MIN {
        i64::MIN
    } else {
        bucket_start(b, r.0)?
    };
    let hi = if r.1 == i64::MAX {
        i64::MAX
    } else {
        bucket_start(b, r.1)?
    };
    Ok((lo, hi))
}

/// The instants whose buckets start within label range `l` (inclusive ranges).
fn instants_of(b: &BucketDef, l: Range) -> Result<Range> {
    let lo = first_instant(b, l.0)?;
    let hi = if l.1 == i64::MAX {
        i64::MAX
    } else {
        first_instant(b, l.1.saturating_add(1))?.saturating_sub(1)
    };
    Ok((lo, hi))
}

/// Inclusive ranges, merged.
fn merged(ranges: impl IntoIterator<Item = Range>) -> Vec<Range> {
    let mut out = vec![];
    for (lo, hi) in ranges {
        if hi >= lo {
            add_range(&mut out, (lo, hi));
        }
    }
    out
}

/// An identifier, quoted.
fn q(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A point in time as a literal of `ty`, exact for every microsecond Arrow holds (a
/// text literal would be parsed through nanoseconds, which end in 2262). A date is
/// the day holding `micros`, or with `up` the first day at or after it.
fn time_literal(ty: &SqlType, micros: i64, up: bool) -> String {
    match ty {
        SqlType::Date => {
            const DAY: i64 = 86_400_000_000;
            let days = if up {
                micros.div_euclid(DAY) + i64::from(micros.rem_euclid(DAY) != 0)
            } else {
                micros.div_euclid(DAY)
            };
            format!("arrow_cast({days}, 'Date32')")
        }
        SqlType::Timestamp => format!("arrow_cast({micros}, 'Timestamp(Microsecond, None)')"),
        _ => format!("arrow_cast({micros}, 'Timestamp(Microsecond, Some(\"UTC\"))')"),
    }
}

/// The expression that is true where column `col` of `table` (of time type `ty`)
/// lies in one of `ranges` (inclusive), with typed literals.
fn ranges_expr(
    table: &str,
    col: &str,
    ty: &SqlType,
    ranges: &[Range],
) -> datafusion::logical_expr::Expr {
    use datafusion::logical_expr::{Expr as L, col as column, lit};
    const DAY: i64 = 86_400_000_000;
    let c = || column(datafusion::common::Column::new(Some(table), col));
    let value = |micros: i64, up: bool| -> ScalarValue {
        match ty {
            SqlType::Date => {
                let days = micros.div_euclid(DAY) + i64::from(up && micros.rem_euclid(DAY) != 0);
                ScalarValue::Date32(Some(
                    days.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
                ))
            }
            SqlType::Timestamp => ScalarValue::TimestampMicrosecond(Some(micros), None),
            _ => ScalarValue::TimestampMicrosecond(Some(micros), Some("UTC".into())),
        }
    };
    let mut any: Option<L> = None;
    for &(lo, hi) in ranges {
        let mut part = lit(true);
        if lo != i64::MIN {
            part = part.and(c().gt_eq(lit(value(lo, true))));
        }
        if hi != i64::MAX {
            part = part.and(c().lt_eq(lit(value(hi, false))));
        }
        any = Some(match any {
            None => part,
            Some(a) => a.or(part),
        });
    }
    any.unwrap_or_else(|| lit(false))
}

/// SQL that is true where `col` (of type `ty`) lies in one of `ranges` (inclusive).
fn in_ranges(col: &str, ty: &SqlType, ranges: &[Range]) -> Result<String> {
    if ranges.is_empty() {
        return Ok("false".into());
    }
    let col = q(col);
    let mut parts = vec![];
    for &(lo, hi) in ranges {
        let mut c = vec![];
        if lo != i64::MIN {
            c.push(format!("{col} >= {}", time_literal(ty, lo, true)));
        }
        if hi != i64::MAX {
            c.push(format!("{col} <= {}", time_literal(ty, hi, false)));
        }
        parts.push(if c.is_empty() {
            "true".to_string()
        } else {
            format!("({})", c.join(" AND "))
        });
    }
    Ok(format!("({})", parts.join(" OR ")))
}

/// The defining query with `extra` ANDed into its WHERE and, for a hierarchical
/// aggregate being refreshed, the parent view replaced by its materialization.
fn restricted(sql: &str, extra: &str, replace: Option<(&str, &str)>) -> Result<String> {
    let mut q = viewdefs::parse_query(sql)?;
    let cond = viewdefs::parse_expr(extra)?;
    if let SetExpr::Select(sel) = q.body.as_mut() {
        sel.selection = Some(match sel.selection.take() {
            Some(w) => Expr::BinaryOp {
                left: Box::new(Expr::Nested(Box::new(w))),
                op: ast::BinaryOperator::And,
                right: Box::new(cond),
            },
            None => cond,
        });
        if let Some((from, to)) = replace {
            for f in sel.from.iter_mut() {
                if let TableFactor::Table { name, alias, .. } = &mut f.relation
                    && args::table_name(name).is_ok_and(|n| n == from)
                {
                    if alias.is_none() {
                        *alias = Some(ast::TableAlias {
                            name: ast::Ident::with_quote('"', from),
                            columns: vec![],
                            explicit: true,
                            at: None,
                        });
                    }
                    *name = ast::ObjectName::from(vec![ast::Ident::with_quote('"', to)]);
                }
            }
        }
    }
    Ok(q.to_string())
}

/// The newest bucket start materialized (TimescaleDB's watermark is the end of
/// that bucket); `None` when nothing is materialized.
fn newest_label(mat: &TableDef) -> Option<i64> {
    mat.files
        .iter()
        .filter(|f| f.rows > 0)
        .map(|f| crate::storage::file_time_range(mat, f).1)
        .max()
        .filter(|t| *t != i64::MAX)
}

/// Source time ranges of the rows still in memory (not yet in the catalog's logs).
fn in_memory(engine: &Engine, table_id: u64) -> Vec<Range> {
    let mut out = vec![];
    if let Some(v) = engine.view(table_id) {
        for (_, batches) in &v.mem {
            for b in batches {
                add_range(&mut out, (b.min_time, b.max_time));
            }
        }
    }
    out
}

/// Label ranges (bucket starts) of continuous aggregate `c` whose materialized rows
/// are not valid now: its log, its source's log and the source rows in memory
/// (`mem`, read before `m` was taken: a flush moves rows from memory into the log
/// in one step, so nothing falls between), everything past the newest
/// materialized bucket, and what a real-time parent does not hold materialized.
fn stale_labels(
    engine: &Engine,
    m: &Manifest,
    db: &str,
    mat: &TableDef,
    mem: &[Range],
) -> Result<Vec<Range>> {
    let c = cagg_of(mat)?;
    let d = m.database(db)?;
    let mut times = c.invalidations.clone();
    let source = d.tables.values().find(|t| t.id == c.source_id);
    if let Some(src) = source {
        for r in &src.invalidations {
            add_range(&mut times, *r);
        }
    }
    for r in mem {
        add_range(&mut times, *r);
    }
    // A real-time parent shows more than its materialization holds.
    if let Some(src) = source
        && src.cagg.as_ref().is_some_and(|pc| !pc.materialized_only)
    {
        for r in stale_labels(
            engine,
            m,
            db,
            src,
            &in_memory(engine, cagg_of(src)?.source_id),
        )? {
            add_range(&mut times, r);
        }
    }
    let mut labels = vec![];
    for r in times {
        add_range(&mut labels, labels_of(&c.bucket, r)?);
    }
    let past = newest_label(mat).map_or(i64::MIN, |t| t.saturating_add(1));
    add_range(&mut labels, (past, i64::MAX));
    Ok(labels)
}

/// The SQL a query of continuous aggregate view (materialization table `mat_id`)
/// reads: the materialization, and for a real-time aggregate the defining query
/// over the raw rows of every bucket not validly materialized.
pub fn view_sql(engine: &Engine, db: &str, mat_id: u64) -> Result<String> {
    // Memory first, then the catalog (see `stale_labels`).
    let source_id = engine
        .catalog()
        .snapshot()
        .database(db)?
        .tables
        .values()
        .find(|t| t.id == mat_id)
        .and_then(|t| t.cagg.as_ref().map(|c| c.source_id));
    let mem = source_id
        .map(|id| in_memory(engine, id))
        .unwrap_or_default();
    let m = engine.catalog().snapshot();
    let d = m.database(db)?;
    let mat = d
        .tables
        .values()
        .find(|t| t.id == mat_id)
        .ok_or_else(|| Error::UndefinedTable(format!("table id {mat_id}")))?;
    let c = cagg_of(mat)?;
    let cols: Vec<String> = mat.columns.iter().map(|c| q(&c.name)).collect();
    let from = format!("SELECT {} FROM {}", cols.join(", "), q(&mat.name));
    if c.materialized_only {
        return Ok(from);
    }
    let bucket_ty = mat
        .column(&c.bucket_column)
        .map(|c| c.sql_type.clone())
        .unwrap_or(SqlType::Timestamptz);
    let source_ty = d
        .tables
        .values()
        .find(|t| t.id == c.source_id)
        .and_then(|t| t.column(&c.source_time))
        .map(|c| c.sql_type.clone())
        .unwrap_or(SqlType::Timestamptz);
    let labels = stale_labels(engine, &m, db, mat, &mem)?;
    let mut times = vec![];
    for l in &labels {
        add_range(&mut times, instants_of(&c.bucket, *l)?);
    }
    let mat_part = format!(
        "{from} WHERE NOT {}",
        in_ranges(&c.bucket_column, &bucket_ty, &labels)?
    );
    let raw_part = restricted(
        &c.sql,
        &in_ranges(&c.source_time, &source_ty, &times)?,
        None,
    )?;
    Ok(format!(
        "{mat_part} UNION ALL SELECT * FROM ({raw_part}) AS _sundial_raw"
    ))
}

/// What one refresh did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Refreshed {
    /// Buckets recomputed (for a fixed bucket width; ranges otherwise).
    pub buckets: u64,
    pub rows: u64,
}

/// Re-materializes the buckets of continuous aggregate `view` that lie wholly in
/// `[start, end)` (open ends: everything) and were invalidated since they were
/// last materialized (all of them with `force`).
pub async fn refresh(
    s: &Session,
    view: &str,
    start: Option<i64>,
    end: Option<i64>,
    force: bool,
) -> Result<Refreshed> {
    let done = match refresh_window(s, view, start, end, force).await {
        // A compaction of the materialization replaced files meanwhile: once more.
        Err(Error::Catalog(m)) if m.contains("concurrently") => {
            refresh_window(s, view, start, end, force).await?
        }
        other => other?,
    };
    s.engine
        .shared::<crate::engine::jobs::CaggRefreshes>()
        .record(&s.db, view, done.buckets, done.rows);
    Ok(done)
}

async fn refresh_window(
    s: &Session,
    view: &str,
    start: Option<i64>,
    end: Option<i64>,
    force: bool,
) -> Result<Refreshed> {
    let engine = &s.engine;
    let lock = engine.shared::<RefreshLock>();
    let _one = lock.0.lock().await;
    let m = engine.catalog().snapshot();
    let mat = cagg_table(&m, &s.db, view)?;
    let c = cagg_of(&mat)?.clone();
    let b = &c.bucket;
    // Only buckets wholly inside the window.
    let (lo, hi) = aligned_window(b, start, end)?;
    if lo >= hi {
        return Ok(Refreshed::default());
    }
    // Rows in memory reach the source's log through a flush; then the log is
    // handed to the aggregates over the source.
    engine.flush().await?;
    engine.catalog().move_invalidations(c.source_id)?;
    let m = engine.catalog().snapshot();
    let mat = cagg_table(&m, &s.db, view)?;
    let c = cagg_of(&mat)?.clone();
    // Labels of whole buckets inside the window (inclusive).
    let window = (lo, if hi == i64::MAX { hi } else { hi - 1 });
    let mut wanted = vec![];
    if force {
        wanted.push(window);
    } else {
        // Dropped chunks too: a refresh over them removes their buckets.
        for r in c.invalidations.iter().chain(&c.dropped) {
            let l = labels_of(b, *r)?;
            wanted.extend(intersect(&[l], window));
        }
    }
    // Open ends stop at the data: what the source holds and what is materialized
    // (buckets whose rows were deleted must go too).
    let source = m
        .database(&s.db)?
        .tables
        .values()
        .find(|t| t.id == c.source_id)
        .cloned()
        .ok_or_else(|| Error::UndefinedTable(format!("table id {}", c.source_id)))?;
    let mut data: Vec<Range> = vec![];
    for f in source.files.iter().filter(|f| f.rows > 0) {
        let r = crate::storage::file_time_range(&source, f);
        add_range(&mut data, labels_of(b, r)?);
    }
    for r in in_memory(engine, source.id) {
        add_range(&mut data, labels_of(b, r)?);
    }
    for f in mat.files.iter().filter(|f| f.rows > 0) {
        add_range(&mut data, crate::storage::file_time_range(&mat, f));
    }
    // Only where there is (or was) data: the ranges of the files, not their span.
    let labels = merged(wanted.iter().flat_map(|r| intersect(&data, *r)));
    if labels.is_empty() {
        return Ok(Refreshed::default());
    }
    // One materialization chunk at a time: memory stays bounded by a chunk's
    // buckets, and each step rewrites one chunk's files (TimescaleDB batches its
    // refreshes too). Each step is atomic; an interrupted refresh leaves the rest
    // of its ranges in the log for the next one.
    let iv = mat.chunk_interval_micros.unwrap_or(i64::MAX).max(1);
    let mut pieces: std::collections::BTreeMap<i64, Vec<Range>> = Default::default();
    for &(a, z) in &labels {
        // A file without statistics leaves a range open: one step for it.
        if a == i64::MIN || z == i64::MAX {
            pieces.entry(a.div_euclid(iv)).or_default().push((a, z));
            continue;
        }
        let mut lo = a;
        loop {
            let chunk = lo.div_euclid(iv);
            let end = chunk.saturating_add(1).saturating_mul(iv).saturating_sub(1);
            let hi = z.min(end);
            pieces.entry(chunk).or_default().push((lo, hi));
            if hi >= z {
                break;
            }
            lo = hi + 1;
        }
    }
    let mut done = Refreshed::default();
    for labels in pieces.into_values() {
        let step = refresh_piece(s, view, &source, &labels).await?;
        done.buckets += step.buckets;
        done.rows += step.rows;
    }
    tracing::info!(
        view,
        buckets = done.buckets,
        rows = done.rows,
        "refreshed continuous aggregate"
    );
    Ok(done)
}

/// Re-materializes the buckets starting within `labels` (inclusive label ranges)
/// from `source`, in one catalog step.
async fn refresh_piece(
    s: &Session,
    view: &str,
    source: &TableDef,
    labels: &[Range],
) -> Result<Refreshed> {
    let engine = &s.engine;
    let m = engine.catalog().snapshot();
    let mat = cagg_table(&m, &s.db, view)?;
    let c = cagg_of(&mat)?.clone();
    let b = &c.bucket;
    // The instants whose buckets these are: what is recomputed, and what leaves the
    // aggregate's log.
    let mut ranges = vec![];
    for l in labels {
        add_range(&mut ranges, instants_of(b, *l)?);
    }
    let source_ty = source
        .column(&c.source_time)
        .map(|c| c.sql_type.clone())
        .unwrap_or(SqlType::Timestamptz);
    let replace = c.parent.as_deref().map(|p| (p, source.name.as_str()));
    let sql = restricted(
        &c.sql,
        &in_ranges(&c.source_time, &source_ty, &ranges)?,
        replace,
    )?;
    let state = s.ctx.state();
    let plan = viewdefs::plan_view(
        &state,
        viewdefs::parse_query(&sql)?,
        &mat.columns
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>(),
    )
    .await?;
    let batches: Vec<arrow::array::RecordBatch> = s
        .ctx
        .execute_logical_plan(plan)
        .await?
        .execute_stream()
        .await?
        .try_collect()
        .await?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    // Out with the old buckets of these ranges, in with the new, in one step.
    let bucket_ty = mat
        .column(&c.bucket_column)
        .map(|c| c.sql_type.clone())
        .unwrap_or(SqlType::Timestamptz);
    let df_schema = crate::query::staged::qualified_schema(&mat)?;
    let logical = ranges_expr(&mat.name, &c.bucket_column, &bucket_ty, labels);
    let pred = state.create_physical_expr(logical.clone(), &df_schema)?;
    let files = crate::query::provider::files_to_delete_from(&state, &mat, &logical, &pred)?;
    let mut buckets = 0u64;
    for &(a, z) in labels {
        buckets += match b.fixed_width() {
            Some(w) if w > 0 => {
                let first = first_instant(b, a)?;
                if z < first {
                    0
                } else {
                    (z.saturating_sub(first) / w).saturating_add(1) as u64
                }
            }
            _ => 1,
        };
    }
    engine
        .commit_changes(
            &s.db,
            vec![TableChange {
                table: mat.clone(),
                pred: Some(pred),
                files,
                inserts: batches,
                refreshed: ranges,
                expect_removed: None,
            }],
        )
        .await?;
    Ok(Refreshed { buckets, rows })
}

/// Serializes refreshes (a manual call and a policy may meet).
#[derive(Default)]
struct RefreshLock(tokio::sync::Mutex<()>);

/// The definition a materialization table carries.
fn cagg_of(mat: &TableDef) -> Result<&CaggDef> {
    mat.cagg
        .as_deref()
        .ok_or_else(|| Error::Internal(format!("{} is not a materialization", mat.name)))
}

/// The materialization table of continuous aggregate `view`: 42P01 when absent,
/// `code` when `view` is another relation (TimescaleDB answers 22023 in a refresh,
/// 0A000 in the policy functions).
fn cagg_table_or(m: &Manifest, db: &str, view: &str, code: &'static str) -> Result<Arc<TableDef>> {
    let d = m.database(db)?;
    let not = || {
        Error::sql(
            code,
            format!("relation \"{view}\" is not a continuous aggregate"),
        )
    };
    let Some(v) = d.views.get(view) else {
        if d.tables.contains_key(view) {
            return Err(not());
        }
        return Err(Error::UndefinedTable(view.to_string()));
    };
    let id = v.cagg.ok_or_else(not)?;
    d.tables
        .values()
        .find(|t| t.id == id && t.cagg.is_some())
        .cloned()
        .ok_or_else(|| Error::UndefinedTable(view.to_string()))
}

/// [`cagg_table_or`] with PostgreSQL's 42809 (wrong kind of object).
fn cagg_table(m: &Manifest, db: &str, view: &str) -> Result<Arc<TableDef>> {
    cagg_table_or(m, db, view, "42809")
}

/// The whole buckets inside `[start, end)` (open ends unbounded), as `[lo, hi)`.
fn aligned_window(b: &BucketDef, start: Option<i64>, end: Option<i64>) -> Result<(i64, i64)> {
    let lo = match start {
        None => i64::MIN,
        Some(t) => {
            let bs = bucket_start(b, t)?;
            if bs == t { t } else { bucket_end(b, bs)? }
        }
    };
    let hi = match end {
        None => i64::MAX,
        Some(t) => bucket_start(b, t)?,
    };
    Ok((lo, hi))
}

/// A refresh window bound: NULL is open; a timestamp, date or timestamp text.
async fn window_bound(s: &Session, e: Option<&Expr>) -> Result<Option<i64>> {
    let Some(e) = e else { return Ok(None) };
    let v = s.scalar(e).await?;
    if v.is_null() {
        return Ok(None);
    }
    let tstz = arrow::datatypes::DataType::Timestamp(
        arrow::datatypes::TimeUnit::Microsecond,
        Some("UTC".into()),
    );
    let dt = v.data_type();
    let ok = matches!(
        dt,
        arrow::datatypes::DataType::Timestamp(..)
            | arrow::datatypes::DataType::Date32
            | arrow::datatypes::DataType::Utf8
            | arrow::datatypes::DataType::Utf8View
    );
    let text = match &v {
        ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t)) => {
            let mut t = t.clone();
            crate::interval::complete_seconds(&mut t);
            Some(t)
        }
        _ => None,
    };
    let v = match text {
        Some(t) => ScalarValue::Utf8(Some(t)),
        None => v,
    };
    match (ok, v.cast_to(&tstz)) {
        (true, Ok(ScalarValue::TimestampMicrosecond(Some(t), _))) => Ok(Some(t)),
        _ => Err(Error::sql(
            "22023",
            format!("invalid time argument type \"{dt}\": use a timestamptz, timestamp or date"),
        )),
    }
}

/// `CALL refresh_continuous_aggregate(view, window_start, window_end [, force])`.
pub async fn call_refresh(s: &Session, f: &ast::Function) -> Result<Output> {
    if s.staging.in_block() {
        return Err(Error::sql(
            "25001",
            "refresh_continuous_aggregate() cannot run inside a transaction block",
        ));
    }
    let list = match &f.args {
        FunctionArguments::List(l) => l.args.clone(),
        _ => vec![],
    };
    let vals = named_args(
        REFRESH,
        &list,
        &[
            "continuous_aggregate",
            "window_start",
            "window_end",
            "force",
            "options",
        ],
    )?;
    let view = vals[0]
        .as_ref()
        .ok_or_else(|| {
            Error::sql(
                "42883",
                "refresh_continuous_aggregate needs a continuous aggregate",
            )
        })
        .and_then(args::regclass_name)?;
    if vals[1].is_none() || vals[2].is_none() {
        return Err(Error::sql(
            "42883",
            "procedure refresh_continuous_aggregate(unknown) does not exist: give window_start and window_end (NULL for open)",
        ));
    }
    let start = window_bound(s, vals[1].as_ref()).await?;
    let end = window_bound(s, vals[2].as_ref()).await?;
    let force = match &vals[3] {
        Some(e) => args::truthy(&args::literal_text(e).unwrap_or_else(|| e.to_string())),
        None => false,
    };
    let mat = cagg_table_or(&s.engine.catalog().snapshot(), &s.db, &view, "22023")?;
    let (lo, hi) = aligned_window(&cagg_of(&mat)?.bucket, start, end)?;
    if lo >= hi {
        return Err(Error::sql(
            "22023",
            "refresh window too small: the refresh window must cover at least one bucket \
             of data (align it with the buckets or cover at least two)",
        ));
    }
    refresh(s, &view, start, end, force).await?;
    Ok(Output::Command("CALL".into()))
}

/// `DROP MATERIALIZED VIEW [IF EXISTS] name, … [CASCADE]`.
pub fn drop(
    s: &Session,
    names: &[ast::ObjectName],
    if_exists: bool,
    cascade: bool,
) -> Result<Output> {
    for n in names {
        let name = args::table_name(n)?;
        let m = s.engine.catalog().snapshot();
        let d = m.database(&s.db)?;
        match d.views.get(&name) {
            None if if_exists && !d.tables.contains_key(&name) => continue,
            Some(v) if v.cagg.is_some() => {}
            None if !d.tables.contains_key(&name) => {
                return Err(Error::sql(
                    "42P01",
                    format!("materialized view \"{name}\" does not exist"),
                ));
            }
            _ => {
                return Err(Error::sql(
                    "42809",
                    format!("\"{name}\" is not a materialized view; use DROP VIEW or DROP TABLE"),
                ));
            }
        }
        viewdefs::release(s, &name, "materialized view", cascade)?;
        s.engine.drop_cagg(&s.db, &name)?;
    }
    Ok(Output::Command("DROP MATERIALIZED VIEW".into()))
}

/// `ALTER MATERIALIZED VIEW name SET (timescaledb.materialized_only = …)`.
pub fn alter(s: &Session, name: &str, opts: &[SqlOption]) -> Result<Output> {
    cagg_table(&s.engine.catalog().snapshot(), &s.db, name)?;
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            continue;
        };
        let k = key.value.to_ascii_lowercase();
        if k == super::prepass::MATVIEW_MARK {
            continue;
        }
        let v = args::literal_text(value).unwrap_or_else(|| value.to_string());
        let short = k
            .strip_prefix("timescaledb.")
            .or_else(|| k.strip_prefix("tsdb."))
            .unwrap_or(&k);
        match short {
            "materialized_only" => {
                s.engine
                    .catalog()
                    .set_materialized_only(&s.db, name, args::truthy(&v))?
            }
            "compress"
            | "enable_columnstore"
            | "columnstore"
            | "compress_segmentby"
            | "compress_orderby"
            | "segmentby"
            | "orderby"
            | "compress_chunk_time_interval" => {}
            _ => {
                return Err(Error::sql(
                    "22023",
                    format!("unrecognized parameter \"{k}\""),
                ));
            }
        }
    }
    Ok(Output::Command("ALTER MATERIALIZED VIEW".into()))
}

/// An interval argument (`'1 hour'`, `INTERVAL '1 day'`): µs (months as 30 days,
/// as TimescaleDB counts them) and PostgreSQL's text of it; `None` for NULL.
async fn interval_arg(s: &Session, e: &Expr) -> Result<Option<(i64, String)>> {
    let as_interval = Expr::Cast {
        kind: ast::CastKind::DoubleColon,
        expr: Box::new(e.clone()),
        data_type: ast::DataType::Interval {
            fields: None,
            precision: None,
        },
        array: false,
        format: None,
    };
    let v = s.scalar(&as_interval).await?;
    let ScalarValue::IntervalMonthDayNano(iv) = v else {
        return Err(Error::sql(
            "22023",
            format!("invalid interval argument {e}"),
        ));
    };
    let Some(iv) = iv else { return Ok(None) };
    let text = super::functions::pgtext::interval(iv.months, iv.days, iv.nanoseconds / 1000);
    let micros = (i64::from(iv.months) * 30 + i64::from(iv.days))
        .saturating_mul(86_400_000_000)
        .saturating_add(iv.nanoseconds / 1000);
    Ok(Some((micros, text)))
}

/// Arguments by position and name, in `names` order.
fn named_args(func: &str, list: &[FunctionArg], names: &[&str]) -> Result<Vec<Option<Expr>>> {
    let (pos, named) = args::split_args(list);
    if pos.len() > names.len() {
        return Err(Error::sql(
            "42883",
            format!(
                "function {func} with {} arguments does not exist",
                pos.len()
            ),
        ));
    }
    let mut vals: Vec<Option<Expr>> = pos.into_iter().map(Some).collect();
    vals.resize(names.len(), None);
    for (n, e) in named {
        let i = names.iter().position(|x| *x == n).ok_or_else(|| {
            Error::sql(
                "42883",
                format!("function {func} has no parameter named \"{n}\""),
            )
        })?;
        vals[i] = Some(e);
    }
    Ok(vals)
}

fn flag(e: Option<&Expr>) -> bool {
    e.and_then(args::literal_text)
        .or_else(|| e.map(|e| e.to_string()))
        .is_some_and(|v| args::truthy(&v))
}

/// `add_continuous_aggregate_policy(view, start_offset, end_offset,
/// schedule_interval [, if_not_exists …])`: returns the job id.
pub async fn add_policy(s: &Session, list: &[FunctionArg]) -> Result<i64> {
    const FUNC: &str = "add_continuous_aggregate_policy";
    let a = named_args(FUNC, list, super::signatures::params(FUNC))?;
    let view = a[0]
        .as_ref()
        .ok_or_else(|| Error::sql("42883", format!("{FUNC} needs a continuous aggregate")))
        .and_then(args::regclass_name)?;
    let mat = cagg_table_or(&s.engine.catalog().snapshot(), &s.db, &view, "0A000")?;
    let c = cagg_of(&mat)?.clone();
    let (Some(start_e), Some(end_e), Some(sched_e)) = (&a[1], &a[2], &a[3]) else {
        return Err(Error::sql(
            "42883",
            format!(
                "function {FUNC} needs start_offset, end_offset and schedule_interval \
                 (NULL offsets are open)"
            ),
        ));
    };
    let start = interval_arg(s, start_e).await?;
    let end = interval_arg(s, end_e).await?;
    let sched = interval_arg(s, sched_e)
        .await?
        .ok_or_else(|| Error::sql("22023", "schedule_interval must not be NULL"))?;
    if sched.0 <= 0 {
        return Err(Error::sql("22023", "schedule_interval must be positive"));
    }
    // TimescaleDB: the window covers at least two buckets.
    if let (Some((st, _)), Some((en, _))) = (&start, &end) {
        let width = (i64::from(c.bucket.months) * 30 + i64::from(c.bucket.days))
            .saturating_mul(86_400_000_000)
            .saturating_add(c.bucket.micros);
        if st.saturating_sub(*en) < width.saturating_mul(2) {
            return Err(Error::sql(
                "22023",
                "policy refresh window too small: the start and end offsets must cover at \
                 least two buckets",
            ));
        }
    }
    let policy = RefreshPolicy {
        job_id: 0,
        start_offset: start.as_ref().map(|x| x.0),
        end_offset: end.as_ref().map(|x| x.0),
        schedule_interval_micros: sched.0,
        start_offset_text: start.map(|x| x.1),
        end_offset_text: end.map(|x| x.1),
        initial_start_micros: super::schedule::job_start(s, a[5].as_ref(), a[6].as_ref()).await?,
    };
    match s
        .engine
        .catalog()
        .set_cagg_policy(&s.db, &view, Some(policy.clone()))?
    {
        Ok(Some(p)) => {
            s.engine
                .jobs()
                .schedule_from(p.job_id, p.initial_start_micros);
            Ok(p.job_id)
        }
        Ok(None) => Err(Error::Internal("policy not set".into())),
        // TimescaleDB: skipped with a notice, and -1 for the job id.
        Err(_) if flag(a[4].as_ref()) => {
            tracing::info!(
                view,
                "continuous aggregate refresh policy already exists, skipping"
            );
            Ok(-1)
        }
        Err(_) => Err(Error::sql(
            "22023",
            format!("continuous aggregate refresh policy already exists for \"{view}\""),
        )),
    }
}

/// `remove_continuous_aggregate_policy(view [, if_not_exists] [, if_exists])`.
pub fn remove_policy(s: &Session, list: &[FunctionArg]) -> Result<()> {
    const FUNC: &str = "remove_continuous_aggregate_policy";
    let a = named_args(
        FUNC,
        list,
        &["continuous_aggregate", "if_not_exists", "if_exists"],
    )?;
    let view = a[0]
        .as_ref()
        .ok_or_else(|| Error::sql("42883", format!("{FUNC} needs a continuous aggregate")))
        .and_then(args::regclass_name)?;
    let if_exists = flag(a[1].as_ref()) || flag(a[2].as_ref());
    match s.engine.catalog().set_cagg_policy(&s.db, &view, None)? {
        Ok(Some(_)) => Ok(()),
        _ if if_exists => Ok(()),
        _ => Err(Error::sql(
            "42704",
            format!("continuous aggregate policy not found for \"{view}\""),
        )),
    }
}

/// Runs the refresh policy of continuous aggregate `view` once: the window
/// `[now - start_offset, now - end_offset)`, recording the run for `job_stats`.
pub async fn run_policy(s: &Session, view: &str, p: &RefreshPolicy) -> Result<()> {
    let now = chrono::Utc::now().timestamp_micros();
    let start = p.start_offset.map(|o| now.saturating_sub(o));
    let end = p.end_offset.map(|o| now.saturating_sub(o));
    let r = refresh(s, view, start, end, false).await;
    s.engine.jobs().finished(p.job_id, r.is_ok(), 0);
    r.map(|_| ())
}

/// Starts the background runner of refresh policies: each policy runs when added
/// (and at start-up), then every `schedule_interval`.
pub fn start_policies(engine: &Arc<Engine>) {
    let e = engine.clone();
    engine.spawn_background(async move {
        let mut sessions: std::collections::HashMap<String, Session> = Default::default();
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let m = e.catalog().snapshot();
            for (db, d) in &m.databases {
                for t in d.tables.values() {
                    let Some((view, p)) = t
                        .cagg
                        .as_ref()
                        .and_then(|c| c.policy.as_ref().map(|p| (c.view.clone(), p.clone())))
                    else {
                        continue;
                    };
                    if !e.jobs()
                        .due(p.job_id, p.schedule_interval_micros, p.initial_start_micros) {
                        continue;
                    }
                    if !sessions.contains_key(db) {
                        match Session::new(e.clone(), db, &e.config().superuser, 0) {
                            Ok(s) => {
                                sessions.insert(db.clone(), s);
                            }
                            Err(err) => {
                                tracing::error!(db, error = %err, "no session for refresh policies");
                                e.jobs().finished(p.job_id, false, 0);
                                continue;
                            }
                        }
                    }
                    let Some(s) = sessions.get(db) else { continue };
                    if let Err(err) = run_policy(s, &view, &p).await {
                        tracing::error!(job = p.job_id, view, error = %err, "refresh policy failed");
                    }
                }
            }
        }
    });
}
