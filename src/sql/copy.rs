//! `COPY`: `COPY t [(cols)] FROM STDIN` in PostgreSQL's text and CSV formats, parsed
//! as data arrives into Arrow columns and written through the normal write path as
//! one batch when the client ends the copy (all rows or none), and
//! `COPY t | (query) TO STDOUT` in the same formats; `FORMAT BINARY` both ways
//! through `copy_binary`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, StringBuilder};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use arrow::util::display::FormatOptions;
use bytes::{BufMut, Bytes, BytesMut};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};
use futures::StreamExt;

use super::{Output, Session};
use crate::catalog::TableDef;
use crate::error::{Error, Result};

/// Rows parsed before the text columns are converted to their types.
const ROWS_PER_BATCH: usize = 65_536;

/// Format options shared by COPY FROM and COPY TO.
#[derive(Debug, Clone)]
pub struct CopyFormat {
    pub csv: bool,
    /// `FORMAT BINARY`: PostgreSQL's binary tuples (`copy_binary`).
    pub binary: bool,
    pub delimiter: u8,
    pub null: String,
    pub quote: u8,
    pub escape: u8,
    pub header: bool,
}

impl CopyFormat {
    fn new(csv: bool) -> CopyFormat {
        CopyFormat {
            csv,
            binary: false,
            delimiter: if csv { b',' } else { b'\t' },
            null: if csv { String::new() } else { "\\N".into() },
            quote: b'"',
            escape: b'"',
            header: false,
        }
    }
}

fn bad_format(msg: impl Into<String>) -> Error {
    Error::sql("22P04", msg)
}

fn one_byte(c: char, what: &str) -> Result<u8> {
    if c.is_ascii() {
        Ok(c as u8)
    } else {
        Err(Error::sql(
            "0A000",
            format!("COPY {what} must be a single one-byte character"),
        ))
    }
}

/// Reads the options of a `COPY` statement.
fn format_of(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<CopyFormat> {
    let csv = options
        .iter()
        .any(|o| matches!(o, CopyOption::Format(f) if f.value.eq_ignore_ascii_case("csv")))
        || legacy.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_)));
    let mut f = CopyFormat::new(csv);
    let mut escape = None;
    for o in options {
        match o {
            CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "csv" | "text" => {}
                "binary" => f.binary = true,
                other => {
                    return Err(Error::sql(
                        "22023",
                        format!("COPY format \"{other}\" not recognized"),
                    ));
                }
            },
            CopyOption::Delimiter(c) => f.delimiter = one_byte(*c, "delimiter")?,
            CopyOption::Null(n) => f.null = n.clone(),
            CopyOption::Header(h) => f.header = *h,
            CopyOption::Quote(c) => f.quote = one_byte(*c, "quote")?,
            CopyOption::Escape(c) => escape = Some(one_byte(*c, "escape")?),
            CopyOption::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            CopyOption::Freeze(_) => {}
            other => return Err(Error::NotSupported(format!("COPY option {other}"))),
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Binary => f.binary = true,
            CopyLegacyOption::Delimiter(c) => f.delimiter = one_byte(*c, "delimiter")?,
            CopyLegacyOption::Null(n) => f.null = n.clone(),
            CopyLegacyOption::Header => f.header = true,
            CopyLegacyOption::Csv(opts) => {
                for c in opts {
                    match c {
                        CopyLegacyCsvOption::Header => f.header = true,
                        CopyLegacyCsvOption::Quote(q) => f.quote = one_byte(*q, "quote")?,
                        CopyLegacyCsvOption::Escape(e) => escape = Some(one_byte(*e, "escape")?),
                        other => return Err(Error::NotSupported(format!("COPY option {other}"))),
                    }
                }
            }
            other => return Err(Error::NotSupported(format!("COPY option {other}"))),
        }
    }
    f.escape = escape.unwrap_or(f.quote);
    let textual = !options
        .iter()
        .all(|o| matches!(o, CopyOption::Format(_) | CopyOption::Freeze(_)))
        || legacy
            .iter()
            .any(|o| !matches!(o, CopyLegacyOption::Binary));
    if f.binary && (f.csv || textual) {
        return Err(Error::sql(
            "42601",
            "cannot specify DELIMITER, NULL, HEADER, QUOTE, ESCAPE or CSV in BINARY mode",
        ));
    }
    if f.header && !f.csv {
        return Err(Error::sql(
            "0A000",
            "COPY HEADER available only in CSV mode",
        ));
    }
    Ok(f)
}

