//! Sequences as PostgreSQL has them: `CREATE`/`DROP SEQUENCE`, `serial` and
//! identity columns (their sequences, `DEFAULT` and `OVERRIDING`), INSERTs that
//! take values from them, and `nextval`/`currval`/`setval`/`lastval`/
//! `pg_get_serial_sequence` with PostgreSQL's per-session `currval`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::sql::sqlparser::ast::{
    self, Expr, Ident, ObjectName, SequenceOptions, SetExpr, Statement, TableObject,
};

use super::{Output, Session, args};
use crate::catalog::sequences::{Identity, SequenceDef, type_bounds};
use crate::catalog::{ColumnDef, SqlType, TableDef};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// How a column of a CREATE TABLE or ADD COLUMN gets its values from a sequence.
#[derive(Debug, Clone)]
pub enum Generated {
    /// `serial` and friends: a `nextval` DEFAULT.
    Serial,
    /// `GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY [ ( options ) ]`.
    Identity {
        always: bool,
        options: Vec<SequenceOptions>,
    },
}

/// The integer type of `serial`, `bigserial`, `smallserial` (and `serial4/8/2`).
pub fn serial_type(dt: &ast::DataType) -> Option<SqlType> {
    match dt.to_string().to_ascii_lowercase().as_str() {
        "serial" | "serial4" => Some(SqlType::Int4),
        "bigserial" | "serial8" => Some(SqlType::Int8),
        "smallserial" | "serial2" => Some(SqlType::Int2),
        _ => None,
    }
}

fn option_int(e: &Expr, what: &str) -> Result<i64> {
    let (neg, inner) = match e {
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => (true, expr.as_ref()),
        other => (false, other),
    };
    args::literal_text(inner)
        .and_then(|t| t.trim().parse::<i64>().ok())
        .and_then(|v| if neg { v.checked_neg() } else { Some(v) })
        .ok_or_else(|| Error::sql("22023", format!("{what} must be an integer, not {e}")))
}

/// A sequence's definition from PostgreSQL's options, with its checks (22023).
pub fn definition(
    name: &str,
    data_type: SqlType,
    options: &[SequenceOptions],
    owned_by: Option<(String, String)>,
) -> Result<SequenceDef> {
    let (tmin, tmax) = type_bounds(&data_type);
    let (mut increment, mut min, mut max, mut start, mut cache, mut cycle) =
        (1i64, None, None, None, 1i64, false);
    for o in options {
        match o {
            SequenceOptions::IncrementBy(e, _) => increment = option_int(e, "INCREMENT")?,
            SequenceOptions::MinValue(e) => {
                min = e.as_ref().map(|e| option_int(e, "MINVALUE")).transpose()?
            }
            SequenceOptions::MaxValue(e) => {
                max = e.as_ref().map(|e| option_int(e, "MAXVALUE")).transpose()?
            }
            SequenceOptions::StartWith(e, _) => start = Some(option_int(e, "START")?),
            SequenceOptions::Cache(e) => cache = option_int(e, "CACHE")?,
            // sqlparser's flag is NO.
            SequenceOptions::Cycle(no) => cycle = !*no,
        }
    }
    if increment == 0 {
        return Err(Error::sql("22023", "INCREMENT must not be zero"));
    }
    let min = min.unwrap_or(if increment > 0 { 1 } else { tmin });
    let max = max.unwrap_or(if increment > 0 { tmax } else { -1 });
    let ty = data_type.pg_name();
    if min < tmin || min > tmax {
        return Err(Error::sql(
            "22023",
            format!("MINVALUE ({min}) is out of range for sequence data type {ty}"),
        ));
    }
    if max < tmin || max > tmax {
        return Err(Error::sql(
            "22023",
            format!("MAXVALUE ({max}) is out of range for sequence data type {ty}"),
        ));
    }
    if min >= max {
        return Err(Error::sql(
            "22023",
            format!("MINVALUE ({min}) must be less than MAXVALUE ({max})"),
        ));
    }
    let start = start.unwrap_or(if increment > 0 { min } else { max });
    if start < min {
        return Err(Error::sql(
            "22023",
            format!("START value ({start}) cannot be less than MINVALUE ({min})"),
        ));
    }
    if start > max {
        return Err(Error::sql(
            "22023",
            format!("START value ({start}) cannot be greater than MAXVALUE ({max})"),
        ));
    }
    if cache < 1 {
        return Err(Error::sql(
            "22023",
            format!("CACHE ({cache}) must be greater than zero"),
        ));
    }
    Ok(SequenceDef {
        id: 0,
        name: name.to_string(),
        data_type,
        start,
        increment,
        min,
        max,
        cache,
        cycle,
        owned_by,
        last_value: start,
        is_called: false,
    })
}

