//! AST rewrites for the SQL that PostgreSQL clients send to read the catalogs:
//! `pg_catalog.`-qualified names, `OPERATOR(pg_catalog.~)`, `COLLATE`, `::regclass`
//! style casts, functions in `FROM`, and `ARRAY(subquery)`.

use datafusion::sql::sqlparser::ast::{
    self, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName,
    SelectItem, SetExpr, TableAlias, TableAliasColumnDef, TableFactor,
};

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{EMPTY_RELS, PG_CATALOG_RELS};

fn ident_eq(i: &Ident, name: &str) -> bool {
    if i.quote_style.is_some() {
        i.value == name
    } else {
        i.value.eq_ignore_ascii_case(name)
    }
}

fn name_parts(n: &ObjectName) -> Vec<&Ident> {
    n.0.iter().filter_map(|p| p.as_ident()).collect()
}

/// Drops a leading `pg_catalog.` from a function or type name.
fn strip_pg_catalog(n: &mut ObjectName) {
    if n.0.len() == 2 && n.0[0].as_ident().is_some_and(|i| ident_eq(i, "pg_catalog")) {
        n.0.remove(0);
    }
}

/// A plain call `name(args...)`.
pub(crate) fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(ast::Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn alias_with_column(alias: Option<TableAlias>, default: &str) -> TableAlias {
    let mut a = alias.unwrap_or_else(|| TableAlias {
        explicit: true,
        name: Ident::new(default),
        columns: vec![],
        at: None,
    });
    if a.columns.is_empty() {
        a.columns = vec![TableAliasColumnDef {
            name: a.name.clone(),
            data_type: None,
        }];
    }
    a
}

/// Table functions planned as tables when their arguments are constants
/// ([`crate::sql::functions::series`]).
const TABLE_FUNCTIONS: [&str; 2] = ["generate_series", "range"];

/// Rewrites a `FROM` item: unqualified catalog names get `pg_catalog.`, functions lose
/// their `pg_catalog.` qualifier, `unnest(x) a` becomes `UNNEST`, and a function that
/// is not a table function becomes a one-row derived table (PostgreSQL names the
/// column after the alias, as for `string_to_array(...) s`).
pub fn table_factor(tf: &mut TableFactor) {
    let TableFactor::Table {
        name, args, alias, ..
    } = tf
    else {
        return;
    };
    let Some(targs) = args else {
        if let [one] = name_parts(name).as_slice()
            && let Some(def) = PG_CATALOG_RELS.iter().find(|d| ident_eq(one, d.name))
        {
            *name = ObjectName::from(vec![Ident::new("pg_catalog"), Ident::new(def.name)]);
        }
        return;
    };
    strip_pg_catalog(name);
    let fname = match name_parts(name).as_slice() {
        [one] => one.value.to_ascii_lowercase(),
        _ => return,
    };
    let exprs: Option<Vec<Expr>> = targs
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let Some(exprs) = exprs else {
        return;
    };
    // Sundial's own table functions (chunk management) are planned as they are;
    // show_chunks returns a set of one scalar, whose column PostgreSQL names after
    // the table alias (`SELECT c FROM show_chunks('t') c`).
    if crate::sql::chunks::TABLE_FUNCTIONS.contains(&fname.as_str())
        || fname == "pg_partition_ancestors"
    {
        if fname == "show_chunks" && alias.is_some() {
            *alias = Some(alias_with_column(alias.take(), &fname));
        }
        return;
    }
    let constant_args = exprs.iter().all(is_constant_bound);
    // jsonb_each and its kin over a constant: planned as they are.
    if crate::sql::functions::json::TABLE_FUNCTIONS.contains(&fname.as_str()) && constant_args {
        return;
    }
    if fname == "unnest" {
        *tf = TableFactor::UNNEST {
            alias: Some(alias_with_column(alias.take(), "unnest")),
            array_exprs: exprs,
            with_offset: false,
            with_offset_alias: None,
            with_ordinality: false,
        };
        return;
    }
    if TABLE_FUNCTIONS.contains(&fname.as_str()) && constant_args {
        for a in targs.args.iter_mut() {
            if let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = a {
                complete_time_text(e);
            }
        }
        *alias = Some(alias_with_column(alias.take(), &fname));
        return;
    }
    // generate_series with bounds from columns or parameters, or a scalar function:
    // one derived table.
    let a = alias_with_column(alias.take(), &fname);
    let col = a.columns[0].name.clone();
    let mut exprs = exprs;
    if TABLE_FUNCTIONS.contains(&fname.as_str())
        && let [start, end, step] = exprs.as_mut_slice()
    {
        time_series_types(start, end, step);
    }
    let mut item = call(&fname, exprs);
    if TABLE_FUNCTIONS.contains(&fname.as_str()) {
        item = call("unnest", vec![item]);
    }
    let Some(subquery) = one_row_query(item, col) else {
        return;
    };
    *tf = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(subquery),
        alias: Some(TableAlias {
            columns: vec![],
            ..a
        }),
        sample: None,
    };
}

/// The series a rewritten `FROM` item unnests: `(SELECT unnest(generate_series(a, b))
/// AS c) AS t` gives the `generate_series(a, b)` call and the column name `c`.
fn unnested_series(tf: &TableFactor) -> Option<(&ast::Function, &Ident)> {
    let TableFactor::Derived { subquery, .. } = tf else {
        return None;
    };
    let SetExpr::Select(sel) = subquery.body.as_ref() else {
        return None;
    };
    let [
        SelectItem::ExprWithAlias {
            expr: Expr::Function(outer),
            alias,
        },
    ] = sel.projection.as_slice()
    else {
        return None;
    };
    let FunctionArguments::List(list) = &outer.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Function(inner)))] = list.args.as_slice()
    else {
        return None;
    };
    let name = inner.name.to_string().to_ascii_lowercase();
    (sel.from.is_empty()
        && outer.name.to_string().eq_ignore_ascii_case("unnest")
        && TABLE_FUNCTIONS.contains(&name.as_str()))
    .then_some((inner, alias))
}