/// Whether `stmt` is a COPY this module runs.
pub fn handles(stmt: &Statement) -> bool {
    matches!(stmt, Statement::Copy { .. })
}

/// Starts a COPY: `Output::CopyIn` (the client sends data next) or
/// `Output::CopyOut` (a stream of rows as text lines).
pub async fn start(s: &Session, stmt: &Statement) -> Result<Output> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = stmt
    else {
        return Err(Error::Internal("not a COPY".into()));
    };
    let format = format_of(options, legacy_options)?;
    match (to, target) {
        (_, CopyTarget::File { .. } | CopyTarget::Program { .. }) => Err(Error::sql(
            "42501",
            "COPY to or from a file or program is not allowed; use STDIN/STDOUT (psql's \\copy)",
        )),
        (false, CopyTarget::Stdin) => {
            let CopySource::Table {
                table_name,
                columns,
            } = source
            else {
                return Err(Error::sql("42601", "COPY FROM needs a table"));
            };
            let name = super::args::table_name(table_name)?;
            let table = s.engine.catalog().snapshot().table(&s.db, &name)?.clone();
            let targets = if columns.is_empty() {
                (0..table.columns.len()).collect()
            } else {
                columns
                    .iter()
                    .map(|c| {
                        let n = if c.quote_style.is_some() {
                            c.value.clone()
                        } else {
                            c.value.to_ascii_lowercase()
                        };
                        table
                            .columns
                            .iter()
                            .position(|d| d.name == n)
                            .ok_or_else(|| {
                                Error::sql(
                                    "42703",
                                    format!(
                                        "column \"{n}\" of relation \"{}\" does not exist",
                                        table.name
                                    ),
                                )
                            })
                    })
                    .collect::<Result<Vec<_>>>()?
            };
            if format.binary {
                let schema = table.schema();
                for &i in &targets {
                    let f = schema.field(i);
                    // Binary json / jsonb (a version byte before jsonb's text) is not
                    // read here: refused rather than stored with the byte in it.
                    if !super::copy_binary::supported(f.data_type())
                        || crate::json::Kind::of(f).is_some()
                    {
                        return Err(Error::NotSupported(format!(
                            "binary COPY of column \"{}\" ({})",
                            table.columns[i].name,
                            table.columns[i].sql_type.pg_name()
                        )));
                    }
                }
            }
            let tz = s.settings.read().get("timezone").cloned();
            Ok(Output::CopyIn(Box::new(CopyIn::new(
                table, targets, format, tz,
            ))))
        }
        (true, CopyTarget::Stdout) => {
            let sql = match source {
                CopySource::Table {
                    table_name,
                    columns,
                } => {
                    let cols = if columns.is_empty() {
                        "*".to_string()
                    } else {
                        columns
                            .iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    format!("SELECT {cols} FROM {table_name}")
                }
                CopySource::Query(q) => q.to_string(),
            };
            let mut outs = Box::pin(s.run_sql(&sql)).await?;
            match outs.pop() {
                Some(Output::Rows(schema, stream)) if format.binary => {
                    if let Some(f) = schema.fields().iter().find(|f| {
                        !super::copy_binary::supported(f.data_type())
                            || crate::json::Kind::of(f).is_some()
                    }) {
                        return Err(Error::NotSupported(format!(
                            "binary COPY of column \"{}\" ({})",
                            f.name(),
                            crate::json::Kind::of(f)
                                .map_or_else(|| f.data_type().to_string(), |k| k.pg_name().into())
                        )));
                    }
                    Ok(Output::CopyOut(
                        schema.fields().len(),
                        true,
                        binary_out_stream(stream),
                    ))
                }
                Some(Output::Rows(schema, stream)) => Ok(Output::CopyOut(
                    schema.fields().len(),
                    false,
                    copy_out_stream(schema, stream, format),
                )),
                _ => Err(Error::sql("42601", "COPY query must return rows")),
            }
        }
        _ => Err(Error::sql(
            "42601",
            "COPY FROM reads STDIN and COPY TO writes STDOUT",
        )),
    }
}

