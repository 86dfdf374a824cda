//! CHECK constraints as DDL: column and table constraints of CREATE TABLE,
//! `ALTER TABLE … ADD [CONSTRAINT n] CHECK (…) [NOT VALID]`, `VALIDATE
//! CONSTRAINT` and DROP, named as PostgreSQL names them. The write path enforces
//! them on every row (`crate::write::checks`) with the compiler installed here.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::{empty::EmptyTable, provider_as_source};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::sqlparser::ast::{self, ColumnOption, Expr};

use super::{Session, args, functions};
use crate::catalog::{CheckDef, ColumnDef, TableDef};
use crate::error::{Error, Result};

/// Makes the write path compile CHECK conditions with the SQL layer's functions,
/// types and coercions (called once at startup).
pub fn install() {
    crate::write::checks::install(Box::new(compile));
}

/// A context with what a query's expressions get: PostgreSQL's functions, type
/// names, operators and coercion rules (UTC, as a new session).
static CONTEXT: LazyLock<SessionContext> = LazyLock::new(|| {
    let mut cfg = SessionConfig::new();
    cfg.options_mut().sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    let rules = functions::pgcoerce::first_rules()
        .into_iter()
        .chain(datafusion::optimizer::Analyzer::new().rules)
        .collect();
    let mut state = SessionStateBuilder::new()
        .with_config(cfg)
        .with_default_features()
        .with_analyzer_rules(rules)
        .with_type_planner(Arc::new(functions::pgtypes::PgTypes))
        .build();
    // Appending to the planners cannot fail.
    let _ = datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut state,
        Arc::new(functions::json::JsonOperators),
    );
    let ctx = SessionContext::new_with_state(state);
    functions::register(&ctx, "", 0, super::session::default_settings("", ""));
    ctx
});

/// `sql` as an expression over `schema`'s columns, planned as a query's
/// projection is (type coercion included).
fn compile(schema: &SchemaRef, sql: &str) -> Result<Arc<dyn PhysicalExpr>> {
    let state = CONTEXT.state();
    let source = provider_as_source(Arc::new(EmptyTable::new(schema.clone())));
    let scan = LogicalPlanBuilder::scan("t", source, None)?.build()?;
    let expr = state.create_logical_expr(sql, scan.schema())?;
    let plan = LogicalPlanBuilder::from(scan).project([expr])?.build()?;
    let plan = state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})?;
    let LogicalPlan::Projection(p) = &plan else {
        return Err(Error::Internal(format!(
            "CHECK ({sql}) did not plan as a projection"
        )));
    };
    let Some(e) = p.expr.first() else {
        return Err(Error::Internal(format!("CHECK ({sql}) planned empty")));
    };
    let e = e.clone().unalias_nested().data;
    Ok(state.create_physical_expr(e, p.input.schema())?)
}

/// A CHECK condition as it is stored: refused where PostgreSQL refuses it
/// (subqueries, aggregates, window functions) or where it does not plan as a
/// boolean over `columns`. Returns the text and the columns it reads.
fn definition(expr: &Expr, columns: &[ColumnDef]) -> Result<(String, Vec<String>)> {
    let mut refused = None;
    let mut read = BTreeSet::new();
    let _ = ast::visit_expressions(expr, |e| {
        match e {
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                refused.get_or_insert(Error::NotSupported(
                    "cannot use subquery in check constraint".into(),
                ));
            }
            Expr::Function(f) if f.over.is_some() => {
                refused.get_or_insert(Error::sql(
                    "42P20",
                    "window functions are not allowed in check constraints",
                ));
            }
            Expr::Identifier(i) => {
                read.insert(args::fold(i));
            }
            Expr::CompoundIdentifier(parts) => {
                if let Some(i) = parts.last() {
                    read.insert(args::fold(i));
                }
            }
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if let Some(e) = refused {
        return Err(e);
    }
    let text = expr.to_string();
    let schema: SchemaRef = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| c.sql_type.field(&c.name, c.nullable))
            .collect::<Vec<_>>(),
    ));
    if has_aggregate(&schema, &text) {
        return Err(Error::sql(
            "42803",
            "aggregate functions are not allowed in check constraints",
        ));
    }
    let compiled = compile(&schema, &text)?;
    let dt = compiled.data_type(&schema)?;
    if dt != arrow::datatypes::DataType::Boolean && dt != arrow::datatypes::DataType::Null {
        return Err(Error::sql(
            "42804",
            format!(
                "argument of CHECK must be type boolean, not type {}",
                super::pg_catalog::format_type(
                    i64::from(super::pg_catalog::arrow_type_oid(&dt)),
                    None
                )
                .unwrap_or_else(|| dt.to_string())
            ),
        ));
    }
    let read = read
        .into_iter()
        .filter(|c| columns.iter().any(|d| &d.name == c))
        .collect();
    Ok((text, read))
}