/// Whether a series in `FROM` has a `$n` parameter among its bounds: it was planned
/// as a list unnested, built whole in memory when it runs.
pub fn series_over_parameters(stmt: &ast::Statement) -> bool {
    use ast::Visit;
    struct Finder;
    impl ast::Visitor for Finder {
        type Break = ();
        fn pre_visit_table_factor(&mut self, tf: &TableFactor) -> std::ops::ControlFlow<()> {
            match unnested_series(tf) {
                Some((f, _)) if crate::sql::args::has_placeholder(&f.args) => {
                    std::ops::ControlFlow::Break(())
                }
                _ => std::ops::ControlFlow::Continue(()),
            }
        }
    }
    stmt.visit(&mut Finder).is_break()
}

/// Once parameters are bound: a series in `FROM` whose bounds are now numeric
/// constants is the series table again, streamed rather than built as a list.
pub fn constant_series(stmt: &mut ast::Statement) {
    use ast::VisitMut;
    struct Back;
    impl ast::VisitorMut for Back {
        type Break = ();
        fn pre_visit_table_factor(&mut self, tf: &mut TableFactor) -> std::ops::ControlFlow<()> {
            if let Some(table) = series_table(tf) {
                *tf = table;
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Back);
}

/// The series table for an unnested series over numeric constants.
fn series_table(tf: &TableFactor) -> Option<TableFactor> {
    let (f, col) = unnested_series(tf)?;
    let TableFactor::Derived {
        alias: Some(alias), ..
    } = tf
    else {
        return None;
    };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    // A bound parameter arrives as text; bare (no cast) it has no type the series
    // could be chosen by, so it stays with the typed plan's list.
    let constant = list.args.iter().all(|a| {
        matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
            if is_constant_bound(e) && !is_bare_string(e))
    });
    if !constant {
        return None;
    }
    let alias = TableAlias {
        columns: vec![TableAliasColumnDef {
            name: col.clone(),
            data_type: None,
        }],
        ..alias.clone()
    };
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, &format!("SELECT * FROM {f}")).ok()?;
    let Some(ast::Statement::Query(q)) = stmts.pop() else {
        return None;
    };
    let SetExpr::Select(sel) = *q.body else {
        return None;
    };
    let mut table = sel.from.into_iter().next()?.relation;
    let TableFactor::Table { alias: slot, .. } = &mut table else {
        return None;
    };
    *slot = Some(alias);
    Some(table)
}

/// Whether `e` is a series bound the series table can fold when the query is
/// planned: numbers as [`is_numeric_constant`] takes them, and times built from
/// literals and the statement's clock (`'2024-01-01'::timestamptz`,
/// `now() - interval '1 day'`, `date_trunc('hour', now())`, `'1 hour'`). Columns,
/// parameters and subqueries go the general way (a list per row).
fn is_constant_bound(e: &Expr) -> bool {
    /// Functions of constants whose value is fixed for a statement.
    const CONSTANT_FUNCTIONS: [&str; 12] = [
        "now",
        "current_timestamp",
        "current_date",
        "localtimestamp",
        "transaction_timestamp",
        "date_trunc",
        "date_bin",
        "time_bucket",
        "to_timestamp",
        "make_date",
        "make_timestamp",
        "make_timestamptz",
    ];
    match e {
        Expr::Value(v) => matches!(
            v.value,
            ast::Value::Number(..) | ast::Value::Null | ast::Value::SingleQuotedString(_)
        ),
        Expr::TypedString(t) => is_time_type(&t.data_type),
        Expr::Interval(i) => is_constant_bound(&i.value),
        Expr::Nested(x) => is_constant_bound(x),
        Expr::UnaryOp { expr, .. } => is_constant_bound(expr),
        Expr::BinaryOp { left, op, right } => {
            matches!(op, ast::BinaryOperator::Plus | ast::BinaryOperator::Minus)
                && is_constant_bound(left)
                && is_constant_bound(right)
                || is_numeric_constant(e)
        }
        Expr::Cast {
            expr, data_type, ..
        } => is_time_type(data_type) && is_constant_bound(expr) || is_numeric_constant(e),
        Expr::AtTimeZone {
            timestamp,
            time_zone,
        } => is_constant_bound(timestamp) && is_constant_bound(time_zone),
        Expr::Function(f) => {
            let [name] = name_parts(&f.name)[..] else {
                return false;
            };
            let name = name.value.to_ascii_lowercase();
            let args_constant = match &f.args {
                FunctionArguments::None => true,
                FunctionArguments::List(list) => {
                    list.duplicate_treatment.is_none()
                        && list.clauses.is_empty()
                        && list.args.iter().all(|a| {
                            matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(x))
                                if is_constant_bound(x))
                        })
                }
                FunctionArguments::Subquery(_) => false,
            };
            CONSTANT_FUNCTIONS.contains(&name.as_str())
                && args_constant
                && f.filter.is_none()
                && f.over.is_none()
                && f.within_group.is_empty()
        }
        _ => is_numeric_constant(e),
    }
}

/// Time text as PostgreSQL takes it (`'2024-01-01 00:00'::timestamptz`) in a
/// series bound: DataFusion folds the table function's arguments itself, before the
/// analyzer rule that completes such text elsewhere.
fn complete_time_text(e: &mut Expr) {
    match e {
        Expr::Cast {
            expr, data_type, ..
        } => {
            let timestamp = matches!(data_type, DataType::Timestamp(..))
                || matches!(data_type, DataType::Custom(name, _)
                if name_parts(name).last().is_some_and(|n| {
                    n.value.eq_ignore_ascii_case("timestamptz")
                        || n.value.eq_ignore_ascii_case("timestamp")
                }));
            match expr.as_mut() {
                Expr::Value(v) if timestamp => {
                    if let ast::Value::SingleQuotedString(t) = &mut v.value {
                        crate::interval::complete_seconds(t);
                    }
                }
                inner => complete_time_text(inner),
            }
        }
        Expr::Nested(x) | Expr::UnaryOp { expr: x, .. } => complete_time_text(x),
        Expr::BinaryOp { left, right, .. } => {
            complete_time_text(left);
            complete_time_text(right);
        }
        _ => {}
    }
}