/// The sequences the serial and identity columns of a new table (or of ADD
/// COLUMN) need, named `<table>_<column>_seq` as PostgreSQL names them (a number
/// appended when taken); the columns get their `nextval` DEFAULT or identity.
pub fn for_columns(
    s: &Session,
    table: &str,
    columns: &mut [ColumnDef],
    generated: &[Option<Generated>],
) -> Result<Vec<SequenceDef>> {
    let m = s.engine.catalog().snapshot();
    let d = m.database(&s.db)?;
    let mut out: Vec<SequenceDef> = vec![];
    for (c, g) in columns.iter_mut().zip(generated) {
        let Some(g) = g else { continue };
        let base = format!("{table}_{}_seq", c.name);
        let taken = |n: &str| {
            d.tables.contains_key(n)
                || d.views.contains_key(n)
                || d.sequences.contains_key(n)
                || out.iter().any(|s| s.name == n)
        };
        let mut name = base.clone();
        let mut i = 1;
        while taken(&name) {
            name = format!("{base}{i}");
            i += 1;
        }
        let owned = Some((table.to_string(), c.name.clone()));
        let seq = match g {
            Generated::Serial => definition(&name, c.sql_type.clone(), &[], owned)?,
            Generated::Identity { options, .. } => {
                definition(&name, c.sql_type.clone(), options, owned)?
            }
        };
        c.nullable = false;
        match g {
            Generated::Serial => {
                c.default = Some(nextval_default(&name));
            }
            Generated::Identity { always, .. } => {
                if c.default.is_some() {
                    return Err(Error::sql(
                        "42601",
                        format!(
                            "both default and identity specified for column \"{}\" of table \"{table}\"",
                            c.name
                        ),
                    ));
                }
                c.identity = Some(Identity {
                    always: *always,
                    sequence: name.clone(),
                });
            }
        }
        out.push(seq);
    }
    Ok(out)
}

/// `CREATE SEQUENCE`.
pub fn create(s: &Session, stmt: &Statement) -> Result<Output> {
    let Statement::CreateSequence {
        temporary,
        if_not_exists,
        name,
        data_type,
        sequence_options,
        owned_by,
    } = stmt
    else {
        return Err(Error::Internal("not CREATE SEQUENCE".into()));
    };
    if *temporary {
        return Err(Error::NotSupported(
            "CREATE TEMPORARY SEQUENCE is not supported".into(),
        ));
    }
    let seq = args::table_name(name)?;
    let ty = match data_type {
        None => SqlType::Int8,
        Some(dt) => match SqlType::parse(&dt.to_string())? {
            t @ (SqlType::Int2 | SqlType::Int4 | SqlType::Int8) => t,
            _ => {
                return Err(Error::sql(
                    "22023",
                    "sequence type must be smallint, integer, or bigint",
                ));
            }
        },
    };
    let owned = match owned_by {
        None => None,
        Some(o) if o.to_string().eq_ignore_ascii_case("none") => None,
        Some(o) => Some(owned_column(s, o)?),
    };
    let def = definition(&seq, ty, sequence_options, owned)?;
    if !s
        .engine
        .catalog()
        .create_sequence(&s.db, def, *if_not_exists)?
    {
        tracing::info!(sequence = %seq, "relation already exists, skipping");
    }
    Ok(Output::Command("CREATE SEQUENCE".into()))
}

