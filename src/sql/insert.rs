//! Fast path for `INSERT INTO t [(cols)] VALUES (...), ...` whose values are all
//! literals: builds Arrow columns straight from the literal text and hands them to
//! the write path, skipping DataFusion planning. Anything unusual (expressions,
//! defaults, values needing PostgreSQL-specific coercion) returns `None` so the
//! general path runs and reports errors the usual way.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::DataType;
use arrow::util::display::FormatOptions;
use datafusion::sql::sqlparser::ast::{Expr, Insert, SetExpr, TableObject, UnaryOperator, Value};

use super::Session;
use crate::catalog::TableDef;
use crate::error::Result;

/// Literal text of a VALUES item, `Some(None)` for NULL, `None` if not a literal.
fn literal(e: &Expr) -> Option<Option<String>> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Null => Some(None),
            Value::Number(n, _) => Some(Some(n.clone())),
            Value::SingleQuotedString(s) => Some(Some(s.clone())),
            Value::Boolean(b) => Some(Some(b.to_string())),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => Some(Some(format!("-{n}"))),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Whether a literal can be parsed by Arrow exactly as PostgreSQL would assign it.
fn plain_for(dt: &DataType, v: &str) -> bool {
    match dt {
        // PostgreSQL rounds 2.5 into an integer column; Arrow would refuse.
        DataType::Int16 | DataType::Int32 | DataType::Int64 => !v.contains(['.', 'e', 'E']),
        // PostgreSQL rounds extra fraction digits; leave those to the general path.
        DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale) => v
            .split_once('.')
            .map(|(_, f)| f.len() <= (*scale).max(0) as usize)
            .unwrap_or(true),
        _ => true,
    }
}

/// A literal-only INSERT as read by [`scan_insert`].
#[derive(Debug, PartialEq)]
pub struct ScannedInsert {
    pub table: String,
    pub columns: Vec<String>,
    /// Column-major values; `None` is NULL.
    pub values: Vec<Vec<Option<String>>>,
    pub rows: usize,
}