/// `timestamp`, `timestamptz`, `date` or `interval`, however spelled.
fn is_time_type(dt: &DataType) -> bool {
    match dt {
        DataType::Timestamp(..) | DataType::Date | DataType::Interval { .. } => true,
        DataType::Custom(name, mods) if mods.is_empty() => {
            name_parts(name).last().is_some_and(|n| {
                ["timestamptz", "timestamp", "date", "interval"]
                    .iter()
                    .any(|t| n.value.eq_ignore_ascii_case(t))
            })
        }
        _ => false,
    }
}

/// The types PostgreSQL gives a time series' untyped arguments when the bounds come
/// from columns or parameters: `generate_series($1::timestamptz, $2::timestamptz,
/// '1 hour')` has an interval step, and `generate_series($1, $2, interval '1 hour')`
/// (or with a step like `'1 hour'`) timestamptz bounds (DataFusion would otherwise
/// plan the parameters as NULL and the series as a list of nothing).
fn time_series_types(start: &mut Expr, end: &mut Expr, step: &mut Expr) {
    use crate::sql::args::cast;
    let interval = DataType::Interval {
        fields: None,
        precision: None,
    };
    let placeholders = is_placeholder(start) || is_placeholder(end);
    let unit_text = matches!(step, Expr::Value(v)
        if matches!(&v.value, ast::Value::SingleQuotedString(t) if t.chars().any(char::is_alphabetic)));
    if is_bare_string(step)
        && (is_time_typed(start) || is_time_typed(end) || placeholders && unit_text)
    {
        *step = cast(step.clone(), interval);
    }
    let interval_step = match step {
        Expr::Cast { data_type, .. } => matches!(data_type, DataType::Interval { .. }),
        Expr::Interval(_) => true,
        Expr::TypedString(t) => matches!(t.data_type, DataType::Interval { .. }),
        _ => false,
    };
    if interval_step {
        for b in [start, end] {
            if is_placeholder(b) {
                *b = cast(
                    b.clone(),
                    DataType::Timestamp(None, ast::TimezoneInfo::WithTimeZone),
                );
            }
        }
    }
}

fn is_placeholder(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, ast::Value::Placeholder(_)))
}

/// Whether `e` is plainly a time: a cast to a time type, a typed time literal or
/// the statement's clock.
fn is_time_typed(e: &Expr) -> bool {
    match e {
        Expr::Cast { data_type, .. } => is_time_type(data_type),
        Expr::TypedString(t) => is_time_type(&t.data_type),
        Expr::Nested(x) => is_time_typed(x),
        Expr::Function(f) => name_parts(&f.name).last().is_some_and(|n| {
            ["now", "current_timestamp", "localtimestamp", "date_trunc"]
                .iter()
                .any(|t| n.value.eq_ignore_ascii_case(t))
        }),
        Expr::BinaryOp { left, right, .. } => is_time_typed(left) || is_time_typed(right),
        _ => false,
    }
}

/// A string literal with no type of its own.
fn is_bare_string(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(v.value, ast::Value::SingleQuotedString(_)),
        Expr::Nested(x) => is_bare_string(x),
        _ => false,
    }
}

/// Whether `e` is a number built from literals (`1e9`, `10 * 1000`, `-5`,
/// `10::int2`, NULL): the series table function folds it to a bigint when the query
/// is planned and streams the rows. Anything else (timestamps, intervals, columns,
/// parameters) goes the general way.
fn is_numeric_constant(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(v.value, ast::Value::Number(..) | ast::Value::Null),
        Expr::Nested(x) => is_numeric_constant(x),
        Expr::UnaryOp { expr, .. } => is_numeric_constant(expr),
        Expr::BinaryOp { left, op, right } => {
            matches!(
                op,
                ast::BinaryOperator::Plus
                    | ast::BinaryOperator::Minus
                    | ast::BinaryOperator::Multiply
                    | ast::BinaryOperator::Divide
                    | ast::BinaryOperator::Modulo
            ) && is_numeric_constant(left)
                && is_numeric_constant(right)
        }
        Expr::Cast {
            expr, data_type, ..
        } => {
            matches!(
                data_type,
                DataType::SmallInt(_)
                    | DataType::Int(_)
                    | DataType::Integer(_)
                    | DataType::BigInt(_)
                    | DataType::Int2(_)
                    | DataType::Int4(_)
                    | DataType::Int8(_)
                    | DataType::Numeric(_)
                    | DataType::Decimal(_)
                    | DataType::Real
                    | DataType::Float4
                    | DataType::Float8
                    | DataType::Double(_)
                    | DataType::DoublePrecision
            ) && is_numeric_constant(expr)
        }
        _ => false,
    }
}

/// `SELECT item AS col`.
fn one_row_query(item: Expr, col: Ident) -> Option<ast::Query> {
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT NULL AS x").ok()?;
    let Some(ast::Statement::Query(mut q)) = stmts.pop() else {
        return None;
    };
    let SetExpr::Select(sel) = q.body.as_mut() else {
        return None;
    };
    sel.projection = vec![SelectItem::ExprWithAlias {
        expr: item,
        alias: col,
    }];
    Some(*q)
}

/// The built-in type a `pg_catalog.`-qualified or PostgreSQL-only type name means.
fn builtin_type(dt: &DataType) -> Option<DataType> {
    match dt {
        DataType::Custom(name, mods) if mods.is_empty() => {
            let parts = name_parts(name);
            let last = match parts.as_slice() {
                [one] => *one,
                [schema, one] if ident_eq(schema, "pg_catalog") => *one,
                _ => return None,
            };
            Some(match last.value.to_ascii_lowercase().as_str() {
                "text" | "name" | "char" | "bpchar" | "varchar" => DataType::Text,
                "int2" | "smallint" => DataType::SmallInt(None),
                "int4" | "integer" | "int" | "oid" | "xid" | "cid" => DataType::Int(None),
                "int8" | "bigint" => DataType::BigInt(None),
                "float4" | "real" => DataType::Real,
                "float8" => DataType::DoublePrecision,
                "bool" | "boolean" => DataType::Boolean,
                "numeric" => DataType::Numeric(ast::ExactNumberInfo::None),
                "date" => DataType::Date,
                "interval" => DataType::Interval {
                    fields: None,
                    precision: None,
                },
                "timestamptz" => DataType::Timestamp(Some(6), ast::TimezoneInfo::Tz),
                "timestamp" => DataType::Timestamp(Some(6), ast::TimezoneInfo::None),
                _ => return None,
            })
        }
        DataType::Array(ast::ArrayElemTypeDef::SquareBracket(inner, n)) => builtin_type(inner)
            .map(|t| DataType::Array(ast::ArrayElemTypeDef::SquareBracket(Box::new(t), *n))),
        _ => None,
    }
}