/// `OWNED BY table.column`: the table and column, checked.
fn owned_column(s: &Session, o: &ObjectName) -> Result<(String, String)> {
    let parts: Vec<String> = o.0.iter().map(part).collect();
    let [.., table, column] = parts.as_slice() else {
        return Err(Error::sql(
            "42601",
            "invalid OWNED BY option. Hint: Specify OWNED BY table.column or OWNED BY NONE.",
        ));
    };
    let m = s.engine.catalog().snapshot();
    let t = m.table(&s.db, table)?;
    if t.column(column).is_none() {
        return Err(Error::UndefinedColumn(column.clone()));
    }
    Ok((table.clone(), column.clone()))
}

/// `DROP SEQUENCE`: refused (2BP01) while a column's default uses it, unless
/// CASCADE, which drops those defaults; a sequence a column owns goes with it only.
pub fn drop(s: &Session, names: &[ObjectName], if_exists: bool, cascade: bool) -> Result<Output> {
    for n in names {
        let name = args::table_name(n)?;
        let m = s.engine.catalog().snapshot();
        let d = m.database(&s.db)?;
        if !d.sequences.contains_key(&name) {
            if if_exists {
                continue;
            }
            crate::catalog::sequences::sequence(&m, &s.db, &name)?;
        }
        let users: Vec<(String, String)> = d
            .tables
            .values()
            .flat_map(|t| {
                t.columns
                    .iter()
                    .filter(|c| uses_sequence(c, &name))
                    .map(|c| (t.name.clone(), c.name.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        if let Some((t, c)) = users.first() {
            if !cascade {
                return Err(Error::sql_detail(
                    "2BP01",
                    format!("cannot drop sequence {name} because other objects depend on it"),
                    format!("default value for column {c} of table {t} depends on sequence {name}"),
                ));
            }
            s.engine.catalog().drop_column_defaults(&s.db, &users)?;
        }
        s.engine.catalog().drop_sequence(&s.db, &name, if_exists)?;
    }
    Ok(Output::Command("DROP SEQUENCE".into()))
}

/// Whether column `c` takes its values from sequence `seq`.
fn uses_sequence(c: &ColumnDef, seq: &str) -> bool {
    c.identity.as_ref().is_some_and(|i| i.sequence == seq)
        || c.default.as_deref().and_then(nextval_target).as_deref() == Some(seq)
}

/// `nextval('s'::regclass)` as PostgreSQL shows a serial column's default (the
/// name quoted when it needs it).
pub fn nextval_default(seq: &str) -> String {
    format!(
        "nextval('{}'::regclass)",
        crate::pgident::quote_ident(seq).replace('\'', "''")
    )
}

/// The sequence a `nextval('name'[::regclass])` default names.
pub fn nextval_target(default: &str) -> Option<String> {
    let rest = default.trim().strip_prefix("nextval('")?;
    let end = rest.find("'::regclass)").or_else(|| rest.rfind("')"))?;
    Some(relation_name(&rest[..end].replace("''", "'")))
}

/// The sequence an argument names: its name as `regclass` text reads it, or its
/// oid (`'s'::regclass`).
fn sequence_name(m: &crate::catalog::Manifest, db: &str, text: &str) -> String {
    if let Ok(oid) = text.trim().parse::<i64>()
        && let Ok(d) = m.database(db)
        && let Some(q) = d
            .sequences
            .values()
            .find(|q| i64::from(super::pg_catalog::table_oid(q.id)) == oid)
    {
        return q.name.clone();
    }
    relation_name(text)
}

/// A relation name as `regclass` text reads it: schema dropped, unquoted folded.
fn relation_name(text: &str) -> String {
    let last = text.rsplit('.').next().unwrap_or(text).trim();
    if last.starts_with('"') {
        last.trim_matches('"').replace("\"\"", "\"")
    } else {
        last.to_ascii_lowercase()
    }
}

/// The insert of `ins` with every column that takes a value from a sequence
/// written out: an omitted one gets its `nextval(...)`, a `DEFAULT` in VALUES its
/// default. A value for a `GENERATED ALWAYS` identity column is refused (428C9)
/// unless `overriding` (OVERRIDING SYSTEM VALUE).
pub fn insert_defaults(s: &Session, ins: &mut ast::Insert) -> Result<()> {
    let mark = |m: &str| {
        ins.partitioned
            .as_ref()
            .is_some_and(|p| matches!(p.as_slice(), [Expr::Identifier(i)] if i.value == m))
    };
    let (overriding, user_value) = (
        mark(super::prepass::OVERRIDING_SYSTEM),
        mark(super::prepass::OVERRIDING_USER),
    );
    if overriding || user_value {
        ins.partitioned = None;
    }
    let TableObject::TableName(name) = &ins.table else {
        return Ok(());
    };
    let Some(table) = super::insert::public_table(s, name) else {
        return Ok(());
    };
    let Some(src) = ins.source.as_mut() else {
        return Ok(());
    };
    let listed: Vec<String> = if ins.columns.is_empty() {
        let width = match src.body.as_ref() {
            SetExpr::Values(v) => v.rows.first().map_or(0, |r| r.len()),
            _ => table.columns.len(),
        };
        table
            .columns
            .iter()
            .take(width)
            .map(|c| c.name.clone())
            .collect()
    } else {
        ins.columns
            .iter()
            .map(|c| c.0.last().map(part).unwrap_or_default())
            .collect()
    };
    let default_of = |col: &str| -> Result<Expr> {
        let c = table
            .column(col)
            .ok_or_else(|| Error::UndefinedColumn(col.into()))?;
        Ok(match c.insert_default() {
            Some(sql) => parse_expr(&sql)?,
            None => Expr::value(ast::Value::Null),
        })
    };
    // DEFAULT in VALUES (and, with OVERRIDING USER VALUE, the values given for
    // identity columns).
    let mut defaulted: std::collections::HashSet<(usize, usize)> = Default::default();
    if user_value && !matches!(src.body.as_ref(), SetExpr::Values(_)) {
        return Err(Error::NotSupported(
            "OVERRIDING USER VALUE is supported with VALUES only".into(),
        ));
    }
    if let SetExpr::Values(v) = src.body.as_mut() {
        for (r, row) in v.rows.iter_mut().enumerate() {
            for (i, e) in row.iter_mut().enumerate() {
                let user_identity = user_value
                    && listed
                        .get(i)
                        .and_then(|c| table.column(c))
                        .is_some_and(|c| c.identity.is_some());
                if is_default_keyword(e) || user_identity {
                    defaulted.insert((r, i));
                    if let Some(col) = listed.get(i) {
                        *e = default_of(col)?;
                    }
                }
            }
        }
    }
    for (i, col) in listed.iter().enumerate() {
        let Some(c) = table.column(col) else { continue };
        if let Some(id) = &c.identity
            && id.always
            && !overriding
            && !all_defaults(src, i, &defaulted)
        {
            return Err(Error::sql_detail_hint(
                "428C9",
                format!("cannot insert a non-DEFAULT value into column \"{col}\""),
                format!("Column \"{col}\" is an identity column defined as GENERATED ALWAYS."),
                "Use OVERRIDING SYSTEM VALUE to override.",
            ));
        }
    }
    let omitted: Vec<&ColumnDef> = table
        .columns
        .iter()
        .filter(|c| !listed.contains(&c.name) && generates(c))
        .collect();
    if omitted.is_empty() {
        return Ok(());
    }
    if ins.columns.is_empty() {
        ins.columns = listed.iter().map(|c| column_name(c)).collect();
    }
    match src.body.as_mut() {
        SetExpr::Values(v) => {
            for row in v.rows.iter_mut() {
                for c in &omitted {
                    row.push(default_of(&c.name)?);
                }
            }
        }
        _ => {
            // INSERT … SELECT: the query's columns, then the sequences' values.
            let inner = std::mem::replace(src.as_mut(), parse_query("SELECT 1")?);
            let mut items = String::from("_sundial_src.*");
            for c in &omitted {
                if let Some(d) = c.insert_default() {
                    items.push_str(", ");
                    items.push_str(&d);
                }
            }
            let mut outer =
                parse_query(&format!("SELECT {items} FROM (SELECT 1) AS _sundial_src"))?;
            if let SetExpr::Select(sel) = outer.body.as_mut()
                && let Some(from) = sel.from.first_mut()
                && let ast::TableFactor::Derived { subquery, .. } = &mut from.relation
            {
                **subquery = inner;
            }
            *src.as_mut() = outer;
        }
    }
    for c in omitted {
        ins.columns.push(column_name(&c.name));
    }
    Ok(())
}

/// Whether column `c` takes values from a sequence when an INSERT omits it.
pub fn generates(c: &ColumnDef) -> bool {
    c.identity.is_some()
        || c.default
            .as_deref()
            .is_some_and(|d| nextval_target(d).is_some())
}

/// Whether every row of `src` gave column `i` the keyword `DEFAULT` (now written
/// out as the column's `nextval`).
fn all_defaults(
    src: &ast::Query,
    i: usize,
    defaulted: &std::collections::HashSet<(usize, usize)>,
) -> bool {
    let SetExpr::Values(v) = src.body.as_ref() else {
        return false;
    };
    (0..v.rows.len()).all(|r| defaulted.contains(&(r, i)))
}

fn is_default_keyword(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}

fn part(p: &ast::ObjectNamePart) -> String {
    p.as_ident()
        .map(args::fold)
        .unwrap_or_else(|| p.to_string())
}

fn column_name(c: &str) -> ObjectName {
    ObjectName::from(vec![Ident::with_quote('"', c.to_string())])
}

fn parse_query(sql: &str) -> Result<ast::Query> {
    match super::parse(sql)?.pop() {
        Some(Statement::Query(q)) => Ok(*q),
        _ => Err(Error::Internal(format!("not a query: {sql}"))),
    }
}

fn parse_expr(sql: &str) -> Result<Expr> {
    datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(sql)
    .and_then(|mut p| p.parse_expr())
    .map_err(|e| Error::Parse(e.to_string()))
}

/// What one session's `currval` and `lastval` answer.
#[derive(Debug, Default)]
struct Current {
    by_name: HashMap<String, i64>,
    last: Option<(String, i64)>,
}

/// Which sequence function a [`SeqFn`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Nextval,
    Currval,
    Setval,
    Lastval,
    SerialSequence,
}

/// A sequence function of one session.
#[derive(Debug)]
struct SeqFn {
    op: Op,
    engine: Arc<Engine>,
    db: String,
    current: Arc<parking_lot::Mutex<Current>>,
    signature: Signature,
}

impl PartialEq for SeqFn {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op && Arc::ptr_eq(&self.current, &other.current)
    }
}
impl Eq for SeqFn {}
impl std::hash::Hash for SeqFn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.op.hash(state);
        self.db.hash(state);
    }
}