/// Whether `sql` calls an aggregate function (planned as a logical expression).
fn has_aggregate(schema: &SchemaRef, sql: &str) -> bool {
    let state = CONTEXT.state();
    let Ok(df) = datafusion::common::DFSchema::try_from(schema.as_ref().clone()) else {
        return false;
    };
    let Ok(e) = state.create_logical_expr(sql, &df) else {
        return false;
    };
    let mut found = false;
    let _ = e.apply(|x| {
        found |= matches!(
            x,
            datafusion::logical_expr::Expr::AggregateFunction(_)
                | datafusion::logical_expr::Expr::WindowFunction(_)
        );
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

/// PostgreSQL's name for an unnamed CHECK: `t_col_check` when it reads one
/// column, `t_check` otherwise, then `…1`, `…2` while the name is taken.
fn choose_name(table: &str, read: &[String], taken: &BTreeSet<String>) -> String {
    let base = match read {
        [c] => format!("{table}_{c}_check"),
        _ => format!("{table}_check"),
    };
    if !taken.contains(&base) {
        return base;
    }
    (1..)
        .map(|n| format!("{base}{n}"))
        .find(|n| !taken.contains(n))
        .unwrap_or(base)
}

/// Every constraint name of the database (PostgreSQL picks unused ones per schema).
fn taken_names(s: &Session) -> Result<BTreeSet<String>> {
    let m = s.engine.catalog().snapshot();
    Ok(m.database(&s.db)?
        .tables
        .values()
        .flat_map(|t| {
            t.keys
                .iter()
                .map(|k| k.name.clone())
                .chain(t.checks.iter().map(|c| c.name.clone()))
        })
        .collect())
}

/// The CHECK constraints of a CREATE TABLE: column constraints in column order,
/// then table constraints.
pub fn from_create(
    s: &Session,
    ct: &ast::CreateTable,
    table: &str,
    columns: &[ColumnDef],
) -> Result<Vec<CheckDef>> {
    let mut wanted: Vec<(Option<String>, &Expr, Option<String>)> = vec![];
    for c in &ct.columns {
        for o in &c.options {
            if let ColumnOption::Check(k) = &o.option {
                let name = o.name.as_ref().or(k.name.as_ref()).map(args::fold);
                wanted.push((name, &k.expr, Some(args::fold(&c.name))));
            }
        }
    }
    for tc in &ct.constraints {
        if let ast::TableConstraint::Check(k) = tc {
            wanted.push((k.name.as_ref().map(args::fold), &k.expr, None));
        }
    }
    if wanted.is_empty() {
        return Ok(vec![]);
    }
    let mut taken = taken_names(s)?;
    let mut out: Vec<CheckDef> = vec![];
    for (name, expr, column) in wanted {
        let (text, read) = definition(expr, columns)?;
        let name = match name {
            Some(n) => {
                if out.iter().any(|c| c.name == n) {
                    return Err(Error::sql(
                        "42710",
                        format!("constraint \"{n}\" for relation \"{table}\" already exists"),
                    ));
                }
                n
            }
            None => {
                let by = column.map(|c| vec![c]).unwrap_or(read);
                choose_name(table, &by, &taken)
            }
        };
        taken.insert(name.clone());
        out.push(CheckDef {
            name,
            expr: text,
            validated: true,
        });
    }
    Ok(out)
}

/// `ALTER TABLE t ADD [CONSTRAINT name] CHECK (expr) [NOT VALID]`, and the
/// CHECKs of an added column: the stored rows are tested unless NOT VALID
/// (23514 and no constraint when one fails).
pub async fn add(
    s: &Session,
    table: &str,
    name: Option<String>,
    expr: &Expr,
    column: Option<&str>,
    not_valid: bool,
) -> Result<()> {
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    let (text, read) = definition(expr, &t.columns)?;
    let name = match name {
        Some(n) => n,
        None => {
            let by = column.map(|c| vec![c.to_string()]).unwrap_or(read);
            choose_name(table, &by, &taken_names(s)?)
        }
    };
    let check = CheckDef {
        name: name.clone(),
        expr: text,
        validated: !not_valid,
    };
    // Added first, so rows written while the stored ones are read are tested too.
    s.engine.catalog().add_check(&s.db, table, check.clone())?;
    if !not_valid && let Err(e) = test_rows(s, &t, &check).await {
        s.engine.catalog().drop_check(&s.db, table, &name)?;
        return Err(e);
    }
    Ok(())
}

/// `ALTER TABLE t VALIDATE CONSTRAINT name`: a NOT VALID CHECK tests the stored
/// rows and is marked valid (a key or a valid CHECK: nothing to do).
pub async fn validate(s: &Session, table: &str, name: &str) -> Result<()> {
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    let Some(check) = t.checks.iter().find(|c| c.name == name) else {
        if t.keys.iter().any(|k| k.name == name) {
            return Ok(());
        }
        return Err(Error::sql(
            "42704",
            format!("constraint \"{name}\" of relation \"{table}\" does not exist"),
        ));
    };
    if check.validated {
        return Ok(());
    }
    test_rows(s, &t, check).await?;
    s.engine.catalog().validate_check(&s.db, table, name)
}

/// 23514 when a stored (or, in a block, staged) row of `t` makes `check` false.
async fn test_rows(s: &Session, t: &TableDef, check: &CheckDef) -> Result<()> {
    let q = format!(
        "SELECT count(*) FROM {} WHERE NOT ({})",
        crate::pgident::quote_ident(&t.name),
        check.expr
    );
    let batches = s.ctx.sql(&q).await?.collect().await?;
    let n = match super::first_value(&batches)? {
        datafusion::common::ScalarValue::Int64(Some(n)) => n,
        _ => 0,
    };
    if n > 0 {
        return Err(Error::sql(
            "23514",
            format!(
                "check constraint \"{}\" of relation \"{}\" is violated by some row",
                check.name, t.name
            ),
        ));
    }
    Ok(())
}

/// `pg_get_constraintdef` of a CHECK: `CHECK ((expr))`, `NOT VALID` appended
/// while it is.
pub fn constraint_def(c: &CheckDef) -> String {
    let mut s = format!("CHECK (({}))", c.expr);
    if !c.validated {
        s.push_str(" NOT VALID");
    }
    s
}

/// The CHECKs of `ALTER TABLE t ADD COLUMN c … CHECK (…)`, tested before the
/// column is added on the stored rows as they will read (`c` holding its default
/// in each): 23514 and nothing added when one fails. The caller adds them with
/// the column.
pub async fn for_added_column(
    s: &Session,
    table: &str,
    cd: &ast::ColumnDef,
    column: &ColumnDef,
) -> Result<Vec<CheckDef>> {
    let wanted: Vec<(Option<String>, &Expr)> = cd
        .options
        .iter()
        .filter_map(|o| match &o.option {
            ColumnOption::Check(k) => Some((
                o.name.as_ref().or(k.name.as_ref()).map(args::fold),
                &*k.expr,
            )),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return Ok(vec![]);
    }
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    let mut columns = t.columns.clone();
    columns.push(column.clone());
    let mut taken = taken_names(s)?;
    let mut out = vec![];
    for (name, expr) in wanted {
        let (text, _) = definition(expr, &columns)?;
        let name =
            name.unwrap_or_else(|| choose_name(table, std::slice::from_ref(&column.name), &taken));
        taken.insert(name.clone());
        let check = CheckDef {
            name,
            expr: text,
            validated: true,
        };
        if column
            .default
            .as_deref()
            .is_some_and(|d| d.contains("nextval("))
        {
            if has_rows(s, &t).await? {
                return Err(Error::NotSupported(format!(
                    "adding column \"{}\" with a CHECK and a sequence default to a table that has rows",
                    column.name
                )));
            }
        } else {
            let value = column.default.as_deref().unwrap_or("NULL");
            let mut read = expr.clone();
            let _ = ast::visit_expressions_mut(&mut read, |e| {
                if let Expr::Identifier(i) = e
                    && args::fold(i) == column.name
                {
                    *e = Expr::Cast {
                        kind: ast::CastKind::Cast,
                        expr: Box::new(Expr::Nested(Box::new(parse_expr(value)))),
                        data_type: cd.data_type.clone(),
                        array: false,
                        format: None,
                    };
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
            let as_read = CheckDef {
                expr: read.to_string(),
                ..check.clone()
            };
            test_rows(s, &t, &as_read).await?;
        }
        out.push(check);
    }
    Ok(out)
}

fn parse_expr(sql: &str) -> Expr {
    datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(sql)
    .and_then(|mut p| p.parse_expr())
    .unwrap_or(Expr::Value(ast::Value::Null.into()))
}

async fn has_rows(s: &Session, t: &TableDef) -> Result<bool> {
    let q = format!(
        "SELECT count(*) FROM (SELECT 1 FROM {} LIMIT 1) AS r",
        crate::pgident::quote_ident(&t.name)
    );
    let batches = s.ctx.sql(&q).await?.collect().await?;
    Ok(matches!(
        super::first_value(&batches)?,
        datafusion::common::ScalarValue::Int64(Some(n)) if n > 0
    ))
}