/// A COPY FROM STDIN in progress.
#[derive(Debug)]
pub struct CopyIn {
    pub table: Arc<TableDef>,
    targets: Vec<usize>,
    format: CopyFormat,
    /// Session time zone: timestamps without an offset are read in it.
    tz: Option<String>,
    /// Bytes of a record not complete yet.
    pending: Vec<u8>,
    builders: Vec<StringBuilder>,
    rows_in_builders: usize,
    /// Line number of the first row in the builders.
    first_line: u64,
    /// Input line number of the next record.
    line: u64,
    header_done: bool,
    /// `\.` seen: later data is ignored.
    ended: bool,
    /// The binary format's tuple reader.
    binary: Option<super::copy_binary::Reader>,
    /// Converted columns (in table column order, NULL for columns not copied).
    batches: Vec<RecordBatch>,
    rows: u64,
    /// The first error; the rest of the data is then ignored.
    pub error: Option<Error>,
}

impl CopyIn {
    fn new(
        table: Arc<TableDef>,
        targets: Vec<usize>,
        format: CopyFormat,
        tz: Option<String>,
    ) -> Self {
        let n = targets.len();
        let format_binary = format.binary;
        CopyIn {
            table,
            targets,
            header_done: !format.header,
            format,
            tz,
            pending: Vec::new(),
            builders: (0..n).map(|_| StringBuilder::new()).collect(),
            rows_in_builders: 0,
            first_line: 1,
            line: 1,
            ended: false,
            binary: format_binary.then(super::copy_binary::Reader::default),
            batches: vec![],
            rows: 0,
            error: None,
        }
    }

    /// Number of columns the client sends.
    pub fn columns(&self) -> usize {
        self.targets.len()
    }

    /// Whether the client sends binary tuples.
    pub fn is_binary(&self) -> bool {
        self.binary.is_some()
    }

    /// Consumes a CopyData message.
    pub fn feed(&mut self, data: &[u8]) {
        if self.error.is_some() || self.ended {
            return;
        }
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(data);
        let used = match self.parse(&buf, false) {
            Ok(n) => n,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        buf.drain(..used);
        self.pending = buf;
    }

    /// The table positions of the columns the data gives.
    pub fn targets(&self) -> &[usize] {
        &self.targets
    }

    /// Ends the copy: the batch to write (in the table's schema) and its rows.
    pub fn finish(mut self) -> Result<(RecordBatch, u64)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let buf = std::mem::take(&mut self.pending);
        if self.binary.is_some() {
            if !buf.is_empty() {
                return Err(Error::sql(
                    "22P04",
                    "invalid COPY binary data: unexpected end of data",
                ));
            }
        } else if !self.ended && !buf.is_empty() {
            self.parse(&buf, true)?;
        }
        self.convert()?;
        let schema = batch_schema(&self.table);
        let batch = arrow::compute::concat_batches(&schema, &self.batches)?;
        Ok((batch, self.rows))
    }

    /// Parses complete records of `buf`; returns the bytes used.
    fn parse(&mut self, buf: &[u8], last: bool) -> Result<usize> {
        if let Some(reader) = self.binary.as_mut() {
            let schema = self.table.schema();
            let types: Vec<DataType> = self
                .targets
                .iter()
                .map(|&i| schema.field(i).data_type().clone())
                .collect();
            let mut rows = vec![];
            let used = reader.parse(buf, &types, &mut rows)?;
            for row in rows {
                for (b, f) in self.builders.iter_mut().zip(&row) {
                    b.append_option(f.as_deref());
                }
                self.rows_in_builders += 1;
                self.line += 1;
                if self.rows_in_builders >= ROWS_PER_BATCH {
                    self.convert()?;
                }
            }
            return Ok(used);
        }
        let mut pos = 0;
        let mut fields: Vec<Option<String>> = Vec::with_capacity(self.targets.len());
        loop {
            if pos >= buf.len() {
                return Ok(pos);
            }
            fields.clear();
            let next = if self.format.csv {
                csv_record(buf, pos, &self.format, last, &mut fields)
            } else {
                text_record(buf, pos, &self.format, last, &mut fields)
            };
            let next = match next {
                Ok(Some(n)) => n,
                Ok(None) => return Ok(pos),
                Err(msg) => return Err(bad_format(format!("{msg}, line {}", self.line))),
            };
            let lines = buf[pos..next]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                .max(1) as u64;
            pos = next;
            if fields.len() == 1 && fields[0].as_deref() == Some("\\.") {
                self.ended = true;
                return Ok(buf.len());
            }
            if !self.header_done {
                self.header_done = true;
                self.line += lines;
                self.first_line = self.line;
                continue;
            }
            if fields.len() < self.targets.len() {
                let col = &self.table.columns[self.targets[fields.len()]].name;
                return Err(bad_format(format!(
                    "missing data for column \"{col}\", line {}",
                    self.line
                )));
            }
            if fields.len() > self.targets.len() {
                return Err(bad_format(format!(
                    "extra data after last expected column, line {}",
                    self.line
                )));
            }
            for (b, f) in self.builders.iter_mut().zip(&fields) {
                b.append_option(f.as_deref());
            }
            self.rows_in_builders += 1;
            self.line += lines;
            if self.rows_in_builders >= ROWS_PER_BATCH {
                self.convert()?;
            }
        }
    }

