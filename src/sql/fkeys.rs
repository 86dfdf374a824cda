//! FOREIGN KEY constraints: declared in CREATE TABLE or added by ALTER TABLE,
//! tested on the referencing side for every row INSERT, COPY, UPDATE and upsert
//! write (23503), and on the referenced side by DELETE (NO ACTION, RESTRICT,
//! CASCADE, SET NULL), UPDATE of key columns, TRUNCATE and DROP TABLE.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::sql::sqlparser::ast::{self, ColumnOption, ReferentialAction};

use super::{Session, args};
use crate::catalog::{ColumnDef, ForeignKeyDef, KeyDef, RefAction, SqlType, TableDef};
use crate::error::{Error, Result};
use crate::pgident::quote_ident;
use crate::write::checks::value_text;

/// Values in one IN list at most.
const CHUNK: usize = 1000;

/// Whether `stmt` is an INSERT into a table with foreign keys: the SQL layer
/// runs it (DataFusion's insert would write the rows untested).
pub fn insert_into_referencing(s: &Session, stmt: &ast::Statement) -> bool {
    let ast::Statement::Insert(ins) = stmt else {
        return false;
    };
    let ast::TableObject::TableName(name) = &ins.table else {
        return false;
    };
    let Ok(table) = args::table_name(name) else {
        return false;
    };
    s.engine
        .catalog()
        .snapshot()
        .table(&s.db, &table)
        .is_ok_and(|t| !t.foreign_keys.is_empty())
}

/// The FOREIGN KEYs of a CREATE TABLE (column `REFERENCES`, then table
/// constraints). `keys` are the new table's own (a table may reference itself).
pub fn from_create(
    s: &Session,
    ct: &ast::CreateTable,
    table: &str,
    columns: &[ColumnDef],
    keys: &[KeyDef],
) -> Result<Vec<ForeignKeyDef>> {
    let mut wanted: Vec<(Option<&ast::Ident>, Vec<String>, &ast::ForeignKeyConstraint)> = vec![];
    for c in &ct.columns {
        for o in &c.options {
            if let ColumnOption::ForeignKey(fk) = &o.option {
                wanted.push((
                    o.name.as_ref().or(fk.name.as_ref()),
                    vec![args::fold(&c.name)],
                    fk,
                ));
            }
        }
    }
    for tc in &ct.constraints {
        if let ast::TableConstraint::ForeignKey(fk) = tc {
            wanted.push((
                fk.name.as_ref(),
                fk.columns.iter().map(args::fold).collect(),
                fk,
            ));
        }
    }
    let mut out: Vec<ForeignKeyDef> = vec![];
    for (name, cols, fk) in wanted {
        let def = resolve(s, table, columns, keys, name, cols, fk)?;
        if out.iter().any(|d| d.name == def.name) {
            return Err(Error::sql(
                "42710",
                format!(
                    "constraint \"{}\" for relation \"{table}\" already exists",
                    def.name
                ),
            ));
        }
        out.push(def);
    }
    Ok(out)
}