/// The `reg*` type a cast targets, if any.
fn reg_type(dt: &DataType) -> Option<&'static str> {
    match dt {
        DataType::Regclass => Some("regclass"),
        DataType::Custom(name, mods) if mods.is_empty() => {
            let parts = name_parts(name);
            let last = match parts.as_slice() {
                [one] => *one,
                [schema, one] if ident_eq(schema, "pg_catalog") => *one,
                _ => return None,
            };
            match last.value.to_ascii_lowercase().as_str() {
                "regclass" => Some("regclass"),
                "regtype" => Some("regtype"),
                "regnamespace" => Some("regnamespace"),
                "regproc" | "regprocedure" => Some("regproc"),
                "regrole" => Some("regrole"),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether a cast to `dt` is rewritten into a call (so the select item keeps its name).
pub fn is_reg_cast(dt: &DataType) -> bool {
    reg_type(dt).is_some()
}

/// A quoted literal or a parameter: a name to look up when cast to a `reg*` type.
fn string_literal(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(
        v.value,
        ast::Value::SingleQuotedString(_)
            | ast::Value::EscapedStringLiteral(_)
            | ast::Value::Placeholder(_)
    ))
}

/// Rewrites one expression (children are already rewritten).
pub fn expr(e: &mut Expr) {
    match e {
        Expr::Function(f) => {
            strip_pg_catalog(&mut f.name);
            if let FunctionArguments::Subquery(q) = &f.args
                && name_parts(&f.name)
                    .first()
                    .is_some_and(|i| ident_eq(i, "array"))
                && let Some(sub) = array_subquery(q)
            {
                *e = sub;
            }
        }
        Expr::Subquery(q) => {
            if let Some(new) = aggregate_correlated(q) {
                *e = new;
            }
        }
        Expr::Like {
            pattern,
            escape_char,
            ..
        }
        | Expr::ILike {
            pattern,
            escape_char,
            ..
        } => {
            if let Some(esc) = escape_char.take() {
                let c = match &esc.value {
                    ast::Value::SingleQuotedString(c) => c.clone(),
                    other => other.to_string(),
                };
                if c == "\\" {
                    *escape_char = Some(esc);
                } else {
                    // DataFusion only knows the backslash: rewrite the pattern for it
                    let p = std::mem::replace(pattern.as_mut(), Expr::value(ast::Value::Null));
                    **pattern = call(
                        "sundial_like_escape",
                        vec![p, Expr::value(ast::Value::SingleQuotedString(c))],
                    );
                }
            }
        }
        Expr::Collate { expr: inner, .. } => {
            let inner = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
            *e = inner;
        }
        Expr::BinaryOp { op, .. } => {
            if let ast::BinaryOperator::PGCustomBinaryOperator(parts) = op {
                let schema_ok = parts.len() == 1
                    || (parts.len() == 2 && parts[0].eq_ignore_ascii_case("pg_catalog"));
                let mapped = match parts.last().map(String::as_str) {
                    Some("~") => Some(ast::BinaryOperator::PGRegexMatch),
                    Some("~*") => Some(ast::BinaryOperator::PGRegexIMatch),
                    Some("!~") => Some(ast::BinaryOperator::PGRegexNotMatch),
                    Some("!~*") => Some(ast::BinaryOperator::PGRegexNotIMatch),
                    Some("=") => Some(ast::BinaryOperator::Eq),
                    Some("<>") | Some("!=") => Some(ast::BinaryOperator::NotEq),
                    Some("<") => Some(ast::BinaryOperator::Lt),
                    Some(">") => Some(ast::BinaryOperator::Gt),
                    Some("<=") => Some(ast::BinaryOperator::LtEq),
                    Some(">=") => Some(ast::BinaryOperator::GtEq),
                    Some("||") => Some(ast::BinaryOperator::StringConcat),
                    _ => None,
                };
                if schema_ok && let Some(m) = mapped {
                    *op = m;
                }
            }
        }
        Expr::Cast {
            expr: inner,
            data_type,
            ..
        } => {
            if let Some(reg) = reg_type(data_type) {
                let arg = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
                // A quoted name is looked up (`'cpu'::regclass` compares as the oid);
                // anything else prints as the name (`c.oid::regclass`, `23::regtype`).
                *e = if string_literal(&arg) {
                    match reg {
                        "regclass" | "regtype" | "regnamespace" => {
                            call(&format!("sundial_{reg}_in"), vec![arg])
                        }
                        _ => arg,
                    }
                } else {
                    call(&format!("sundial_{reg}_out"), vec![arg])
                };
            } else if let Some(t) = builtin_type(data_type) {
                *data_type = t;
            }
        }
        _ => {}
    }
}

/// Aggregate functions (their presence means a subquery returns one row).
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "first_value",
    "last_value",
    "first",
    "last",
    "histogram",
    "median",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "bit_and",
    "bit_or",
    "json_agg",
    "jsonb_agg",
    "percentile_cont",
    "approx_distinct",
    "approx_median",
];

/// Relation names and aliases a query defines, and the qualifiers its columns use.
#[derive(Default)]
struct Scope {
    defined: Vec<String>,
    qualifiers: Vec<String>,
    aggregate: bool,
}

impl ast::Visitor for Scope {
    type Break = ();
    fn pre_visit_table_factor(&mut self, tf: &TableFactor) -> std::ops::ControlFlow<()> {
        let alias = match tf {
            TableFactor::Table { name, alias, .. } => {
                if let Some(last) = name_parts(name).last() {
                    self.defined.push(last.value.to_ascii_lowercase());
                }
                alias
            }
            TableFactor::Derived { alias, .. }
            | TableFactor::UNNEST { alias, .. }
            | TableFactor::Function { alias, .. }
            | TableFactor::NestedJoin { alias, .. } => alias,
            _ => &None,
        };
        if let Some(a) = alias {
            self.defined.push(a.name.value.to_ascii_lowercase());
        }
        std::ops::ControlFlow::Continue(())
    }
    fn pre_visit_expr(&mut self, e: &Expr) -> std::ops::ControlFlow<()> {
        match e {
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                self.qualifiers
                    .push(parts[parts.len() - 2].value.to_ascii_lowercase());
            }
            Expr::Function(f) if f.over.is_none() => {
                if let Some(n) = name_parts(&f.name).last()
                    && AGGREGATES.contains(&n.value.to_ascii_lowercase().as_str())
                {
                    self.aggregate = true;
                }
            }
            _ => {}
        }
        std::ops::ControlFlow::Continue(())
    }
}