fn texts(a: &ArrayRef) -> datafusion::error::Result<Vec<Option<String>>> {
    let a = arrow::compute::cast(a, &DataType::Utf8)?;
    let s = a
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| datafusion::error::DataFusionError::Internal("not text".into()))?;
    Ok((0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect())
}

impl SeqFn {
    fn nextval(&self, args: &[ArrayRef], scalar: bool, n: usize) -> Result<ArrayRef> {
        let names = texts(&args[0])?;
        let mut out: Vec<Option<i64>> = Vec::with_capacity(n);
        let catalog = self.engine.catalog();
        let remember = |name: &str, v: i64| {
            let mut cur = self.current.lock();
            cur.by_name.insert(name.to_string(), v);
            cur.last = Some((name.to_string(), v));
        };
        if scalar {
            let Some(Some(text)) = names.first() else {
                return Ok(Arc::new(Int64Array::from(vec![None::<i64>; n])));
            };
            let name = sequence_name(&catalog.snapshot(), &self.db, text);
            let values = catalog.nextval(&self.db, &name, n)?;
            if let Some(v) = values.last() {
                remember(&name, *v);
            }
            return Ok(Arc::new(Int64Array::from(values)));
        }
        for t in names.iter().take(n) {
            match t {
                None => out.push(None),
                Some(t) => {
                    let name = sequence_name(&catalog.snapshot(), &self.db, t);
                    let v = catalog.nextval(&self.db, &name, 1)?;
                    if let Some(v) = v.first() {
                        remember(&name, *v);
                        out.push(Some(*v));
                    }
                }
            }
        }
        Ok(Arc::new(Int64Array::from(out)))
    }

