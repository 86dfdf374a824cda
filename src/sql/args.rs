//! Reading pieces of parsed statements the way PostgreSQL does: object names
//! (folded, `public.` accepted), literal text of arguments, truth values, intervals,
//! and function arguments by position and by name (`name => value`); bound `$n`
//! values put into statements Sundial runs itself.

use arrow::datatypes::DataType;
use datafusion::sql::sqlparser::ast::{self, Expr, FunctionArg, FunctionArgExpr, Value};

use crate::error::{Error, Result};
use crate::interval;

/// Last part of an object name, as PostgreSQL folds it (unquoted → lower case).
pub fn ident_name(n: &ast::ObjectName) -> Result<String> {
    let part =
        n.0.last()
            .ok_or_else(|| Error::Parse("empty name".into()))?;
    let ident = part
        .as_ident()
        .ok_or_else(|| Error::Parse(format!("invalid name {n}")))?;
    Ok(fold(ident))
}

pub fn fold(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

/// Table name; `public.t` and `t` are the same table.
pub fn table_name(n: &ast::ObjectName) -> Result<String> {
    if n.0.len() > 1 {
        let schema = n.0[n.0.len() - 2].as_ident().map(fold).unwrap_or_default();
        if schema != "public" {
            return Err(Error::sql(
                "3F000",
                format!("schema \"{schema}\" does not exist"),
            ));
        }
    }
    ident_name(n)
}

pub fn literal_text(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.clone()),
            Value::Boolean(b) => Some(b.to_string()),
            _ => None,
        },
        Expr::Identifier(i) => Some(i.value.clone()),
        Expr::Interval(iv) => literal_text(&iv.value).map(|v| match &iv.leading_field {
            Some(f) => format!("{v} {f}"),
            None => v,
        }),
        Expr::Cast { expr, .. } => literal_text(expr),
        Expr::Nested(e) => literal_text(e),
        _ => None,
    }
}

pub fn truthy(s: &str) -> bool {
    matches!(
        s.to_ascii_lowercase().as_str(),
        "true" | "on" | "t" | "1" | "yes"
    )
}

pub fn parse_chunk_interval(text: &str) -> Result<i64> {
    let micros = interval::parse_interval_micros(text).map_err(|e| Error::sql("22007", e))?;
    if micros <= 0 {
        return Err(Error::sql(
            "22023",
            "chunk interval must be greater than zero",
        ));
    }
    Ok(micros)
}

/// Splits function arguments into positional and named (`name => value`) ones.
pub fn split_args(args: &[FunctionArg]) -> (Vec<Expr>, Vec<(String, Expr)>) {
    let mut pos = vec![];
    let mut named = vec![];
    for a in args {
        match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => pos.push(e.clone()),
            FunctionArg::Named {
                name,
                arg: FunctionArgExpr::Expr(e),
                ..
            } => named.push((name.value.to_ascii_lowercase(), e.clone())),
            FunctionArg::ExprNamed {
                name,
                arg: FunctionArgExpr::Expr(e),
                ..
            } => named.push((name.to_string().to_ascii_lowercase(), e.clone())),
            _ => {}
        }
    }
    (pos, named)
}

pub fn regclass_name(e: &Expr) -> Result<String> {
    let text = literal_text(e).ok_or_else(|| {
        Error::sql(
            "42883",
            "the first argument must name a table, e.g. 'conditions'",
        )
    })?;
    let last = text.rsplit('.').next().unwrap_or(&text);
    Ok(if last.starts_with('"') {
        last.trim_matches('"').to_string()
    } else {
        last.to_ascii_lowercase()
    })
}

/// Number of `$n` parameters statement `stmt` uses (the highest `n`).
pub fn placeholder_count(stmt: &ast::Statement) -> usize {
    use ast::Visit;
    let mut n = 0usize;
    let _ = stmt.visit(&mut Placeholders(|p: &str| {
        if let Some(i) = p.strip_prefix('$').and_then(|d| d.parse::<usize>().ok()) {
            n = n.max(i);
        }
    }));
    n
}

/// Whether `node` has a `$n` parameter in it.
pub fn has_placeholder<T: ast::Visit>(node: &T) -> bool {
    let mut found = false;
    let _ = node.visit(&mut Placeholders(|_: &str| found = true));
    found
}

struct Placeholders<F>(F);