    /// Converts the buffered text columns to the table's types.
    fn convert(&mut self) -> Result<()> {
        let n = self.rows_in_builders;
        if n == 0 {
            return Ok(());
        }
        let schema = batch_schema(&self.table);
        let mut cols: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| arrow::array::new_null_array(f.data_type(), n))
            .collect();
        let strict = CastOptions {
            safe: false,
            format_options: FormatOptions::default(),
        };
        for (b, &i) in self.builders.iter_mut().zip(&self.targets) {
            let text: ArrayRef = Arc::new(b.finish());
            let dt = schema.field(i).data_type();
            cols[i] = match cast_column(&text, dt, self.tz.as_deref(), &strict) {
                Ok(a) => a,
                Err(_) => {
                    // Find the row for the message.
                    let col = &self.table.columns[i].name;
                    let strings = text.as_any().downcast_ref::<StringArray>();
                    let mut bad = None;
                    for r in 0..n {
                        if cast_column(&text.slice(r, 1), dt, self.tz.as_deref(), &strict).is_err()
                        {
                            bad = Some(r);
                            break;
                        }
                    }
                    let r = bad.unwrap_or(0);
                    let value = strings.map(|s| s.value(r).to_string()).unwrap_or_default();
                    return Err(Error::sql(
                        "22P02",
                        format!(
                            "invalid input syntax for type {}: \"{value}\" (column {col}, line {})",
                            self.table.columns[i].sql_type.pg_name(),
                            self.first_line + r as u64
                        ),
                    ));
                }
            };
        }
        let batch = RecordBatch::try_new(schema, cols)?;
        self.rows += n as u64;
        self.batches.push(batch);
        self.rows_in_builders = 0;
        self.first_line = self.line;
        Ok(())
    }
}

/// Casts COPY text to a column type, reading zone-less timestamps in `tz`.
fn cast_column(
    text: &ArrayRef,
    dt: &DataType,
    tz: Option<&str>,
    opts: &CastOptions,
) -> Result<ArrayRef> {
    match dt {
        DataType::Utf8 => Ok(text.clone()),
        DataType::Timestamp(unit, Some(_)) => {
            let strings = text.as_any().downcast_ref::<StringArray>();
            let completed: ArrayRef = match strings {
                Some(s) => Arc::new(
                    s.iter()
                        .map(|v| {
                            v.map(|v| {
                                let mut v = v.to_string();
                                crate::interval::complete_seconds(&mut v);
                                v
                            })
                        })
                        .collect::<StringArray>(),
                ),
                None => text.clone(),
            };
            let zone = tz.unwrap_or("UTC");
            let local = cast_with_options(
                &completed,
                &DataType::Timestamp(TimeUnit::Microsecond, Some(zone.into())),
                opts,
            )?;
            Ok(cast_with_options(
                &local,
                &DataType::Timestamp(*unit, Some("UTC".into())),
                opts,
            )?)
        }
        DataType::Boolean => {
            let strings = text.as_any().downcast_ref::<StringArray>();
            match strings {
                Some(s) => {
                    let mut out = Vec::with_capacity(s.len());
                    for v in s.iter() {
                        out.push(match v {
                            None => None,
                            Some(v) => Some(match v.trim().to_ascii_lowercase().as_str() {
                                "t" | "true" | "y" | "yes" | "on" | "1" => true,
                                "f" | "false" | "n" | "no" | "off" | "0" => false,
                                _ => return Err(Error::sql("22P02", "invalid boolean")),
                            }),
                        });
                    }
                    Ok(Arc::new(arrow::array::BooleanArray::from(out)))
                }
                None => Ok(cast_with_options(text, dt, opts)?),
            }
        }
        _ => Ok(cast_with_options(text, dt, opts)?),
    }
}