pub fn split_and(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            split_and(*left, out);
            split_and(*right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: ast::BinaryOperator::And,
                    ..
                }
            ) =>
        {
            split_and(*inner, out)
        }
        other => out.push(other),
    }
}

fn join_and(mut es: Vec<Expr>) -> Option<Expr> {
    let first = if es.is_empty() {
        return None;
    } else {
        es.remove(0)
    };
    Some(es.into_iter().fold(first, |l, r| Expr::BinaryOp {
        left: Box::new(l),
        op: ast::BinaryOperator::And,
        right: Box::new(r),
    }))
}

/// Whether a column reference belongs to the subquery (`None`: not a qualified column).
fn is_inner(e: &Expr, defined: &[String]) -> Option<bool> {
    match e {
        Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
            Some(defined.contains(&parts[parts.len() - 2].value.to_ascii_lowercase()))
        }
        _ => None,
    }
}

/// (inner refs, outer refs, unqualified refs) of an expression.
fn refs(e: &Expr, defined: &[String]) -> (usize, usize, usize) {
    use ast::Visit;
    struct R<'a>(&'a [String], usize, usize, usize);
    impl ast::Visitor for R<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> std::ops::ControlFlow<()> {
            match (e, is_inner(e, self.0)) {
                (_, Some(true)) => self.1 += 1,
                (_, Some(false)) => self.2 += 1,
                (Expr::Identifier(_), None) => self.3 += 1,
                // a nested subquery: be conservative
                (Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. }, _) => {
                    self.3 += 1
                }
                _ => {}
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut r = R(defined, 0, 0, 0);
    let _ = e.visit(&mut r);
    (r.1, r.2, r.3)
}

/// `inner = outer` (or the reverse) between two plain columns: DataFusion decorrelates it.
fn is_equi_correlation(e: &Expr, defined: &[String]) -> bool {
    let Expr::BinaryOp {
        left,
        op: ast::BinaryOperator::Eq,
        right,
    } = e
    else {
        return false;
    };
    let side = |x: &Expr| -> Option<bool> {
        match x {
            Expr::Nested(i) => is_inner(i, defined),
            other => is_inner(other, defined),
        }
    };
    matches!(
        (side(left), side(right)),
        (Some(true), Some(false)) | (Some(false), Some(true))
    )
}

