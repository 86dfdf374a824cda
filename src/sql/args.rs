//! Reading pieces of parsed statements the way PostgreSQL does: object names
//! (folded, `public.` accepted), literal text of arguments, truth values, intervals,
//! and function arguments by position and by name (`name => value`).

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