/// One text-format record starting at `pos`: the position after its newline, or
/// `None` when the line is not complete yet.
fn text_record(
    buf: &[u8],
    pos: usize,
    f: &CopyFormat,
    last: bool,
    out: &mut Vec<Option<String>>,
) -> std::result::Result<Option<usize>, String> {
    let end = match buf[pos..].iter().position(|b| *b == b'\n') {
        Some(i) => pos + i,
        None if last => buf.len(),
        None => return Ok(None),
    };
    let mut line = &buf[pos..end];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let next = if end < buf.len() { end + 1 } else { end };
    if line == b"\\." {
        out.push(Some("\\.".into()));
        return Ok(Some(next));
    }
    for raw in line.split(|b| *b == f.delimiter) {
        if raw == f.null.as_bytes() {
            out.push(None);
            continue;
        }
        out.push(Some(unescape_text(raw)?));
    }
    Ok(Some(next))
}

/// PostgreSQL's text-format backslash escapes.
fn unescape_text(raw: &[u8]) -> std::result::Result<String, String> {
    if !raw.contains(&b'\\') {
        return String::from_utf8(raw.to_vec()).map_err(|_| "invalid UTF-8".to_string());
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 >= raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                let mut k = 0;
                while k < 2 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                    v = v * 8 + (raw[i] - b'0') as u32;
                    i += 1;
                    k += 1;
                }
                out.push((v & 0xff) as u8);
            }
            b'x' if i < raw.len() && raw[i].is_ascii_hexdigit() => {
                let mut v = 0u32;
                let mut k = 0;
                while k < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                    v = v * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).map_err(|_| "invalid UTF-8".to_string())
}

/// One CSV record starting at `pos` (quoted fields may hold newlines): the position
/// after it, or `None` when it is not complete yet. An unquoted field equal to the
/// NULL string is NULL; a quoted one never is.
fn csv_record(
    buf: &[u8],
    pos: usize,
    f: &CopyFormat,
    last: bool,
    out: &mut Vec<Option<String>>,
) -> std::result::Result<Option<usize>, String> {
    let mut i = pos;
    let mut field: Vec<u8> = Vec::new();
    let mut quoted = false;
    let mut in_quotes = false;
    // `\.` alone on a line ends the data.
    if buf[pos..].starts_with(b"\\.\n")
        || buf[pos..].starts_with(b"\\.\r\n")
        || (last && &buf[pos..] == b"\\.")
    {
        out.push(Some("\\.".into()));
        return Ok(Some(buf.len()));
    }
    let push = |field: &mut Vec<u8>,
                quoted: bool,
                out: &mut Vec<Option<String>>|
     -> std::result::Result<(), String> {
        let text =
            String::from_utf8(std::mem::take(field)).map_err(|_| "invalid UTF-8".to_string())?;
        if !quoted && text == f.null {
            out.push(None);
        } else {
            out.push(Some(text));
        }
        Ok(())
    };
    loop {
        if i >= buf.len() {
            if !last {
                return Ok(None);
            }
            if in_quotes {
                return Err("unterminated CSV quoted field".into());
            }
            push(&mut field, quoted, out)?;
            return Ok(Some(i));
        }
        let b = buf[i];
        if in_quotes {
            if b == f.escape
                && f.escape != f.quote
                && i + 1 < buf.len()
                && (buf[i + 1] == f.quote || buf[i + 1] == f.escape)
            {
                field.push(buf[i + 1]);
                i += 2;
                continue;
            }
            if b == f.quote {
                if f.escape == f.quote {
                    if i + 1 >= buf.len() && !last {
                        return Ok(None);
                    }
                    if i + 1 < buf.len() && buf[i + 1] == f.quote {
                        field.push(f.quote);
                        i += 2;
                        continue;
                    }
                }
                in_quotes = false;
                i += 1;
                continue;
            }
            field.push(b);
            i += 1;
            continue;
        }
        if b == f.quote {
            in_quotes = true;
            quoted = true;
            i += 1;
        } else if b == f.delimiter {
            push(&mut field, quoted, out)?;
            quoted = false;
            i += 1;
        } else if b == b'\n' || b == b'\r' {
            push(&mut field, quoted, out)?;
            i += 1;
            if b == b'\r' && buf.get(i) == Some(&b'\n') {
                i += 1;
            }
            return Ok(Some(i));
        } else {
            field.push(b);
            i += 1;
        }
    }
}