/// Makes a correlated scalar subquery plannable by DataFusion, which decorrelates only
/// aggregated subqueries whose correlated predicates are `inner = outer` equalities:
/// the select item gets `first_value(...)` (PostgreSQL's answer when there is at most
/// one row; more is an error there), and other predicates on outer columns move out
/// into `CASE WHEN ... THEN (subquery) END`, with the subquery's columns in them read by
/// their own subqueries (which assumes the equalities select at most one row, as they
/// do in the catalog queries that use this form).
fn aggregate_correlated(q: &ast::Query) -> Option<Expr> {
    use ast::Visit;
    if q.limit_clause.is_some() || q.fetch.is_some() || q.with.is_some() {
        return None;
    }
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    if sel.distinct.is_some()
        || sel.having.is_some()
        || !matches!(&sel.group_by, ast::GroupByExpr::Expressions(g, _) if g.is_empty())
    {
        return None;
    }
    let mut scope = Scope::default();
    let _ = sel.visit(&mut scope);
    let correlated = scope
        .qualifiers
        .iter()
        .any(|qual| !scope.defined.contains(qual));
    if scope.aggregate || !correlated {
        return None;
    }
    let [item] = sel.projection.as_slice() else {
        return None;
    };
    let value = match item {
        SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. } => x.clone(),
        _ => return None,
    };
    let defined = scope.defined;
    let mut conjuncts = vec![];
    if let Some(w) = sel.selection.clone() {
        split_and(w, &mut conjuncts);
    }
    let (mut kept, mut hoisted) = (vec![], vec![]);
    for c in conjuncts {
        let (_, outer, bare) = refs(&c, &defined);
        if outer == 0 || bare > 0 || is_equi_correlation(&c, &defined) {
            kept.push(c);
        } else {
            // outer-only, or mixing inner and outer columns other than by `=`
            hoisted.push(c);
        }
    }
    let sub = |x: Expr, kept: &[Expr]| -> Expr {
        let mut q2 = q.clone();
        if let SetExpr::Select(s2) = q2.body.as_mut() {
            s2.projection = vec![SelectItem::UnnamedExpr(call("first_value", vec![x]))];
            s2.selection = join_and(kept.to_vec());
        }
        q2.order_by = None;
        Expr::Subquery(Box::new(q2))
    };
    let main = sub(value, &kept);
    if hoisted.is_empty() {
        return Some(main);
    }
    // inner columns of hoisted predicates are read by their own subqueries
    let hoisted: Vec<Expr> = hoisted
        .into_iter()
        .map(|mut h| {
            let _ = ast::visit_expressions_mut(&mut h, |e| {
                if is_inner(e, &defined) == Some(true) {
                    let col = std::mem::replace(e, Expr::value(ast::Value::Null));
                    *e = sub(col, &kept);
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
            h
        })
        .collect();
    Some(Expr::Case {
        case_token: ast::helpers::attached_token::AttachedToken::empty(),
        end_token: ast::helpers::attached_token::AttachedToken::empty(),
        operand: None,
        conditions: vec![ast::CaseWhen {
            condition: join_and(hoisted)?,
            result: main,
        }],
        else_result: None,
    })
}

/// `ARRAY(SELECT e FROM unnest(a) x [WHERE p])` → `coalesce(array_transform(
/// array_filter(a, x -> p), x -> e), [])`; any other `ARRAY(SELECT x FROM ... [ORDER BY ...])` →
/// `(SELECT array_agg(x ORDER BY ...) FROM ...)`.
fn array_subquery(q: &ast::Query) -> Option<Expr> {
    if let Some(e) = array_map(q) {
        return Some(e);
    }
    let mut q = q.clone();
    let SetExpr::Select(sel) = q.body.as_mut() else {
        return None;
    };
    let [item] = sel.projection.as_slice() else {
        return None;
    };
    let value = match item {
        SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. } => x.clone(),
        _ => return None,
    };
    let mut order = vec![];
    if let Some(ob) = q.order_by.take() {
        let ast::OrderByKind::Expressions(exprs) = ob.kind else {
            return None;
        };
        for mut o in exprs {
            // ORDER BY 1 means the select item
            if matches!(&o.expr, Expr::Value(v) if v.value == ast::Value::Number("1".into(), false))
            {
                o.expr = value.clone();
            }
            order.push(o);
        }
    }
    let mut agg = call("array_agg", vec![value]);
    if let Expr::Function(f) = &mut agg
        && let FunctionArguments::List(l) = &mut f.args
        && !order.is_empty()
    {
        l.clauses.push(ast::FunctionArgumentClause::OrderBy(order));
    }
    sel.projection = vec![SelectItem::UnnamedExpr(agg)];
    Some(Expr::Subquery(Box::new(q)))
}

fn lambda(param: &Ident, body: Expr) -> Expr {
    Expr::Lambda(ast::LambdaFunction {
        params: ast::OneOrManyWithParens::One(ast::LambdaFunctionParameter {
            name: param.clone(),
            data_type: None,
        }),
        body: Box::new(body),
        syntax: ast::LambdaSyntax::Arrow,
    })
}

fn array_map(q: &ast::Query) -> Option<Expr> {
    if q.order_by.is_some() || q.limit_clause.is_some() || q.with.is_some() {
        return None;
    }
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    let [from] = sel.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() || sel.having.is_some() || sel.distinct.is_some() {
        return None;
    }
    let TableFactor::UNNEST {
        alias: Some(alias),
        array_exprs,
        ..
    } = &from.relation
    else {
        return None;
    };
    let [array] = array_exprs.as_slice() else {
        return None;
    };
    let param = alias
        .columns
        .first()
        .map(|c| c.name.clone())
        .unwrap_or_else(|| alias.name.clone());
    let [item] = sel.projection.as_slice() else {
        return None;
    };
    let body = match item {
        SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. } => x.clone(),
        _ => return None,
    };
    let mut out = array.clone();
    if let Some(p) = &sel.selection {
        out = call("array_filter", vec![out, lambda(&param, p.clone())]);
    }
    if !matches!(&body, Expr::Identifier(i) if i.value == param.value) {
        out = call("array_transform", vec![out, lambda(&param, body)]);
    }
    // unnest(NULL) has no rows: ARRAY() of them is empty, not NULL
    Some(call("coalesce", vec![out, call("make_array", vec![])]))
}

/// Whether a `FROM` item is a catalog relation that never has rows.
fn empty_relation(tf: &TableFactor) -> bool {
    match tf {
        TableFactor::Table {
            name, args: None, ..
        } => match name_parts(name).as_slice() {
            [schema, rel] if ident_eq(schema, "pg_catalog") => {
                EMPTY_RELS.iter().any(|e| ident_eq(rel, e))
            }
            _ => false,
        },
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => joined_empty(table_with_joins),
        TableFactor::Derived { subquery, .. } => query_is_empty(subquery),
        _ => false,
    }
}

/// Whether a (pruned) query is known to have no rows: `WHERE false` everywhere.
fn query_is_empty(q: &ast::Query) -> bool {
    fn body(b: &SetExpr) -> bool {
        match b {
            SetExpr::Select(sel) => {
                matches!(&sel.selection, Some(Expr::Value(v)) if v.value == ast::Value::Boolean(false))
                    && matches!(&sel.group_by, ast::GroupByExpr::Expressions(g, _) if g.is_empty())
                    && sel.having.is_none()
            }
            SetExpr::SetOperation {
                op: ast::SetOperator::Union,
                left,
                right,
                ..
            } => body(left) && body(right),
            SetExpr::Query(q) => query_is_empty(q),
            _ => false,
        }
    }
    body(&q.body)
}

/// Whether a join tree has no rows because an inner side never has rows.
fn joined_empty(t: &ast::TableWithJoins) -> bool {
    use ast::JoinOperator as J;
    let outer_right = t.joins.iter().any(|j| {
        matches!(
            j.join_operator,
            J::Right(_) | J::RightOuter(_) | J::FullOuter(_)
        )
    });
    if empty_relation(&t.relation) && !outer_right {
        return true;
    }
    t.joins.iter().any(|j| {
        matches!(j.join_operator, J::Join(_) | J::Inner(_) | J::CrossJoin(_))
            && empty_relation(&j.relation)
    })
}

/// Aggregate calls outside nested subqueries.
#[derive(Default)]
struct TopAggregates {
    depth: usize,
    found: bool,
}

