//! Unique keys as DDL: `CREATE [UNIQUE] INDEX`, `DROP INDEX`, `ALTER TABLE
//! ADD/DROP/VALIDATE CONSTRAINT` (PRIMARY KEY, UNIQUE; CHECK goes to `checks`). Sundial keeps no secondary indexes
//! (chunks are pruned by their statistics): a plain index is accepted and changes
//! nothing, a unique one is a key every write checks.

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{self, AlterTableOperation, ObjectType, Statement};

use super::{Output, Session, args};
use crate::catalog::KeyDef;
use crate::error::{Error, Result};

/// PostgreSQL's name for a constraint: `t_pkey`, `t_a_b_key`.
pub(crate) fn key_name(table: &str, columns: &[String], primary: bool) -> String {
    if primary {
        format!("{table}_pkey")
    } else {
        format!("{table}_{}_key", columns.join("_"))
    }
}

/// Whether this module runs the statement.
pub fn handles(stmt: &Statement) -> bool {
    match stmt {
        Statement::CreateIndex(_) => true,
        Statement::Drop {
            object_type: ObjectType::Index,
            ..
        } => true,
        Statement::AlterTable(at) => {
            !at.operations.is_empty()
                && at.operations.iter().all(|op| {
                    matches!(
                        op,
                        AlterTableOperation::AddConstraint { .. }
                            | AlterTableOperation::DropConstraint { .. }
                            | AlterTableOperation::ValidateConstraint { .. }
                    )
                })
        }
        _ => false,
    }
}

pub async fn run(s: &Session, stmt: &Statement) -> Result<Output> {
    match stmt {
        Statement::CreateIndex(ci) => create_index(s, ci).await,
        Statement::Drop {
            names, if_exists, ..
        } => {
            for n in names {
                let name = args::ident_name(n)?;
                settle_versions(s, None, &name).await?;
                if s.engine.catalog().drop_key(&s.db, None, &name)?.is_none() && !*if_exists {
                    // Plain indexes are not kept: dropping one finds nothing to do.
                    tracing::debug!(index = %name, "DROP INDEX of an index Sundial does not keep");
                }
            }
            Ok(Output::Command("DROP INDEX".into()))
        }
        Statement::AlterTable(at) => alter(s, at).await,
        _ => Err(Error::Internal("not a constraint statement".into())),
    }
}

fn index_columns(cols: &[ast::IndexColumn]) -> Option<Vec<String>> {
    cols.iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(i) => Some(args::fold(i)),
            _ => None,
        })
        .collect()
}

async fn create_index(s: &Session, ci: &ast::CreateIndex) -> Result<Output> {
    let table = args::table_name(&ci.table_name)?;
    let t = s.engine.catalog().snapshot().table(&s.db, &table)?.clone();
    let cols = index_columns(&ci.columns);
    if let Some(cols) = &cols {
        for c in cols {
            if t.column(c).is_none() {
                return Err(Error::UndefinedColumn(c.clone()));
            }
        }
    }
    if !ci.unique {
        return Ok(Output::Command("CREATE INDEX".into()));
    }
    let Some(cols) = cols else {
        return Err(Error::NotSupported(
            "a unique index on an expression".into(),
        ));
    };
    if ci.predicate.is_some() {
        return Err(Error::NotSupported("a partial unique index".into()));
    }
    let name = match &ci.name {
        Some(n) => args::ident_name(n)?,
        None => format!("{table}_{}_idx", cols.join("_")),
    };
    if ci.if_not_exists
        && s.engine
            .catalog()
            .snapshot()
            .database(&s.db)?
            .tables
            .values()
            .any(|t| t.keys.iter().any(|k| k.name == name))
    {
        return Ok(Output::Command("CREATE INDEX".into()));
    }
    add(
        s,
        &table,
        KeyDef {
            name,
            columns: cols,
            primary: false,
        },
        true,
    )
    .await?;
    Ok(Output::Command("CREATE INDEX".into()))
}