    fn run(&self, args: &[ArrayRef], scalar: bool, n: usize) -> Result<ArrayRef> {
        match self.op {
            Op::Nextval => self.nextval(args, scalar, n),
            Op::Currval => {
                let names = texts(&args[0])?;
                let m = self.engine.catalog().snapshot();
                let mut out = Vec::with_capacity(n);
                for t in names.iter().take(n) {
                    let Some(t) = t else {
                        out.push(None);
                        continue;
                    };
                    let name = sequence_name(&m, &self.db, t);
                    crate::catalog::sequences::sequence(&m, &self.db, &name)?;
                    match self.current.lock().by_name.get(&name) {
                        Some(v) => out.push(Some(*v)),
                        None => {
                            return Err(Error::sql(
                                "55000",
                                format!(
                                    "currval of sequence \"{name}\" is not yet defined in this session"
                                ),
                            ));
                        }
                    }
                }
                Ok(Arc::new(Int64Array::from(out)))
            }
            Op::Lastval => {
                let cur = self.current.lock();
                let Some((name, v)) = &cur.last else {
                    return Err(Error::sql(
                        "55000",
                        "lastval is not yet defined in this session",
                    ));
                };
                let m = self.engine.catalog().snapshot();
                crate::catalog::sequences::sequence(&m, &self.db, name)?;
                Ok(Arc::new(Int64Array::from(vec![*v; n.max(1)])))
            }
            Op::Setval => {
                let names = texts(&args[0])?;
                let values = arrow::compute::cast(&args[1], &DataType::Int64)?;
                let values = values
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| Error::Internal("setval value".into()))?;
                let called = match args.get(2) {
                    Some(a) => {
                        let b = arrow::compute::cast(a, &DataType::Boolean)?;
                        let b = b
                            .as_any()
                            .downcast_ref::<arrow::array::BooleanArray>()
                            .ok_or_else(|| Error::Internal("setval flag".into()))?
                            .clone();
                        Some(b)
                    }
                    None => None,
                };
                let mut out = Vec::with_capacity(n);
                for (i, t) in names.iter().enumerate().take(n) {
                    let flag = match &called {
                        None => Some(true),
                        Some(b) if b.is_valid(i) => Some(b.value(i)),
                        Some(_) => None,
                    };
                    let (Some(t), true, Some(flag)) = (t, values.is_valid(i), flag) else {
                        out.push(None);
                        continue;
                    };
                    let name = sequence_name(&self.engine.catalog().snapshot(), &self.db, t);
                    let v = self
                        .engine
                        .catalog()
                        .setval(&self.db, &name, values.value(i), flag)?;
                    if flag {
                        self.current.lock().by_name.insert(name, v);
                    }
                    out.push(Some(v));
                }
                Ok(Arc::new(Int64Array::from(out)))
            }
            Op::SerialSequence => {
                let tables = texts(&args[0])?;
                let columns = texts(&args[1])?;
                let m = self.engine.catalog().snapshot();
                let mut out: Vec<Option<String>> = Vec::with_capacity(n);
                for (t, c) in tables.iter().zip(&columns).take(n) {
                    let (Some(t), Some(c)) = (t, c) else {
                        out.push(None);
                        continue;
                    };
                    let table: &Arc<TableDef> = m.table(&self.db, &relation_name(t))?;
                    // The column is taken as written (PostgreSQL does not fold it).
                    let col = table
                        .column(c)
                        .ok_or_else(|| Error::UndefinedColumn(c.clone()))?;
                    let seq = match &col.identity {
                        Some(i) => Some(i.sequence.clone()),
                        None => col.default.as_deref().and_then(nextval_target).filter(|s| {
                            m.database(&self.db).is_ok_and(|d| {
                                d.sequences.get(s).is_some_and(|q| {
                                    q.owned_by.as_ref()
                                        == Some(&(table.name.clone(), col.name.clone()))
                                })
                            })
                        }),
                    };
                    out.push(seq.map(|s| format!("public.{}", crate::pgident::quote_ident(&s))));
                }
                Ok(Arc::new(StringArray::from(out)))
            }
        }
    }
}