impl ast::Visitor for TopAggregates {
    type Break = ();
    fn pre_visit_query(&mut self, _: &ast::Query) -> std::ops::ControlFlow<()> {
        self.depth += 1;
        std::ops::ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _: &ast::Query) -> std::ops::ControlFlow<()> {
        self.depth -= 1;
        std::ops::ControlFlow::Continue(())
    }
    fn pre_visit_expr(&mut self, e: &Expr) -> std::ops::ControlFlow<()> {
        if self.depth == 0
            && let Expr::Function(f) = e
            && f.over.is_none()
            && name_parts(&f.name)
                .last()
                .is_some_and(|n| AGGREGATES.contains(&n.value.to_ascii_lowercase().as_str()))
        {
            self.found = true;
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// A `SELECT` that reads an always-empty catalog relation in an inner position (and
/// does not aggregate) has no rows whatever its expressions: those other than plain
/// columns and literals are replaced by NULLs of the same names and its filter by `false`, so that catalog queries built
/// around features Sundial lacks (policies, publications, array-typed columns) plan.
/// Returns whether the select is empty.
fn prune_empty_select(sel: &mut ast::Select) -> bool {
    use ast::Visit;
    if !sel.from.iter().any(joined_empty) {
        return false;
    }
    if !matches!(&sel.group_by, ast::GroupByExpr::Expressions(g, _) if g.is_empty())
        || sel.having.is_some()
    {
        return false;
    }
    let mut aggs = TopAggregates::default();
    for item in &sel.projection {
        let _ = item.visit(&mut aggs);
    }
    if aggs.found {
        return false;
    }
    let mut params = vec![];
    let _ = ast::visit_expressions(&*sel, |e| {
        if let Expr::Value(v) = e
            && let ast::Value::Placeholder(p) = &v.value
            && !params.contains(p)
        {
            params.push(p.clone());
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    let mut seen = std::collections::HashSet::new();
    for (i, item) in sel.projection.iter_mut().enumerate() {
        // plain columns and literals keep their types
        if let SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. } = item
            && matches!(
                x,
                Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Value(_)
            )
        {
            continue;
        }
        let name = match item {
            SelectItem::UnnamedExpr(x) => crate::sql::names::expr_name(x),
            SelectItem::ExprWithAlias { alias, .. } => {
                if alias.quote_style.is_some() {
                    alias.value.clone()
                } else {
                    alias.value.to_ascii_lowercase()
                }
            }
            _ => continue,
        };
        let name = if seen.insert(name.clone()) {
            name
        } else {
            format!("{name}{}{i}", crate::sql::names::UNIQUE_MARK)
        };
        *item = SelectItem::ExprWithAlias {
            expr: Expr::value(ast::Value::Null),
            alias: Ident::with_quote('"', name),
        };
    }
    // Parameters of the dropped expressions stay (unused) so the statement still has
    // them: `false AND $n IS NULL ...`.
    let mut filter = vec![Expr::value(ast::Value::Boolean(false))];
    filter.extend(
        params
            .into_iter()
            .map(|p| Expr::IsNull(Box::new(Expr::value(ast::Value::Placeholder(p))))),
    );
    sel.selection = join_and(filter);
    true
}

fn prune_set(body: &mut SetExpr) -> bool {
    match body {
        SetExpr::Select(sel) => prune_empty_select(sel),
        SetExpr::SetOperation {
            op, left, right, ..
        } => {
            let l = prune_set(left);
            let r = prune_set(right);
            match op {
                ast::SetOperator::Union => l && r,
                ast::SetOperator::Intersect => l || r,
                _ => l,
            }
        }
        SetExpr::Query(q) => prune_empty(q),
        _ => false,
    }
}

/// Applies [`prune_empty_select`] to a query's selects; an empty query loses its
/// `ORDER BY` (nothing to sort, and it may name pruned expressions).
pub fn prune_empty(q: &mut ast::Query) -> bool {
    let empty = prune_set(&mut q.body);
    if empty {
        q.order_by = None;
    }
    empty
}

fn has_subquery(e: &Expr) -> bool {
    use ast::Visit;
    struct F(bool);
    impl ast::Visitor for F {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> std::ops::ControlFlow<()> {
            if matches!(
                e,
                Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. }
            ) {
                self.0 = true;
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut f = F(false);
    let _ = e.visit(&mut f);
    f.0
}

/// `SELECT generate_series(1, 3)`: in a select list PostgreSQL's set-returning
/// function gives one row per value; DataFusion's scalar `generate_series` gives one
/// array. Such items become `unnest(generate_series(...))`, named `generate_series`
/// unless the query names them.
pub fn set_returning_items(sel: &mut ast::Select) {
    for item in sel.projection.iter_mut() {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.clone())),
            _ => continue,
        };
        let Expr::Function(f) = expr else {
            continue;
        };
        let parts = name_parts(&f.name);
        let name = match parts.as_slice() {
            [n] => n,
            [schema, n] if ident_eq(schema, "pg_catalog") => n,
            _ => continue,
        };
        let (set, array) = if ident_eq(name, "generate_series") {
            ("generate_series".to_string(), None)
        } else if crate::sql::signatures::is_set_returning(&f.name) {
            // show_chunks / drop_chunks: one row per chunk.
            (name.value.to_ascii_lowercase(), None)
        } else if let Some(list) =
            crate::sql::functions::json::select_list_form(&name.value.to_ascii_lowercase())
        {
            // One row per element or key: the list of them, unnested.
            (name.value.to_ascii_lowercase(), Some(list))
        } else if ident_eq(name, "regexp_matches") {
            // One text[] per match: the array of them, unnested.
            (
                "regexp_matches".to_string(),
                Some(crate::sql::functions::regex::MATCHES_ALL),
            )
        } else {
            continue;
        };
        if f.over.is_some() || f.filter.is_some() {
            continue;
        }
        let mut inner = expr.clone();
        if let (Some(array), Expr::Function(g)) = (array, &mut inner) {
            g.name = ast::ObjectName::from(vec![Ident::new(array)]);
        }
        let unnest = call("unnest", vec![inner]);
        *item = SelectItem::ExprWithAlias {
            expr: unnest,
            alias: alias.unwrap_or_else(|| Ident::new(&set)),
        };
    }
}

/// `SELECT DISTINCT a + b AS s ... ORDER BY a + b`: PostgreSQL accepts an ORDER BY
/// expression that is one of the select-list expressions; DataFusion wants the
/// select item itself. Such keys become the item's position (`ORDER BY 1`).
pub fn distinct_order_by(q: &mut ast::Query) {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return;
    };
    if !matches!(sel.distinct, Some(ast::Distinct::Distinct)) {
        return;
    }
    let Some(ob) = &mut q.order_by else {
        return;
    };
    let ast::OrderByKind::Expressions(keys) = &mut ob.kind else {
        return;
    };
    for k in keys.iter_mut() {
        if matches!(k.expr, Expr::Identifier(_) | Expr::Value(_)) {
            continue;
        }
        let pos = sel.projection.iter().position(|item| match item {
            SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. } => *x == k.expr,
            _ => false,
        });
        if let Some(i) = pos {
            k.expr = Expr::value(ast::Value::Number((i + 1).to_string(), false));
        }
    }
}

/// DataFusion cannot sort by an expression holding a subquery (Grafana's table picker
/// orders by `CASE WHEN schema IN (SELECT ...) THEN 0 ELSE 1 END`): such a query is
/// turned into `SELECT names FROM (SELECT items, sort keys AS __sundial_sortN ...)
/// ORDER BY __sundial_sortN`.
pub fn sort_by_subquery(q: &mut ast::Query) {
    let Some(ob) = &q.order_by else {
        return;
    };
    let ast::OrderByKind::Expressions(keys) = &ob.kind else {
        return;
    };
    if !keys.iter().any(|k| has_subquery(&k.expr)) || q.with.is_some() {
        return;
    }
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return;
    };
    if sel.distinct.is_some() {
        return;
    }
    let mut names = vec![];
    let mut inner = sel.as_ref().clone();
    for item in inner.projection.iter_mut() {
        let name = match item {
            SelectItem::UnnamedExpr(x) => crate::sql::names::expr_name(x),
            SelectItem::ExprWithAlias { alias, .. } if alias.quote_style.is_some() => {
                alias.value.clone()
            }
            SelectItem::ExprWithAlias { alias, .. } => alias.value.to_ascii_lowercase(),
            _ => return,
        };
        if names.contains(&name) {
            return;
        }
        if let SelectItem::UnnamedExpr(x) = item {
            let x = std::mem::replace(x, Expr::value(ast::Value::Null));
            *item = SelectItem::ExprWithAlias {
                expr: x,
                alias: Ident::with_quote('"', name.clone()),
            };
        }
        names.push(name);
    }
    let mut new_keys = vec![];
    for (i, k) in keys.iter().enumerate() {
        let by_output = match &k.expr {
            Expr::Value(v) => matches!(v.value, ast::Value::Number(..)),
            Expr::Identifier(id) => names.iter().any(|n| ident_eq(id, n)),
            _ => false,
        };
        if by_output {
            new_keys.push(k.clone());
            continue;
        }
        let hidden = format!("__sundial_sort{i}");
        inner.projection.push(SelectItem::ExprWithAlias {
            expr: k.expr.clone(),
            alias: Ident::new(&hidden),
        });
        let mut k = k.clone();
        k.expr = Expr::Identifier(Ident::new(hidden));
        new_keys.push(k);
    }
    let Some(mut outer) = one_row_query(Expr::value(ast::Value::Null), Ident::new("x")) else {
        return;
    };
    let Some(inner) = query_of(SetExpr::Select(Box::new(inner))) else {
        return;
    };
    let SetExpr::Select(osel) = outer.body.as_mut() else {
        return;
    };
    osel.projection = names
        .iter()
        .map(|n| SelectItem::UnnamedExpr(Expr::Identifier(Ident::with_quote('"', n.clone()))))
        .collect();
    osel.from = vec![ast::TableWithJoins {
        relation: TableFactor::Derived {
            lateral: false,
            subquery: Box::new(inner),
            alias: Some(TableAlias {
                explicit: true,
                name: Ident::new("__sundial_sorted"),
                columns: vec![],
                at: None,
            }),
            sample: None,
        },
        joins: vec![],
    }];
    q.body = outer.body;
    q.order_by = Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(new_keys),
        interpolate: None,
    });
}