/// Rows of `stream` as COPY text or CSV, one CopyData message per row.
fn copy_out_stream(
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
    format: CopyFormat,
) -> futures::stream::BoxStream<'static, Result<Bytes>> {
    let header = format.csv && format.header;
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut first = true;
    stream
        .map(move |batch| -> Result<Vec<Bytes>> {
            let batch = batch?;
            let fields = vec![
                pgwire::api::results::FieldInfo::new(
                    String::new(),
                    None,
                    None,
                    pgwire::api::Type::TEXT,
                    pgwire::api::results::FieldFormat::Text,
                );
                batch.num_columns()
            ];
            let text = super::functions::pgtext::pg_text_batch(bools_as_text(batch)?, &fields)?;
            let cols: Vec<ArrayRef> = text
                .columns()
                .iter()
                .map(|c| arrow::compute::cast(c, &DataType::Utf8))
                .collect::<std::result::Result<_, _>>()?;
            let cols: Vec<&StringArray> = cols
                .iter()
                .filter_map(|c| c.as_any().downcast_ref::<StringArray>())
                .collect();
            let mut out = Vec::with_capacity(text.num_rows());
            let mut buf = BytesMut::new();
            for r in 0..text.num_rows() {
                if first && header {
                    for (i, n) in names.iter().enumerate() {
                        if i > 0 {
                            buf.put_u8(format.delimiter);
                        }
                        write_csv_field(&mut buf, n, &format);
                    }
                    buf.put_u8(b'\n');
                }
                first = false;
                for (i, c) in cols.iter().enumerate() {
                    if i > 0 {
                        buf.put_u8(format.delimiter);
                    }
                    if c.is_null(r) {
                        buf.put_slice(format.null.as_bytes());
                    } else if format.csv {
                        write_csv_field(&mut buf, c.value(r), &format);
                    } else {
                        write_text_field(&mut buf, c.value(r), format.delimiter);
                    }
                }
                buf.put_u8(b'\n');
                out.push(buf.split().freeze());
            }
            Ok(out)
        })
        .flat_map(|r| match r {
            Ok(v) => futures::stream::iter(v.into_iter().map(Ok).collect::<Vec<_>>()),
            Err(e) => futures::stream::iter(vec![Err(e)]),
        })
        .boxed()
}

/// Rows as binary COPY data, one message per row: the header travels with the
/// first row and the trailer comes last (with the header when there are no
/// rows), as PostgreSQL sends them; psycopg reads the header only there.
fn binary_out_stream(
    stream: SendableRecordBatchStream,
) -> futures::stream::BoxStream<'static, Result<Bytes>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let started = Arc::new(AtomicBool::new(false));
    let first = started.clone();
    let rows = stream
        .map(|batch| -> Result<Vec<Bytes>> { super::copy_binary::encode(&batch?) })
        .flat_map(|r| match r {
            Ok(v) => futures::stream::iter(v.into_iter().map(Ok).collect::<Vec<_>>()),
            Err(e) => futures::stream::iter(vec![Err(e)]),
        })
        .map(move |row| {
            row.map(|row| {
                if first.swap(true, Ordering::SeqCst) {
                    row
                } else {
                    [super::copy_binary::header(), row].concat().into()
                }
            })
        });
    let end = futures::stream::once(async move {
        let trailer = Bytes::from_static(&[0xff, 0xff]);
        Ok(if started.swap(true, Ordering::SeqCst) {
            trailer
        } else {
            [super::copy_binary::header(), trailer].concat().into()
        })
    });
    rows.chain(end).boxed()
}

/// PostgreSQL prints booleans as `t` / `f`.
fn bools_as_text(batch: RecordBatch) -> Result<RecordBatch> {
    if !batch
        .columns()
        .iter()
        .any(|c| c.data_type() == &DataType::Boolean)
    {
        return Ok(batch);
    }
    let mut fields = vec![];
    let mut cols: Vec<ArrayRef> = vec![];
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if let Some(b) = c.as_any().downcast_ref::<arrow::array::BooleanArray>() {
            cols.push(Arc::new(
                b.iter()
                    .map(|v| v.map(|v| if v { "t" } else { "f" }))
                    .collect::<StringArray>(),
            ));
            fields.push(f.as_ref().clone().with_data_type(DataType::Utf8));
        } else {
            cols.push(c.clone());
            fields.push(f.as_ref().clone());
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        cols,
    )?)
}