/// One FOREIGN KEY checked against the referenced table: its columns are a key
/// there (42830), types compare (42804), and its options are ones Sundial keeps.
fn resolve(
    s: &Session,
    table: &str,
    columns: &[ColumnDef],
    own_keys: &[KeyDef],
    name: Option<&ast::Ident>,
    cols: Vec<String>,
    fk: &ast::ForeignKeyConstraint,
) -> Result<ForeignKeyDef> {
    let ref_table = args::table_name(&fk.foreign_table)?;
    let name = name
        .map(args::fold)
        .unwrap_or_else(|| format!("{table}_{}_fkey", cols.join("_")));
    let m = s.engine.catalog().snapshot();
    let (ref_columns_def, ref_keys): (Vec<ColumnDef>, Vec<KeyDef>) = if ref_table == table {
        (columns.to_vec(), own_keys.to_vec())
    } else {
        let t = m.table(&s.db, &ref_table)?;
        if t.is_hypertable() || t.line_protocol {
            return Err(Error::NotSupported(format!(
                "a foreign key referencing hypertable \"{ref_table}\""
            )));
        }
        (t.columns.clone(), t.keys.clone())
    };
    let ref_cols: Vec<String> = if fk.referred_columns.is_empty() {
        match ref_keys.iter().find(|k| k.primary) {
            Some(pk) => pk.columns.clone(),
            None => {
                return Err(Error::sql(
                    "42830",
                    format!("there is no primary key for referenced table \"{ref_table}\""),
                ));
            }
        }
    } else {
        fk.referred_columns.iter().map(args::fold).collect()
    };
    if ref_cols.len() != cols.len() {
        return Err(Error::sql(
            "42830",
            "number of referencing and referenced columns for foreign key disagree",
        ));
    }
    let as_set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    if !ref_keys
        .iter()
        .any(|k| as_set(&k.columns) == as_set(&ref_cols))
    {
        return Err(Error::sql(
            "42830",
            format!(
                "there is no unique constraint matching given keys for referenced table \"{ref_table}\""
            ),
        ));
    }
    for (c, r) in cols.iter().zip(&ref_cols) {
        let mine = columns.iter().find(|d| &d.name == c).ok_or_else(|| {
            Error::sql(
                "42703",
                format!("column \"{c}\" referenced in foreign key constraint does not exist"),
            )
        })?;
        let theirs = ref_columns_def
            .iter()
            .find(|d| &d.name == r)
            .ok_or_else(|| {
                Error::sql(
                    "42703",
                    format!("column \"{r}\" referenced in foreign key constraint does not exist"),
                )
            })?;
        if !comparable(&mine.sql_type, &theirs.sql_type) {
            return Err(Error::sql_detail(
                "42804",
                format!("foreign key constraint \"{name}\" cannot be implemented"),
                format!(
                    "Key columns \"{c}\" and \"{r}\" are of incompatible types: {} and {}.",
                    mine.sql_type.pg_name(),
                    theirs.sql_type.pg_name()
                ),
            ));
        }
    }
    if fk
        .on_update
        .is_some_and(|a| !matches!(a, ReferentialAction::NoAction | ReferentialAction::Restrict))
    {
        return Err(Error::NotSupported(format!(
            "foreign key \"{name}\": ON UPDATE {} (only NO ACTION and RESTRICT)",
            fk.on_update.map(|a| a.to_string()).unwrap_or_default()
        )));
    }
    if fk
        .match_kind
        .is_some_and(|k| !matches!(k, ast::ConstraintReferenceMatchKind::Simple))
    {
        return Err(Error::NotSupported(format!(
            "foreign key \"{name}\": MATCH FULL or PARTIAL"
        )));
    }
    let on_delete = match fk.on_delete {
        None | Some(ReferentialAction::NoAction) => RefAction::NoAction,
        Some(ReferentialAction::Restrict) => RefAction::Restrict,
        Some(ReferentialAction::Cascade) => RefAction::Cascade,
        Some(ReferentialAction::SetNull) => RefAction::SetNull,
        Some(ReferentialAction::SetDefault) => {
            return Err(Error::NotSupported(format!(
                "foreign key \"{name}\": ON DELETE SET DEFAULT"
            )));
        }
    };
    if ref_table == table && matches!(on_delete, RefAction::Cascade | RefAction::SetNull) {
        return Err(Error::NotSupported(format!(
            "foreign key \"{name}\": ON DELETE CASCADE or SET NULL on a table referencing itself"
        )));
    }
    if fk
        .characteristics
        .as_ref()
        .is_some_and(|c| c.enforced == Some(false))
    {
        return Err(Error::NotSupported(format!(
            "foreign key \"{name}\": NOT ENFORCED"
        )));
    }
    Ok(ForeignKeyDef {
        name,
        columns: cols,
        ref_table,
        ref_columns: ref_cols,
        on_delete,
        validated: true,
    })
}

/// Whether values of the two types compare as equal keys.
fn comparable(a: &SqlType, b: &SqlType) -> bool {
    let family = |t: &SqlType| match t {
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => 1,
        SqlType::Text | SqlType::Varchar(_) => 2,
        _ => 0,
    };
    a == b || (family(a) != 0 && family(a) == family(b))
}

/// The distinct non-NULL key tuples of `cols` in `batch`, as text.
fn tuples(batch: &RecordBatch, cols: &[String]) -> Result<Vec<Vec<String>>> {
    let idx: Vec<usize> = cols
        .iter()
        .map(|c| {
            batch
                .schema()
                .index_of(c)
                .map_err(|e| Error::Internal(e.to_string()))
        })
        .collect::<Result<_>>()?;
    let mut seen = BTreeSet::new();
    for row in 0..batch.num_rows() {
        if idx.iter().any(|&i| batch.column(i).is_null(row)) {
            continue;
        }
        seen.insert(
            idx.iter()
                .map(|&i| value_text(batch.column(i), row))
                .collect::<Vec<_>>(),
        );
    }
    Ok(seen.into_iter().collect())
}

/// A value of a column of type `t` as an SQL literal.
fn literal(v: &str, t: &SqlType) -> String {
    match t {
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => v.to_string(),
        _ => format!("'{}'", v.replace('\'', "''")),
    }
}