fn query_of(body: SetExpr) -> Option<ast::Query> {
    let mut q = one_row_query(Expr::value(ast::Value::Null), Ident::new("x"))?;
    q.body = Box::new(body);
    Some(q)
}

/// `x IN (SELECT c FROM ...)` with an uncorrelated subquery, in a select item or sort
/// key (DataFusion only plans `IN (subquery)` in filters) →
/// `coalesce(array_has((SELECT array_agg(c) FROM ...), x), false)`.
pub fn in_subquery_outside_filter(q: &mut ast::Query) {
    use ast::Visit;
    let rewrite = |e: &mut Expr| {
        let _ = ast::visit_expressions_mut(e, |x| {
            let Expr::InSubquery {
                expr: needle,
                subquery,
                negated,
            } = x
            else {
                return std::ops::ControlFlow::<()>::Continue(());
            };
            let SetExpr::Select(sel) = subquery.body.as_ref() else {
                return std::ops::ControlFlow::Continue(());
            };
            let mut scope = Scope::default();
            let _ = sel.visit(&mut scope);
            if scope.qualifiers.iter().any(|q| !scope.defined.contains(q)) {
                return std::ops::ControlFlow::Continue(());
            }
            let mut agg = subquery.as_ref().clone();
            if let SetExpr::Select(asel) = agg.body.as_mut()
                && let [item] = asel.projection.as_mut_slice()
                && let SelectItem::UnnamedExpr(v) | SelectItem::ExprWithAlias { expr: v, .. } = item
            {
                let v = std::mem::replace(v, Expr::value(ast::Value::Null));
                *item = SelectItem::UnnamedExpr(call("array_agg", vec![v]));
            } else {
                return std::ops::ControlFlow::Continue(());
            }
            let needle = std::mem::replace(needle.as_mut(), Expr::value(ast::Value::Null));
            let has = call(
                "coalesce",
                vec![
                    call("array_has", vec![Expr::Subquery(Box::new(agg)), needle]),
                    Expr::value(ast::Value::Boolean(false)),
                ],
            );
            *x = if *negated {
                Expr::UnaryOp {
                    op: ast::UnaryOperator::Not,
                    expr: Box::new(has),
                }
            } else {
                has
            };
            std::ops::ControlFlow::Continue(())
        });
    };
    if let SetExpr::Select(sel) = q.body.as_mut() {
        for item in sel.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. } = item {
                rewrite(x);
            }
        }
    }
    if let Some(ob) = q.order_by.as_mut()
        && let ast::OrderByKind::Expressions(keys) = &mut ob.kind
    {
        for k in keys {
            rewrite(&mut k.expr);
        }
    }
}