/// Reads `INSERT INTO t [(c, ...)] VALUES (lit, ...), ... [;]` where every value is
/// a number, a single-quoted string, NULL, TRUE or FALSE. Returns `None` for any
/// other text (which then goes through the SQL parser). sqlparser spends most of a
/// bulk INSERT trying each literal as a typed string; this scanner does not.
pub fn scan_insert(sql: &str) -> Option<ScannedInsert> {
    let mut c = Cursor {
        s: sql.as_bytes(),
        i: 0,
    };
    c.keyword("insert")?;
    c.keyword("into")?;
    let mut table = c.ident()?;
    if c.peek() == Some(b'.') {
        if table != "public" {
            return None;
        }
        c.i += 1;
        table = c.ident()?;
    }
    let mut columns = vec![];
    c.ws();
    if c.peek() == Some(b'(') {
        c.i += 1;
        loop {
            columns.push(c.ident()?);
            c.ws();
            match c.next()? {
                b',' => continue,
                b')' => break,
                _ => return None,
            }
        }
    }
    c.keyword("values")?;
    let mut values: Vec<Vec<Option<String>>> = vec![];
    let mut rows = 0;
    loop {
        c.ws();
        if c.next()? != b'(' {
            return None;
        }
        let mut col = 0;
        loop {
            let v = c.literal()?;
            if rows == 0 {
                values.push(Vec::new());
            }
            values.get_mut(col)?.push(v);
            col += 1;
            c.ws();
            match c.next()? {
                b',' => continue,
                b')' => break,
                _ => return None,
            }
        }
        if col != values.len() {
            return None;
        }
        rows += 1;
        c.ws();
        match c.peek() {
            Some(b',') => {
                c.i += 1;
            }
            Some(b';') => {
                c.i += 1;
                c.ws();
                return (c.i == c.s.len()).then_some(ScannedInsert {
                    table,
                    columns,
                    values,
                    rows,
                });
            }
            None => {
                return Some(ScannedInsert {
                    table,
                    columns,
                    values,
                    rows,
                });
            }
            _ => return None,
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    fn word(&mut self) -> Option<&[u8]> {
        self.ws();
        let start = self.i;
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b == b'_') {
            self.i += 1;
        }
        (self.i > start).then(|| &self.s[start..self.i])
    }
    fn keyword(&mut self, kw: &str) -> Option<()> {
        self.word()?
            .eq_ignore_ascii_case(kw.as_bytes())
            .then_some(())
    }
    fn ident(&mut self) -> Option<String> {
        self.ws();
        if self.peek() == Some(b'"') {
            self.i += 1;
            let start = self.i;
            while self.peek()? != b'"' {
                self.i += 1;
            }
            let v = std::str::from_utf8(&self.s[start..self.i])
                .ok()?
                .to_string();
            self.i += 1;
            return (!v.is_empty()).then_some(v);
        }
        let w = self.word()?;
        if w[0].is_ascii_digit() {
            return None;
        }
        Some(std::str::from_utf8(w).ok()?.to_ascii_lowercase())
    }
    fn literal(&mut self) -> Option<Option<String>> {
        self.ws();
        match self.peek()? {
            b'\'' => {
                self.i += 1;
                let mut out = Vec::new();
                loop {
                    let b = self.next()?;
                    if b == b'\'' {
                        if self.peek() == Some(b'\'') {
                            self.i += 1;
                            out.push(b'\'');
                        } else {
                            break;
                        }
                    } else {
                        out.push(b);
                    }
                }
                self.ws();
                if self.peek() == Some(b':') {
                    return None; // a cast: leave it to the parser
                }
                Some(Some(String::from_utf8(out).ok()?))
            }
            b'-' | b'+' | b'.' | b'0'..=b'9' => {
                let start = self.i;
                self.i += 1;
                while matches!(self.peek(), Some(b) if b.is_ascii_digit() || b == b'.' || b == b'e' || b == b'E'
                    || ((b == b'-' || b == b'+') && matches!(self.s[self.i - 1], b'e' | b'E')))
                {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).ok()?;
                t.parse::<f64>().ok()?;
                self.ws();
                if self.peek() == Some(b':') {
                    return None;
                }
                Some(Some(t.trim_start_matches('+').to_string()))
            }
            _ => {
                let w = self.word()?;
                let v = if w.eq_ignore_ascii_case(b"null") {
                    None
                } else if w.eq_ignore_ascii_case(b"true") {
                    Some("true".to_string())
                } else if w.eq_ignore_ascii_case(b"false") {
                    Some("false".to_string())
                } else {
                    return None;
                };
                self.ws();
                if self.peek() == Some(b':') {
                    return None;
                }
                Some(v)
            }
        }
    }
}

/// The rows of an INSERT the scanner read without the parser, with their table;
/// `None` means "use the parser".
pub fn scanned_insert(s: &Session, sql: &str) -> Option<(Arc<TableDef>, RecordBatch)> {
    let ins = scan_insert(sql)?;
    let manifest = s.engine.catalog().snapshot();
    let table = manifest.table(&s.db, &ins.table).ok()?;
    let targets = targets(table, &ins.columns)?;
    if ins.values.len() != targets.len() {
        return None;
    }
    let batch = build_batch(table, &targets, ins.values, ins.rows, tz_is_utc(s))?;
    Some((table.clone(), batch))
}

fn tz_is_utc(s: &Session) -> bool {
    s.settings
        .read()
        .get("timezone")
        .map(|t| t.eq_ignore_ascii_case("utc"))
        .unwrap_or(true)
}

/// Table positions of the target columns (all columns when none are named); `None`
/// when a name is unknown or repeated, or an omitted column has a default.
fn targets(table: &TableDef, columns: &[String]) -> Option<Vec<usize>> {
    let t: Vec<usize> = if columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        let mut v = vec![];
        for c in columns {
            match table.columns.iter().position(|tc| &tc.name == c) {
                Some(i) if !v.contains(&i) => v.push(i),
                _ => return None,
            }
        }
        v
    };
    let omitted_default = table
        .columns
        .iter()
        .enumerate()
        .any(|(i, c)| (!t.contains(&i) && c.default.is_some()) || c.identity.is_some());
    (!omitted_default).then_some(t)
}

/// Tries the fast path; `Ok(None)` means "use the general path".
/// The table `name` (bare or `public.`-qualified) names in the session's database.
pub(crate) fn public_table(
    s: &Session,
    name: &datafusion::sql::sqlparser::ast::ObjectName,
) -> Option<Arc<TableDef>> {
    let table_name = match name.0.as_slice() {
        [p] => p.as_ident().map(fold),
        [schema, p] if schema.as_ident().map(fold).as_deref() == Some("public") => {
            p.as_ident().map(fold)
        }
        _ => None,
    }?;
    s.engine
        .catalog()
        .snapshot()
        .table(&s.db, &table_name)
        .ok()
        .cloned()
}

/// `INSERT INTO t VALUES (…)` or `INSERT INTO t SELECT …` with fewer values than
/// `t` has columns and no column list: PostgreSQL fills the leading columns (the
/// others take their defaults). The column list is written out so the planner does.
pub fn leading_columns(s: &Session, ins: &mut Insert) {
    if !ins.columns.is_empty() {
        return;
    }
    let (TableObject::TableName(name), Some(src)) = (&ins.table, &ins.source) else {
        return;
    };
    let width = match src.body.as_ref() {
        SetExpr::Values(v) => v.rows.first().map(|r| r.len()),
        SetExpr::Select(sel)
            if !sel.projection.iter().any(|p| {
                matches!(
                    p,
                    datafusion::sql::sqlparser::ast::SelectItem::Wildcard(_)
                        | datafusion::sql::sqlparser::ast::SelectItem::QualifiedWildcard(..)
                )
            }) =>
        {
            Some(sel.projection.len())
        }
        _ => None,
    };
    let (Some(width), Some(table)) = (width, public_table(s, name)) else {
        return;
    };
    if width == 0 || width >= table.columns.len() {
        return;
    }
    ins.columns = table.columns[..width]
        .iter()
        .map(|c| {
            datafusion::sql::sqlparser::ast::ObjectName::from(vec![
                datafusion::sql::sqlparser::ast::Ident::with_quote('"', c.name.clone()),
            ])
        })
        .collect();
}