async fn alter(s: &Session, at: &ast::AlterTable) -> Result<Output> {
    let table = args::table_name(&at.name)?;
    for op in &at.operations {
        match op {
            AlterTableOperation::AddConstraint {
                constraint: ast::TableConstraint::Check(c),
                not_valid,
            } => {
                let name = c.name.as_ref().map(args::fold);
                super::checks::add(s, &table, name, &c.expr, None, *not_valid).await?;
            }
            AlterTableOperation::AddConstraint {
                constraint: ast::TableConstraint::ForeignKey(fk),
                not_valid,
            } => {
                super::fkeys::add(s, &table, fk, *not_valid).await?;
            }
            AlterTableOperation::ValidateConstraint { name } => {
                let name = args::fold(name);
                if !super::fkeys::validate(s, &table, &name).await? {
                    super::checks::validate(s, &table, &name).await?;
                }
            }
            AlterTableOperation::AddConstraint { constraint, .. } => {
                let (name, cols, primary) = match constraint {
                    ast::TableConstraint::PrimaryKey(p) => (p.name.as_ref(), &p.columns, true),
                    ast::TableConstraint::Unique(u) => (u.name.as_ref(), &u.columns, false),
                    other => {
                        return Err(Error::NotSupported(format!(
                            "ALTER TABLE ADD {other} (only PRIMARY KEY and UNIQUE constraints)"
                        )));
                    }
                };
                let cols = index_columns(cols)
                    .ok_or_else(|| Error::NotSupported("a key on an expression".into()))?;
                let name = match name {
                    Some(n) => args::fold(n),
                    None => key_name(&table, &cols, primary),
                };
                add(
                    s,
                    &table,
                    KeyDef {
                        name,
                        columns: cols,
                        primary,
                    },
                    false,
                )
                .await?;
            }
            AlterTableOperation::DropConstraint {
                if_exists, name, ..
            } => {
                let name = args::fold(name);
                settle_versions(s, Some(&table), &name).await?;
                if s.engine
                    .catalog()
                    .drop_key(&s.db, Some(&table), &name)?
                    .is_none()
                    && !s.engine.catalog().drop_check(&s.db, &table, &name)?
                    && !s.engine.catalog().drop_foreign_key(&s.db, &table, &name)?
                    && !*if_exists
                {
                    return Err(Error::sql(
                        "42704",
                        format!("constraint \"{name}\" of relation \"{table}\" does not exist"),
                    ));
                }
            }
            _ => return Err(Error::Internal("not a constraint operation".into())),
        }
    }
    Ok(Output::Command("ALTER TABLE".into()))
}

/// Adds `key` to `table` once the stored rows satisfy it: a hypertable must be
/// empty (its files are sorted and merged by its key from the start), a plain
/// table's rows must hold no repeated key and, for a primary key, no NULL.
async fn add(s: &Session, table: &str, key: KeyDef, index: bool) -> Result<()> {
    s.engine.flush().await?;
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    if t.is_hypertable() && !t.files.is_empty() {
        return Err(Error::NotSupported(format!(
            "adding a unique key to hypertable \"{table}\", which has rows: declare it in CREATE TABLE, or before the first write"
        )));
    }
    if !t.files.is_empty() {
        let cols: Vec<String> = key.columns.iter().map(|c| quote(c)).collect();
        let list = cols.join(", ");
        let q = quote(table);
        if key.primary {
            let nulls = cols
                .iter()
                .map(|c| format!("{c} IS NULL"))
                .collect::<Vec<_>>()
                .join(" OR ");
            let n = count(s, &format!("SELECT count(*) FROM {q} WHERE {nulls}")).await?;
            if n > 0 {
                return Err(Error::sql(
                    "23502",
                    format!("column of relation \"{table}\" contains null values"),
                ));
            }
        }
        let not_null = cols
            .iter()
            .map(|c| format!("{c} IS NOT NULL"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let dups = count(
            s,
            &format!(
                "SELECT count(*) FROM (SELECT {list} FROM {q} WHERE {not_null} GROUP BY {list} HAVING count(*) > 1) AS d"
            ),
        )
        .await?;
        if dups > 0 {
            return Err(Error::sql(
                "23505",
                format!("could not create unique index \"{}\"", key.name),
            ));
        }
    }
    s.engine.catalog().add_key(&s.db, table, key, index)
}

/// Before the key that merges a hypertable's row versions goes: every chunk
/// merged into one file, so each key keeps only its latest version.
async fn settle_versions(s: &Session, table: Option<&str>, key: &str) -> Result<()> {
    let m = s.engine.catalog().snapshot();
    let merges =
        m.database(&s.db)?.tables.iter().any(|(n, t)| {
            table.is_none_or(|w| w == n) && t.dedup_key().is_some_and(|k| k.name == key)
        });
    if merges {
        s.engine.flush().await?;
        s.engine.compact(false).await?;
    }
    Ok(())
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn count(s: &Session, sql: &str) -> Result<i64> {
    let batches = s.ctx.sql(sql).await?.collect().await?;
    Ok(match super::first_value(&batches)? {
        ScalarValue::Int64(Some(n)) => n,
        _ => 0,
    })
}