/// `cols` equal one of `rows` (SQL text), for columns of `types`.
fn matching(cols: &[String], types: &[SqlType], rows: &[Vec<String>]) -> String {
    if let ([c], [t]) = (cols, types) {
        let list: Vec<String> = rows.iter().map(|r| literal(&r[0], t)).collect();
        return format!("{} IN ({})", quote_ident(c), list.join(", "));
    }
    rows.iter()
        .map(|r| {
            let parts: Vec<String> = cols
                .iter()
                .zip(types)
                .zip(r)
                .map(|((c, t), v)| format!("{} = {}", quote_ident(c), literal(v, t)))
                .collect();
            format!("({})", parts.join(" AND "))
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

fn types_of(t: &TableDef, cols: &[String]) -> Vec<SqlType> {
    cols.iter()
        .map(|c| {
            t.column(c)
                .map(|d| d.sql_type.clone())
                .unwrap_or(SqlType::Text)
        })
        .collect()
}

/// The distinct tuples of `cols` of `table` where `cond` holds, as text.
async fn select_tuples(
    s: &Session,
    table: &str,
    cols: &[String],
    cond: Option<&str>,
) -> Result<Vec<Vec<String>>> {
    let list: Vec<String> = cols.iter().map(|c| quote_ident(c)).collect();
    let mut q = format!(
        "SELECT DISTINCT {} FROM {}",
        list.join(", "),
        quote_ident(table)
    );
    if let Some(c) = cond {
        q.push_str(&format!(" WHERE {c}"));
    }
    query_tuples(s, &q).await
}

/// The rows `q` returns (no NULL in them), every column as text.
async fn query_tuples(s: &Session, q: &str) -> Result<Vec<Vec<String>>> {
    let batches = s.ctx.sql(q).await?.collect().await?;
    let mut out = vec![];
    for b in &batches {
        let names: Vec<String> = (0..b.num_columns())
            .map(|i| b.schema().field(i).name().clone())
            .collect();
        out.extend(tuples(b, &names)?);
    }
    Ok(out)
}

fn key_detail(cols: &[String], values: &[String]) -> String {
    let names: Vec<String> = cols.iter().map(|c| quote_ident(c)).collect();
    format!("Key ({})=({})", names.join(", "), values.join(", "))
}

/// 23503 for a key of `t` that `fk`'s table does not hold.
fn not_present(t: &TableDef, fk: &ForeignKeyDef, key: &[String]) -> Error {
    Error::sql_detail(
        "23503",
        format!(
            "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
            t.name, fk.name
        ),
        format!(
            "{} is not present in table \"{}\".",
            key_detail(&fk.columns, key),
            fk.ref_table
        ),
    )
}

/// 23503 when a row of `batch` (new rows of `t`) names a key its referenced
/// table does not hold. Rows with a NULL in the key pass (MATCH SIMPLE).
pub async fn check_new_rows(s: &Session, t: &TableDef, batch: &RecordBatch) -> Result<()> {
    if t.foreign_keys.is_empty() || batch.num_rows() == 0 {
        return Ok(());
    }
    let batch = crate::write::conform(t, batch)?;
    let m = s.engine.catalog().snapshot();
    for fk in &t.foreign_keys {
        let wanted = tuples(&batch, &fk.columns)?;
        if wanted.is_empty() {
            continue;
        }
        let parent = if fk.ref_table == t.name {
            Arc::new(t.clone())
        } else {
            m.table(&s.db, &fk.ref_table)?.clone()
        };
        let types = types_of(&parent, &fk.ref_columns);
        let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
        for part in wanted.chunks(CHUNK) {
            let cond = matching(&fk.ref_columns, &types, part);
            found.extend(select_tuples(s, &parent.name, &fk.ref_columns, Some(&cond)).await?);
        }
        // A table referencing itself: rows of the same statement count.
        if fk.ref_table == t.name {
            found.extend(tuples(&batch, &fk.ref_columns)?);
        }
        if let Some(missing) = wanted.iter().find(|w| !found.contains(*w)) {
            return Err(not_present(t, fk, missing));
        }
    }
    Ok(())
}

/// The foreign keys of other tables (or this one) that reference `table`.
fn referencing(s: &Session, table: &str) -> Result<Vec<(Arc<TableDef>, ForeignKeyDef)>> {
    let m = s.engine.catalog().snapshot();
    Ok(m.database(&s.db)?
        .tables
        .values()
        .flat_map(|t| {
            t.foreign_keys
                .iter()
                .filter(|fk| fk.ref_table == table)
                .map(|fk| (t.clone(), fk.clone()))
                .collect::<Vec<_>>()
        })
        .collect())
}

type Boxed<'a> = Pin<Box<dyn Future<Output = Result<Vec<super::Output>>> + Send + 'a>>;

fn run<'a>(s: &'a Session, sql: String) -> Boxed<'a> {
    Box::pin(async move { s.run_sql(&sql).await })
}

/// Before `DELETE FROM parent [WHERE selection]`: rows of other tables that
/// reference the rows going are deleted (CASCADE) or set NULL (SET NULL), else
/// the statement fails with 23503 (NO ACTION, RESTRICT).
pub async fn before_delete(
    s: &Session,
    parent: &TableDef,
    selection: Option<&ast::Expr>,
) -> Result<()> {
    let refs = referencing(s, &parent.name)?;
    if refs.is_empty() {
        return Ok(());
    }
    let cond = selection.map(|e| e.to_string());
    for (child, fk) in refs {
        let gone = select_tuples(s, &parent.name, &fk.ref_columns, cond.as_deref()).await?;
        if gone.is_empty() {
            continue;
        }
        let types = types_of(&child, &fk.columns);
        for part in gone.chunks(CHUNK) {
            let hit = matching(&fk.columns, &types, part);
            match fk.on_delete {
                RefAction::Cascade => {
                    run(
                        s,
                        format!("DELETE FROM {} WHERE {hit}", quote_ident(&child.name)),
                    )
                    .await?;
                }
                RefAction::SetNull => {
                    let sets: Vec<String> = fk
                        .columns
                        .iter()
                        .map(|c| format!("{} = NULL", quote_ident(c)))
                        .collect();
                    run(
                        s,
                        format!(
                            "UPDATE {} SET {} WHERE {hit}",
                            quote_ident(&child.name),
                            sets.join(", ")
                        ),
                    )
                    .await?;
                }
                // Rows of a table referencing itself that go too do not count.
                _ => {
                    let hit = match (&cond, child.name == parent.name) {
                        (Some(c), true) => format!("({hit}) AND NOT ({c})"),
                        (None, true) => continue,
                        _ => hit,
                    };
                    still_referenced(s, parent, &child, &fk, &hit).await?
                }
            }
        }
    }
    Ok(())
}

/// 23503 when a row of `child` matches `hit` (keys of `parent` going away).
async fn still_referenced(
    s: &Session,
    parent: &TableDef,
    child: &TableDef,
    fk: &ForeignKeyDef,
    hit: &str,
) -> Result<()> {
    let used = select_tuples(s, &child.name, &fk.columns, Some(hit)).await?;
    if let Some(k) = used.first() {
        return Err(Error::sql_detail(
            "23503",
            format!(
                "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\"",
                parent.name, fk.name, child.name
            ),
            format!(
                "{} is still referenced from table \"{}\".",
                key_detail(&fk.ref_columns, k),
                child.name
            ),
        ));
    }
    Ok(())
}

/// Before an UPDATE of `parent` that sets `columns`: where a foreign key
/// references one of them, the keys of the rows it changes must not be in use
/// (23503; ON UPDATE is NO ACTION).
pub async fn before_update(
    s: &Session,
    parent: &TableDef,
    alias: &str,
    set: &[(String, Option<String>)],
    selection: Option<&str>,
) -> Result<()> {
    for (child, fk) in referencing(s, &parent.name)? {
        let touched: Vec<&(String, Option<String>)> = set
            .iter()
            .filter(|(c, _)| fk.ref_columns.contains(c))
            .collect();
        if touched.is_empty() {
            continue;
        }
        // Rows whose key keeps its value are no change (a tuple assignment: all count).
        let changes: Option<Vec<String>> = touched
            .iter()
            .map(|(c, e)| {
                e.as_ref()
                    .map(|e| format!("{} IS DISTINCT FROM ({e})", quote_ident(c)))
            })
            .collect();
        let mut cond: Vec<String> = selection.map(|w| format!("({w})")).into_iter().collect();
        if let Some(ch) = changes {
            cond.push(format!("({})", ch.join(" OR ")));
        }
        let list: Vec<String> = fk.ref_columns.iter().map(|c| quote_ident(c)).collect();
        let mut q = format!(
            "SELECT DISTINCT {} FROM {} AS {}",
            list.join(", "),
            quote_ident(&parent.name),
            quote_ident(alias)
        );
        if !cond.is_empty() {
            q.push_str(&format!(" WHERE {}", cond.join(" AND ")));
        }
        let changing = query_tuples(s, &q).await?;
        let types = types_of(&child, &fk.columns);
        for part in changing.chunks(CHUNK) {
            let hit = matching(&fk.columns, &types, part);
            still_referenced(s, parent, &child, &fk, &hit).await?;
        }
    }
    Ok(())
}

/// TRUNCATE of tables some other table references: PostgreSQL's 0A000 unless the
/// referencing tables are truncated too.
pub fn before_truncate(s: &Session, tables: &[String]) -> Result<()> {
    for t in tables {
        for (child, _) in referencing(s, t)? {
            if !tables.contains(&child.name) {
                return Err(Error::Detailed {
                    code: "0A000",
                    message: "cannot truncate a table referenced in a foreign key constraint"
                        .into(),
                    detail: Some(format!("Table \"{}\" references \"{t}\".", child.name)),
                    hint: Some(format!(
                        "Truncate table \"{}\" at the same time, or use TRUNCATE ... CASCADE.",
                        child.name
                    )),
                });
            }
        }
    }
    Ok(())
}

/// DROP TABLE of a table other tables reference: 2BP01, or with CASCADE their
/// foreign keys go.
pub fn before_drop(s: &Session, table: &str, cascade: bool) -> Result<()> {
    let refs: Vec<_> = referencing(s, table)?
        .into_iter()
        .filter(|(c, _)| c.name != table)
        .collect();
    let Some((child, fk)) = refs.first() else {
        return Ok(());
    };
    if !cascade {
        return Err(Error::sql_detail_hint(
            "2BP01",
            format!("cannot drop table {table} because other objects depend on it"),
            format!(
                "constraint {} on table {} depends on table {table}",
                fk.name, child.name
            ),
            "Use DROP ... CASCADE to drop the dependent objects too.",
        ));
    }
    for (child, fk) in &refs {
        s.engine
            .catalog()
            .drop_foreign_key(&s.db, &child.name, &fk.name)?;
    }
    Ok(())
}

/// `ALTER TABLE t ADD [CONSTRAINT n] FOREIGN KEY … [NOT VALID]`: the stored rows
/// are tested unless NOT VALID (23503 and no constraint when one fails).
pub async fn add(
    s: &Session,
    table: &str,
    fk: &ast::ForeignKeyConstraint,
    not_valid: bool,
) -> Result<()> {
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    let cols: Vec<String> = fk.columns.iter().map(args::fold).collect();
    let mut def = resolve(s, table, &t.columns, &t.keys, fk.name.as_ref(), cols, fk)?;
    def.validated = !not_valid;
    s.engine
        .catalog()
        .add_foreign_key(&s.db, table, def.clone())?;
    if !not_valid && let Err(e) = test_rows(s, &t, &def).await {
        s.engine
            .catalog()
            .drop_foreign_key(&s.db, table, &def.name)?;
        return Err(e);
    }
    Ok(())
}

/// `VALIDATE CONSTRAINT` of a NOT VALID foreign key; whether `name` is one.
pub async fn validate(s: &Session, table: &str, name: &str) -> Result<bool> {
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    let Some(fk) = t.foreign_keys.iter().find(|f| f.name == name) else {
        return Ok(false);
    };
    if !fk.validated {
        test_rows(s, &t, fk).await?;
        s.engine
            .catalog()
            .validate_foreign_key(&s.db, table, name)?;
    }
    Ok(true)
}

/// 23503 when a stored row of `t` names a key `fk`'s table does not hold.
async fn test_rows(s: &Session, t: &TableDef, fk: &ForeignKeyDef) -> Result<()> {
    let on: Vec<String> = fk
        .columns
        .iter()
        .zip(&fk.ref_columns)
        .map(|(c, r)| format!("p.{} = c.{}", quote_ident(r), quote_ident(c)))
        .collect();
    let not_null: Vec<String> = fk
        .columns
        .iter()
        .map(|c| format!("c.{} IS NOT NULL", quote_ident(c)))
        .collect();
    let cols: Vec<String> = fk
        .columns
        .iter()
        .map(|c| format!("c.{}", quote_ident(c)))
        .collect();
    let q = format!(
        "SELECT {} FROM {} AS c WHERE {} AND NOT EXISTS (SELECT 1 FROM {} AS p WHERE {}) LIMIT 1",
        cols.join(", "),
        quote_ident(&t.name),
        not_null.join(" AND "),
        quote_ident(&fk.ref_table),
        on.join(" AND ")
    );
    match query_tuples(s, &q).await?.first() {
        Some(k) => Err(not_present(t, fk, k)),
        None => Ok(()),
    }
}