pub async fn try_fast_insert(s: &Session, ins: &Insert) -> Result<Option<u64>> {
    if ins.on.is_some() || ins.returning.is_some() || !ins.assignments.is_empty() {
        return Ok(None);
    }
    let TableObject::TableName(name) = &ins.table else {
        return Ok(None);
    };
    let Some(src) = &ins.source else {
        return Ok(None);
    };
    if src.with.is_some() || src.order_by.is_some() || src.limit_clause.is_some() {
        return Ok(None);
    }
    let SetExpr::Values(values) = src.body.as_ref() else {
        return Ok(None);
    };
    let Some(table) = public_table(s, name) else {
        return Ok(None);
    };
    let table = &table;
    let mut columns = vec![];
    for c in &ins.columns {
        let [p] = c.0.as_slice() else { return Ok(None) };
        let Some(id) = p.as_ident() else {
            return Ok(None);
        };
        columns.push(fold(id));
    }
    let Some(targets) = targets(table, &columns) else {
        return Ok(None);
    };
    let n_rows = values.rows.len();
    let mut texts: Vec<Vec<Option<String>>> = vec![Vec::with_capacity(n_rows); targets.len()];
    for row in &values.rows {
        if row.content.len() != targets.len() {
            return Ok(None);
        }
        for (j, e) in row.content.iter().enumerate() {
            let Some(lit) = literal(e) else {
                return Ok(None);
            };
            texts[j].push(lit);
        }
    }
    match build_batch(table, &targets, texts, n_rows, tz_is_utc(s)) {
        Some(batch) => Ok(Some(s.write_rows(table, batch).await?)),
        None => Ok(None),
    }
}

fn fold(i: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

fn build_batch(
    table: &TableDef,
    targets: &[usize],
    texts: Vec<Vec<Option<String>>>,
    n_rows: usize,
    tz_is_utc: bool,
) -> Option<RecordBatch> {
    let schema = table.schema();
    let strict = CastOptions {
        safe: false,
        format_options: FormatOptions::default(),
    };
    let mut cols: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| arrow::array::new_null_array(f.data_type(), n_rows))
        .collect();
    for (vals, &i) in texts.into_iter().zip(targets) {
        let dt = schema.field(i).data_type();
        if matches!(dt, DataType::Timestamp(_, Some(_))) && !tz_is_utc {
            return None;
        }
        if !vals.iter().flatten().all(|v| plain_for(dt, v)) {
            return None;
        }
        let vals = if matches!(dt, DataType::Timestamp(..)) {
            vals.into_iter()
                .map(|v| {
                    v.map(|mut v| {
                        crate::interval::complete_seconds(&mut v);
                        v
                    })
                })
                .collect()
        } else {
            vals
        };
        let strings: ArrayRef = Arc::new(StringArray::from(vals));
        cols[i] = if dt == &DataType::Utf8 {
            strings
        } else {
            cast_with_options(&strings, dt, &strict).ok()?
        };
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(n_rows)),
    )
    // NOT NULL violations and the like: the general path reports them.
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_literal_inserts() {
        let s = scan_insert(
            "INSERT INTO public.m (time, \"Host\", v) VALUES ('2024-01-01 00:00:00+00', 'it''s', -1.5e3),\n ('x', NULL, 2) ;",
        )
        .unwrap();
        assert_eq!(s.table, "m");
        assert_eq!(s.columns, vec!["time", "Host", "v"]);
        assert_eq!(s.rows, 2);
        assert_eq!(s.values[1], vec![Some("it's".to_string()), None]);
        assert_eq!(
            s.values[2],
            vec![Some("-1.5e3".to_string()), Some("2".to_string())]
        );
        for bad in [
            "INSERT INTO m VALUES (1), (1, 2)",
            "INSERT INTO m VALUES ('a'::text)",
            "INSERT INTO m VALUES (now())",
            "INSERT INTO m VALUES (1) RETURNING *",
            "INSERT INTO m VALUES (1); SELECT 1",
            "INSERT INTO other.m VALUES (1)",
            "INSERT INTO m VALUES ('unterminated)",
            "INSERT INTO m SELECT 1",
        ] {
            assert!(scan_insert(bad).is_none(), "{bad}");
        }
    }
}