impl ScalarUDFImpl for SeqFn {
    fn name(&self) -> &str {
        match self.op {
            Op::Nextval => "nextval",
            Op::Currval => "currval",
            Op::Setval => "setval",
            Op::Lastval => "lastval",
            Op::SerialSequence => "pg_get_serial_sequence",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(match self.op {
            Op::SerialSequence => DataType::Utf8,
            _ => DataType::Int64,
        })
    }
    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::functions::arrays_of(&args)?;
        // nextval gives one value per row even for a constant argument.
        let rows = if scalar && self.op != Op::Nextval {
            1
        } else {
            n
        };
        if n == 0 {
            return Ok(ColumnarValue::Array(arrow::array::new_null_array(
                &self.return_type(&[])?,
                0,
            )));
        }
        let out = self.run(&arrays, scalar, rows)?;
        if scalar && self.op != Op::Nextval {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// Registers the sequence functions of one session.
pub fn register(ctx: &datafusion::prelude::SessionContext, engine: &Arc<Engine>, db: &str) {
    let current = Arc::new(parking_lot::Mutex::new(Current::default()));
    // A sequence by name, or by oid (`'s'::regclass`).
    let rel = [DataType::Utf8, DataType::Int32, DataType::Int64];
    let one = || {
        rel.iter()
            .map(|t| TypeSignature::Exact(vec![t.clone()]))
            .collect()
    };
    let setval = rel
        .iter()
        .flat_map(|t| {
            [
                TypeSignature::Exact(vec![t.clone(), DataType::Int64]),
                TypeSignature::Exact(vec![t.clone(), DataType::Int64, DataType::Boolean]),
            ]
        })
        .collect();
    let sigs = [
        (Op::Nextval, one()),
        (Op::Currval, one()),
        (Op::Lastval, vec![TypeSignature::Exact(vec![])]),
        (Op::Setval, setval),
        (
            Op::SerialSequence,
            vec![TypeSignature::Exact(vec![DataType::Utf8, DataType::Utf8])],
        ),
    ];
    for (op, sig) in sigs {
        let volatility = if op == Op::SerialSequence {
            Volatility::Stable
        } else {
            Volatility::Volatile
        };
        ctx.register_udf(ScalarUDF::new_from_impl(SeqFn {
            op,
            engine: engine.clone(),
            db: db.to_string(),
            current: current.clone(),
            signature: Signature::one_of(sig, volatility),
        }));
    }
}