fn write_text_field(buf: &mut BytesMut, v: &str, delimiter: u8) {
    for &b in v.as_bytes() {
        match b {
            b'\\' => buf.put_slice(b"\\\\"),
            b'\n' => buf.put_slice(b"\\n"),
            b'\r' => buf.put_slice(b"\\r"),
            b'\t' if delimiter == b'\t' => buf.put_slice(b"\\t"),
            d if d == delimiter => {
                buf.put_u8(b'\\');
                buf.put_u8(d);
            }
            other => buf.put_u8(other),
        }
    }
}

fn write_csv_field(buf: &mut BytesMut, v: &str, f: &CopyFormat) {
    let needs = v.is_empty() && f.null.is_empty()
        || v == f.null
        || v.bytes()
            .any(|b| b == f.delimiter || b == f.quote || b == b'\n' || b == b'\r' || b == f.escape)
        || v == "\\.";
    if !needs {
        buf.put_slice(v.as_bytes());
        return;
    }
    buf.put_u8(f.quote);
    for &b in v.as_bytes() {
        if b == f.quote || b == f.escape {
            buf.put_u8(f.escape);
        }
        buf.put_u8(b);
    }
    buf.put_u8(f.quote);
}

/// The table's schema with every column nullable: columns a COPY does not give
/// are NULL until their defaults fill them (NOT NULL is checked when written).
fn batch_schema(table: &TableDef) -> SchemaRef {
    let schema = table.schema();
    let fields: Vec<arrow::datatypes::FieldRef> = schema
        .fields()
        .iter()
        .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
        .collect();
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// The columns a COPY does not give take their defaults, as PostgreSQL fills them:
/// constants, `now()`, and a sequence's next values (one per row).
pub fn with_defaults(
    s: &Session,
    table: &TableDef,
    targets: &[usize],
    batch: RecordBatch,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    if n == 0 {
        return Ok(batch);
    }
    let mut cols = batch.columns().to_vec();
    let mut changed = false;
    for (i, c) in table.columns.iter().enumerate() {
        if targets.contains(&i) {
            continue;
        }
        let Some(d) = c.insert_default() else {
            continue;
        };
        let dt = c.sql_type.to_arrow();
        let values: ArrayRef = match super::sequences::nextval_target(&d) {
            Some(seq) => Arc::new(arrow::array::Int64Array::from(
                s.engine.catalog().nextval(&s.db, &seq, n)?,
            )),
            None => {
                let expr = crate::query::provider::default_expr(&d, &dt)?;
                let empty = datafusion::common::DFSchema::empty();
                let phys = s.ctx.state().create_physical_expr(expr, &empty)?;
                let rows = RecordBatch::try_new_with_options(
                    Arc::new(arrow::datatypes::Schema::empty()),
                    vec![],
                    &arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
                )?;
                phys.evaluate(&rows)?.into_array(n)?
            }
        };
        cols[i] = crate::storage::cast_column(&values, &dt)?;
        changed = true;
    }
    if !changed {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(batch.schema(), cols)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv_fields(s: &str) -> Vec<Option<String>> {
        let mut out = vec![];
        csv_record(s.as_bytes(), 0, &CopyFormat::new(true), true, &mut out).unwrap();
        out
    }

    #[test]
    fn csv_quotes_nulls_and_newlines() {
        assert_eq!(
            csv_fields("a,,\"\",\"x,\"\"y\"\"\nz\"\n"),
            vec![
                Some("a".into()),
                None,
                Some(String::new()),
                Some("x,\"y\"\nz".into())
            ]
        );
        let mut out = vec![];
        assert_eq!(
            csv_record(b"a,\"open", 0, &CopyFormat::new(true), false, &mut out).unwrap(),
            None
        );
    }

    #[test]
    fn text_escapes() {
        let mut out = vec![];
        let f = CopyFormat::new(false);
        let n = text_record(b"a\\tb\t\\N\t\\\\x\\101\nnext", 0, &f, false, &mut out).unwrap();
        assert_eq!(n, Some(16));
        assert_eq!(out, vec![Some("a\tb".into()), None, Some("\\xA".into())]);
    }
}