impl<F: FnMut(&str)> ast::Visitor for Placeholders<F> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &ast::Expr) -> std::ops::ControlFlow<()> {
        if let ast::Expr::Value(v) = e
            && let ast::Value::Placeholder(p) = &v.value
        {
            (self.0)(p);
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// A value as the literal PostgreSQL would read for it (strings quoted, so they take
/// the type of what they meet; times as ISO text cast to their type; intervals in
/// units every interval reader takes).
pub fn value_literal(v: &datafusion::common::ScalarValue) -> ast::Expr {
    use datafusion::common::ScalarValue;
    match v {
        _ if v.is_null() => ast::Expr::value(ast::Value::Null),
        ScalarValue::Boolean(Some(b)) => ast::Expr::value(ast::Value::Boolean(*b)),
        ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::UInt8(_)
        | ScalarValue::UInt16(_)
        | ScalarValue::UInt32(_)
        | ScalarValue::UInt64(_)
        | ScalarValue::Float32(_)
        | ScalarValue::Float64(_)
        | ScalarValue::Decimal128(..)
        | ScalarValue::Decimal256(..)
            if v.to_string().parse::<f64>().is_ok_and(f64::is_finite) =>
        {
            let mut text = v.to_string();
            if matches!(v, ScalarValue::Decimal256(..)) && text.contains('.') {
                // A numeric without typmod carries 38 fraction digits; the
                // value's own are enough (and keep the literal 128-bit).
                text = text.trim_end_matches('0').trim_end_matches('.').to_string();
            }
            let num = ast::Expr::value(ast::Value::Number(
                text.trim_start_matches('-').to_string(),
                false,
            ));
            if text.starts_with('-') {
                ast::Expr::UnaryOp {
                    op: ast::UnaryOperator::Minus,
                    expr: Box::new(num),
                }
            } else {
                num
            }
        }
        // Times as text PostgreSQL reads back (ISO 8601), not raw ticks, cast to
        // the parameter's type: a typed parameter keeps its type, as in
        // PostgreSQL (`generate_series($1, $2, '1 hour')` over timestamptz).
        ScalarValue::TimestampSecond(..)
        | ScalarValue::TimestampMillisecond(..)
        | ScalarValue::TimestampMicrosecond(..)
        | ScalarValue::TimestampNanosecond(..)
        | ScalarValue::Date32(_)
        | ScalarValue::Date64(_)
        | ScalarValue::Time64Microsecond(_)
        | ScalarValue::Time64Nanosecond(_) => {
            let text = v
                .to_array()
                .ok()
                .and_then(|a| arrow::util::display::array_value_to_string(&a, 0).ok())
                .unwrap_or_else(|| v.to_string());
            let ty = match v.data_type() {
                DataType::Timestamp(_, Some(_)) => {
                    ast::DataType::Timestamp(None, ast::TimezoneInfo::WithTimeZone)
                }
                DataType::Timestamp(_, None) => {
                    ast::DataType::Timestamp(None, ast::TimezoneInfo::None)
                }
                DataType::Date32 | DataType::Date64 => ast::DataType::Date,
                _ => ast::DataType::Time(None, ast::TimezoneInfo::None),
            };
            cast(ast::Expr::value(ast::Value::SingleQuotedString(text)), ty)
        }
        // fields as units every interval reader takes, exactly
        ScalarValue::IntervalMonthDayNano(Some(i)) => cast(
            ast::Expr::value(ast::Value::SingleQuotedString(format!(
                "{} months {} days {} microseconds",
                i.months,
                i.days,
                i.nanoseconds / 1000
            ))),
            ast::DataType::Interval {
                fields: None,
                precision: None,
            },
        ),
        other => ast::Expr::value(ast::Value::SingleQuotedString(other.to_string())),
    }
}

/// Puts bound parameter values into a statement Sundial runs itself, as the
/// literals PostgreSQL would read for them (strings quoted, so they take the type
/// of what they meet, as an untyped parameter does).
pub fn bind_placeholders(
    stmt: &ast::Statement,
    params: &datafusion::common::ParamValues,
) -> Result<ast::Statement> {
    use ast::VisitMut;
    let datafusion::common::ParamValues::List(list) = params else {
        return Err(Error::sql(
            "08P01",
            "named parameters are not supported here",
        ));
    };
    let mut out = stmt.clone();
    let mut missing = None;
    let _ = out.visit(&mut BindValues(|p: &str| -> Option<ast::Expr> {
        let i: usize = p.strip_prefix('$')?.parse().ok()?;
        let Some(v) = list.get(i.checked_sub(1)?) else {
            missing = Some(i);
            return None;
        };
        Some(value_literal(&v.value))
    }));
    if let Some(i) = missing {
        return Err(Error::sql("08P01", format!("there is no parameter ${i}")));
    }
    Ok(out)
}

/// `e::data_type`.
pub(crate) fn cast(e: ast::Expr, data_type: ast::DataType) -> ast::Expr {
    ast::Expr::Cast {
        kind: ast::CastKind::DoubleColon,
        expr: Box::new(e),
        data_type,
        array: false,
        format: None,
    }
}

struct BindValues<F>(F);

impl<F: FnMut(&str) -> Option<ast::Expr>> ast::VisitorMut for BindValues<F> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut ast::Expr) -> std::ops::ControlFlow<()> {
        if let ast::Expr::Value(v) = e
            && let ast::Value::Placeholder(p) = &v.value
            && let Some(new) = (self.0)(p)
        {
            *e = new;
        }
        std::ops::ControlFlow::Continue(())
    }
}
