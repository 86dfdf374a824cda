//! InfluxDB line protocol into hypertables: the zero-copy parser, conversion of a
//! body into one Arrow batch per measurement (schema on write, type checks against
//! existing columns), and the write that creates databases, tables and columns.

pub mod parser;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
    TimestampMicrosecondArray, UInt64Builder,
};
use arrow::datatypes::{Field, Schema};

use crate::catalog::roles::Privilege;
use crate::catalog::{ColumnDef, ColumnsWanted, NewTable, SqlType, TableDef};
use crate::engine::Engine;
use crate::error::{Error, Result};
use parser::{EscStr, FieldValue, Parser};

/// Most columns a line-protocol table may grow to (InfluxDB 3 allows 500).
pub const MAX_COLUMNS: usize = 1024;

/// Bad lines reported in full per request; the rest are only counted.
pub const MAX_REPORTED_ERRORS: usize = 100;
/// Measurements one request may write (each is a table).
pub const MAX_MEASUREMENTS: usize = 10_000;
/// Time range accepted (microseconds either side of the epoch, about 146,000 years):
/// chunk arithmetic never overflows inside it.
const TIME_LIMIT: i64 = 1 << 62;

/// The bad lines of a body: the first ones in full, all of them counted.
#[derive(Default)]
struct Errors {
    kept: Vec<LineError>,
    total: usize,
}

impl Errors {
    fn add(&mut self, f: impl FnOnce() -> LineError) {
        self.total += 1;
        if self.kept.len() < MAX_REPORTED_ERRORS {
            self.kept.push(f());
        }
    }
}

/// Timestamp unit of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Guess from the magnitude (InfluxDB 3 `auto`).
    Auto,
    Nanos,
    Micros,
    Millis,
    Seconds,
    Minutes,
    Hours,
}

impl Precision {
    /// `/write` (1.x): n, ns, u, us, ms, s, m, h; default ns.
    pub fn parse_v1(s: Option<&str>) -> std::result::Result<Precision, String> {
        match s.unwrap_or("") {
            "" | "n" | "ns" => Ok(Precision::Nanos),
            "u" | "us" | "µ" => Ok(Precision::Micros),
            "ms" => Ok(Precision::Millis),
            "s" => Ok(Precision::Seconds),
            "m" => Ok(Precision::Minutes),
            "h" => Ok(Precision::Hours),
            other => Err(format!(
                "invalid precision \"{other}\" (use n, u, ms, s, m or h)"
            )),
        }
    }

    /// `/api/v2/write`: ns, us, ms, s; default ns.
    pub fn parse_v2(s: Option<&str>) -> std::result::Result<Precision, String> {
        match s.unwrap_or("") {
            "" | "ns" => Ok(Precision::Nanos),
            "us" => Ok(Precision::Micros),
            "ms" => Ok(Precision::Millis),
            "s" => Ok(Precision::Seconds),
            other => Err(format!(
                "invalid precision \"{other}\" (use ns, us, ms or s)"
            )),
        }
    }

    /// `/api/v3/write_lp`: auto (default), s, ms, us, ns and their long names.
    pub fn parse_v3(s: Option<&str>) -> std::result::Result<Precision, String> {
        match s.unwrap_or("") {
            "" | "auto" => Ok(Precision::Auto),
            "ns" | "n" | "nanosecond" => Ok(Precision::Nanos),
            "us" | "u" | "microsecond" => Ok(Precision::Micros),
            "ms" | "millisecond" => Ok(Precision::Millis),
            "s" | "second" => Ok(Precision::Seconds),
            other => Err(format!(
                "invalid precision \"{other}\" (use auto, s, ms, us or ns)"
            )),
        }
    }

    /// A timestamp in this unit as microseconds (nanoseconds are truncated).
    pub fn to_micros(self, ts: i64) -> Option<i64> {
        let unit = match self {
            Precision::Auto => auto_unit(ts),
            p => p,
        };
        match unit {
            Precision::Nanos => Some(ts.div_euclid(1000)),
            Precision::Micros => Some(ts),
            Precision::Millis => ts.checked_mul(1000),
            Precision::Seconds => ts.checked_mul(1_000_000),
            Precision::Minutes => ts.checked_mul(60_000_000),
            Precision::Hours => ts.checked_mul(3_600_000_000),
            Precision::Auto => None,
        }
    }

    /// The current time truncated to this unit, in microseconds.
    pub fn now_micros(self) -> i64 {
        let now = chrono::Utc::now().timestamp_micros();
        let unit = match self {
            Precision::Nanos | Precision::Micros | Precision::Auto => 1,
            Precision::Millis => 1000,
            Precision::Seconds => 1_000_000,
            Precision::Minutes => 60_000_000,
            Precision::Hours => 3_600_000_000,
        };
        now - now.rem_euclid(unit)
    }
}

/// InfluxDB 3's guess of a timestamp's unit from its number of digits.
fn auto_unit(ts: i64) -> Precision {
    let a = ts.unsigned_abs();
    if a < 10_000_000_000 {
        Precision::Seconds
    } else if a < 10_000_000_000_000 {
        Precision::Millis
    } else if a < 10_000_000_000_000_000 {
        Precision::Micros
    } else {
        Precision::Nanos
    }
}

/// One rejected line.
#[derive(Debug, Clone, PartialEq)]
pub struct LineError {
    /// 1-based line number in the body.
    pub line: usize,
    /// The line (cut to 256 bytes).
    pub text: String,
    /// The message InfluxDB would give, e.g. `unable to parse '...': missing fields`.
    pub message: String,
}

/// Value kinds of line protocol (tags are text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tag,
    Float,
    Int,
    UInt,
    Str,
    Bool,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tag => "tag",
            Kind::Float => "float",
            Kind::Int => "integer",
            Kind::UInt => "unsigned",
            Kind::Str => "string",
            Kind::Bool => "boolean",
        }
    }

    /// Column type of a new column of this kind.
    pub fn sql_type(self) -> SqlType {
        match self {
            Kind::Tag | Kind::Str => SqlType::Text,
            Kind::Float => SqlType::Float8,
            Kind::Int => SqlType::Int8,
            Kind::UInt => SqlType::Numeric(20, 0),
            Kind::Bool => SqlType::Bool,
        }
    }

    fn of(v: &FieldValue<'_>) -> Kind {
        match v {
            FieldValue::Float(_) => Kind::Float,
            FieldValue::Int(_) => Kind::Int,
            FieldValue::UInt(_) => Kind::UInt,
            FieldValue::Str(_) => Kind::Str,
            FieldValue::Bool(_) => Kind::Bool,
        }
    }
}

/// How InfluxDB names the type of an existing column.
fn existing_kind_name(t: &SqlType, is_tag: bool) -> &'static str {
    match t {
        _ if is_tag => "tag",
        SqlType::Float4 | SqlType::Float8 => "float",
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => "integer",
        SqlType::Numeric(_, _) => "unsigned",
        SqlType::Text | SqlType::Varchar(_) => "string",
        SqlType::Bool => "boolean",
        _ => "other",
    }
}

/// Whether a value of `kind` may go into an existing column. Tables made by line
/// protocol are strict, as InfluxDB is; tables made by SQL take any value that
/// casts losslessly.
fn accepts(table: &TableDef, col: &ColumnDef, kind: Kind) -> bool {
    let is_tag = table.series_key.contains(&col.name);
    let lp_table = table.line_protocol;
    let t = &col.sql_type;
    match kind {
        Kind::Tag => matches!(t, SqlType::Text | SqlType::Varchar(_)) && (is_tag || !lp_table),
        Kind::Str => matches!(t, SqlType::Text | SqlType::Varchar(_)) && !is_tag,
        Kind::Bool => *t == SqlType::Bool,
        Kind::Float if lp_table => *t == SqlType::Float8,
        Kind::Int if lp_table => *t == SqlType::Int8,
        Kind::UInt if lp_table => matches!(t, SqlType::Numeric(_, _)),
        Kind::Float => matches!(
            t,
            SqlType::Float4 | SqlType::Float8 | SqlType::Numeric(_, _) | SqlType::NumericAny
        ),
        Kind::Int | Kind::UInt => {
            matches!(
                t,
                SqlType::Int8 | SqlType::Float8 | SqlType::Numeric(_, _) | SqlType::NumericAny
            )
        }
    }
}

enum ColData {
    Text(StringBuilder),
    F64(Float64Builder),
    I64(Int64Builder),
    U64(UInt64Builder),
    Bool(BooleanBuilder),
}

impl ColData {
    fn new(kind: Kind) -> ColData {
        match kind {
            Kind::Tag | Kind::Str => ColData::Text(StringBuilder::new()),
            Kind::Float => ColData::F64(Float64Builder::new()),
            Kind::Int => ColData::I64(Int64Builder::new()),
            Kind::UInt => ColData::U64(UInt64Builder::new()),
            Kind::Bool => ColData::Bool(BooleanBuilder::new()),
        }
    }
    fn len(&self) -> usize {
        use arrow::array::ArrayBuilder;
        match self {
            ColData::Text(b) => b.len(),
            ColData::F64(b) => b.len(),
            ColData::I64(b) => b.len(),
            ColData::U64(b) => b.len(),
            ColData::Bool(b) => b.len(),
        }
    }
    fn pad(&mut self, rows: usize) {
        let n = rows.saturating_sub(self.len());
        if n == 0 {
            return;
        }
        match self {
            ColData::Text(b) => (0..n).for_each(|_| b.append_null()),
            ColData::F64(b) => b.append_nulls(n),
            ColData::I64(b) => b.append_nulls(n),
            ColData::U64(b) => b.append_nulls(n),
            ColData::Bool(b) => b.append_nulls(n),
        }
    }
    fn finish(&mut self) -> ArrayRef {
        match self {
            ColData::Text(b) => Arc::new(b.finish()),
            ColData::F64(b) => Arc::new(b.finish()),
            ColData::I64(b) => Arc::new(b.finish()),
            ColData::U64(b) => Arc::new(b.finish()),
            ColData::Bool(b) => Arc::new(b.finish()),
        }
    }
}

struct Col {
    name: String,
    kind: Kind,
    /// Not in the table yet: the write adds it.
    new: bool,
    data: ColData,
}

/// Rows of one measurement being built.
struct MeasurementBuilder {
    name: String,
    table: Option<Arc<TableDef>>,
    time: Vec<i64>,
    cols: Vec<Col>,
    index: HashMap<String, usize>,
    /// Column used at each tag / field position by the previous line: lines of one
    /// measurement nearly always list the same keys in the same order.
    last_tags: Vec<usize>,
    last_fields: Vec<usize>,
    lines: Vec<usize>,
}

/// A column reference resolved for one line: existing column or one to create.
#[derive(Clone, Copy)]
enum Slot {
    Col(usize),
    /// A column this body has not used yet; `fresh` when the table lacks it too.
    New {
        kind: Kind,
        fresh: bool,
    },
}

/// The builder for an existing column: values are built in the column's own type,
/// so a SQL table's `float8` column can take integers without losing any.
fn builder_kind(table: &TableDef, def: &ColumnDef, given: Kind) -> Kind {
    match &def.sql_type {
        SqlType::Float4 | SqlType::Float8 => Kind::Float,
        SqlType::Numeric(_, _) if table.line_protocol => Kind::UInt,
        SqlType::Numeric(_, _) | SqlType::NumericAny => Kind::Float,
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => Kind::Int,
        SqlType::Bool => Kind::Bool,
        _ => given,
    }
}

impl MeasurementBuilder {
    fn new(name: String, table: Option<Arc<TableDef>>) -> Self {
        MeasurementBuilder {
            name,
            table,
            time: Vec::new(),
            cols: Vec::new(),
            index: HashMap::new(),
            last_tags: Vec::new(),
            last_fields: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn find(&self, pos_cache: &[usize], j: usize, key: &str) -> Option<usize> {
        if let Some(&c) = pos_cache.get(j)
            && self.cols.get(c).is_some_and(|col| col.name == key)
        {
            return Some(c);
        }
        self.index.get(key).copied()
    }

    /// Checks a key against this body's columns and the table; returns the slot or
    /// the reason the line is rejected.
    fn resolve(
        &self,
        pos_cache: &[usize],
        j: usize,
        key: &str,
        kind: Kind,
    ) -> std::result::Result<Slot, String> {
        let time_col = self
            .table
            .as_ref()
            .and_then(|t| t.time_column.as_deref())
            .unwrap_or("time");
        if key == time_col || key == "time" {
            return Err(format!(
                "invalid {} key \"{key}\": the name of the time column",
                if kind == Kind::Tag { "tag" } else { "field" }
            ));
        }
        if let Some(c) = self.find(pos_cache, j, key) {
            let col = &self.cols[c];
            let ok = match (&self.table, col.new) {
                // A column the table already has takes what its type accepts.
                (Some(t), false) => t.column(key).is_some_and(|def| accepts(t, def, kind)),
                _ => col.kind == kind,
            };
            if ok {
                return Ok(Slot::Col(c));
            }
            let existing = match (&self.table, col.new) {
                (Some(t), false) => t.column(key).map_or(col.kind.name(), |def| {
                    existing_kind_name(&def.sql_type, t.series_key.contains(&def.name))
                }),
                _ => col.kind.name(),
            };
            return Err(conflict(key, &self.name, kind, existing));
        }
        if let Some(t) = &self.table
            && let Some(def) = t.column(key)
        {
            let is_tag = t.series_key.contains(&def.name);
            if accepts(t, def, kind) {
                return Ok(Slot::New {
                    kind: builder_kind(t, def, kind),
                    fresh: false,
                });
            }
            return Err(conflict(
                key,
                &self.name,
                kind,
                existing_kind_name(&def.sql_type, is_tag),
            ));
        }
        // A table made with SQL keeps the columns its owner gave it, unless it
        // was created to take them.
        if let Some(t) = &self.table
            && !t.line_protocol
            && !t.lp_columns
        {
            return Err(format!(
                "table \"{}\" was created with SQL and has no column \"{key}\"; line \
                 protocol adds columns only to tables it created or created WITH \
                 (sundial.line_protocol_columns = true) (ALTER TABLE ... ADD COLUMN first)",
                self.name
            ));
        }
        Ok(Slot::New { kind, fresh: true })
    }

    fn column(&mut self, slot: Slot, key: &str) -> usize {
        match slot {
            Slot::Col(c) => c,
            Slot::New { kind, fresh } => {
                let new = fresh;
                self.cols.push(Col {
                    name: key.to_string(),
                    kind,
                    new,
                    data: ColData::new(kind),
                });
                let c = self.cols.len() - 1;
                self.index.insert(key.to_string(), c);
                c
            }
        }
    }

    fn finish(mut self) -> Result<MeasurementBatch> {
        let rows = self.time.len();
        let time_name = self
            .table
            .as_ref()
            .and_then(|t| t.time_column.clone())
            .unwrap_or_else(|| "time".to_string());
        let mut fields = vec![Field::new(
            &time_name,
            SqlType::Timestamptz.to_arrow(),
            false,
        )];
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(
            TimestampMicrosecondArray::from(std::mem::take(&mut self.time))
                .with_timezone(crate::catalog::types::UTC),
        )];
        let mut new_columns = vec![];
        for col in &mut self.cols {
            col.data.pad(rows);
            let arr = col.data.finish();
            fields.push(Field::new(&col.name, arr.data_type().clone(), true));
            arrays.push(arr);
            if col.new {
                new_columns.push((col.name.clone(), col.kind));
            }
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        Ok(MeasurementBatch {
            name: self.name,
            table: self.table,
            new_columns,
            batch,
            lines: self.lines,
        })
    }
}

fn conflict(key: &str, measurement: &str, given: Kind, existing: &str) -> String {
    format!(
        "field type conflict: input field \"{key}\" on measurement \"{measurement}\" is type {}, already exists as type {existing}",
        given.name()
    )
}

/// The rows of one measurement from one body.
pub struct MeasurementBatch {
    pub name: String,
    /// The table as the conversion saw it; `None` when it does not exist yet.
    pub table: Option<Arc<TableDef>>,
    /// Columns the table does not have yet, in first-seen order.
    pub new_columns: Vec<(String, Kind)>,
    /// `time` (timestamptz, named as the table's time column) then the columns.
    pub batch: RecordBatch,
    /// Line number of every row.
    pub lines: Vec<usize>,
}

/// A body turned into batches, plus the lines that were rejected.
pub struct Converted {
    pub measurements: Vec<MeasurementBatch>,
    /// The first [`MAX_REPORTED_ERRORS`] bad lines.
    pub errors: Vec<LineError>,
    /// All bad lines.
    pub error_count: usize,
    pub rows: usize,
}

fn cut(s: &str) -> String {
    if s.len() <= 256 {
        return s.to_string();
    }
    let mut end = 256;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Longest name a line may give a new table or column: PostgreSQL's identifier
/// limit (NAMEDATALEN - 1).
const MAX_NAME_BYTES: usize = 63;

fn long_name(what: &str, name: &str) -> String {
    let shown: String = name.chars().take(40).collect();
    format!(
        "{what} \"{shown}...\" is {} bytes long; names are at most {MAX_NAME_BYTES} bytes",
        name.len()
    )
}

/// Parses `body` and builds one batch per measurement. `tables` gives the existing
/// table for a measurement name, so type conflicts are caught line by line.
pub fn convert(
    body: &[u8],
    precision: Precision,
    tables: &dyn Fn(&str) -> Option<Arc<TableDef>>,
) -> Result<Converted> {
    let now = precision.now_micros();
    let mut parser = Parser::new(body);
    let mut builders: Vec<MeasurementBuilder> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut errors = Errors::default();
    let mut rows = 0usize;
    let mut slots: Vec<Slot> = Vec::new();
    let mut scratch = String::new();
    let mut last_m: Option<usize> = None; // builder of the previous line
    let mut last_raw: &str = "";
    while let Some(item) = parser.next_line() {
        let line = match item {
            Ok(l) => l,
            Err(e) => {
                errors.add(|| LineError {
                    line: e.line,
                    text: e.text.clone(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        let reject = |reason: String| LineError {
            line: line.number,
            text: cut(line.text),
            message: format!("unable to parse '{}': {reason}", cut(line.text)),
        };
        let time = match line.timestamp {
            None => now,
            Some(ts) => match precision.to_micros(ts) {
                Some(t) if (-TIME_LIMIT..=TIME_LIMIT).contains(&t) => t,
                _ => {
                    errors.add(|| reject(format!("invalid timestamp {ts}: out of range")));
                    continue;
                }
            },
        };
        // The measurement's builder.
        let raw = line.measurement.raw();
        let b_idx = match last_m {
            Some(b) if raw == last_raw => b,
            _ => {
                let name = line.measurement.as_str();
                if name.len() > MAX_NAME_BYTES && tables(&name).is_none() {
                    errors.add(|| reject(long_name("measurement", &name)));
                    continue;
                }
                if name.as_ref() == crate::query::system::CHUNK_FILES {
                    errors.add(|| {
                        reject(format!(
                            "measurement name \"{name}\" is reserved for a system view"
                        ))
                    });
                    continue;
                }
                match by_name.get(name.as_ref()) {
                    Some(b) => *b,
                    None if builders.len() >= MAX_MEASUREMENTS => {
                        errors.add(|| {
                            reject(format!(
                                "more than {MAX_MEASUREMENTS} measurements in one request"
                            ))
                        });
                        continue;
                    }
                    None => {
                        builders.push(MeasurementBuilder::new(name.to_string(), tables(&name)));
                        by_name.insert(name.to_string(), builders.len() - 1);
                        builders.len() - 1
                    }
                }
            }
        };
        last_m = Some(b_idx);
        last_raw = raw;
        let mb = &mut builders[b_idx];
        if mb.table.as_ref().is_some_and(|t| t.time_column.is_none()) {
            let name = mb.name.clone();
            errors.add(|| reject(format!("table \"{name}\" has no time column")));
            continue;
        }

        // Phase 1: resolve every key; reject the line without touching the builders.
        slots.clear();
        let mut bad: Option<String> = None;
        for (j, (k, _)) in line.tags.iter().enumerate() {
            match mb.resolve(&mb.last_tags, j, &k.as_str(), Kind::Tag) {
                Ok(Slot::New { fresh: true, .. }) if k.as_str().len() > MAX_NAME_BYTES => {
                    bad = Some(long_name("tag key", &k.as_str()));
                    break;
                }
                Ok(s) => slots.push(s),
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            }
        }
        if bad.is_none() {
            for (j, (k, v)) in line.fields.iter().enumerate() {
                let key = k.as_str();
                if line.tags.iter().any(|(t, _)| t.as_str() == key) {
                    bad = Some(format!("field key \"{key}\" is also a tag key"));
                    break;
                }
                match mb.resolve(&mb.last_fields, j, &key, Kind::of(v)) {
                    Ok(Slot::New { fresh: true, .. }) if key.len() > MAX_NAME_BYTES => {
                        bad = Some(long_name("field key", &key));
                        break;
                    }
                    Ok(s) => slots.push(s),
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
        }
        if bad.is_none() {
            let adding = slots
                .iter()
                .filter(|s| matches!(s, Slot::New { fresh: true, .. }))
                .count();
            let have = mb.cols.iter().filter(|c| c.new).count()
                + mb.table.as_ref().map_or(1, |t| t.columns.len());
            if adding > 0 && have + adding > MAX_COLUMNS {
                bad = Some(format!(
                    "table \"{}\" would have more than {MAX_COLUMNS} columns",
                    mb.name
                ));
            }
        }
        if let Some(reason) = bad {
            let message = if reason.starts_with("field type conflict") {
                reason
            } else {
                format!("unable to parse '{}': {reason}", cut(line.text))
            };
            errors.add(|| LineError {
                line: line.number,
                text: cut(line.text),
                message,
            });
            continue;
        }

        // Phase 2: append.
        let row = mb.time.len();
        let n_tags = line.tags.len();
        mb.last_tags.resize(n_tags, usize::MAX);
        mb.last_fields.resize(line.fields.len(), usize::MAX);
        for (j, (k, v)) in line.tags.iter().enumerate() {
            let c = mb.column(slots[j], &k.as_str());
            mb.last_tags[j] = c;
            let col = &mut mb.cols[c];
            col.data.pad(row);
            if let ColData::Text(b) = &mut col.data {
                append_str(b, v, &mut scratch);
            }
        }
        for (j, (k, v)) in line.fields.iter().enumerate() {
            let c = mb.column(slots[n_tags + j], &k.as_str());
            mb.last_fields[j] = c;
            let col = &mut mb.cols[c];
            col.data.pad(row);
            match (&mut col.data, v) {
                (ColData::F64(b), FieldValue::Float(x)) => b.append_value(*x),
                (ColData::F64(b), FieldValue::Int(x)) => b.append_value(*x as f64),
                (ColData::F64(b), FieldValue::UInt(x)) => b.append_value(*x as f64),
                (ColData::I64(b), FieldValue::Int(x)) => b.append_value(*x),
                (ColData::U64(b), FieldValue::UInt(x)) => b.append_value(*x),
                (ColData::Bool(b), FieldValue::Bool(x)) => b.append_value(*x),
                (ColData::Text(b), FieldValue::Str(s)) => append_str(b, s, &mut scratch),
                // Cannot happen: `accepts` and `builder_kind` pair kinds with builders.
                (d, _) => d.pad(row + 1),
            }
        }
        mb.time.push(time);
        mb.lines.push(line.number);
        rows += 1;
    }
    let measurements = builders
        .into_iter()
        .filter(|b| !b.time.is_empty())
        .map(MeasurementBuilder::finish)
        .collect::<Result<Vec<_>>>()?;
    Ok(Converted {
        measurements,
        errors: errors.kept,
        error_count: errors.total,
        rows,
    })
}

fn append_str(b: &mut StringBuilder, v: &EscStr<'_>, scratch: &mut String) {
    if v.is_escaped() {
        scratch.clear();
        v.write_unescaped(scratch);
        b.append_value(scratch.as_str());
    } else {
        b.append_value(v.raw());
    }
}

/// How a write treats missing databases and bad lines.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    pub precision: Precision,
    /// Write the good lines when some are bad (false: all or nothing).
    pub accept_partial: bool,
    /// Create a missing database (false: error `database not found`).
    pub create_database: bool,
    /// The role writing, when its privileges are to be checked (not a superuser):
    /// it needs INSERT on existing tables, CREATE on the database for new ones
    /// (which it then owns) and CREATEDB for a new database.
    pub user: Option<String>,
}

/// What a write did.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    pub rows: u64,
    pub errors: Vec<LineError>,
    /// Lines dropped, including those of a batch that failed as a whole.
    pub dropped: usize,
}

/// Writes a line-protocol body into database `db`. Returns `Err` only for errors
/// that concern the whole request (missing database, storage failure).
pub async fn write(
    engine: &Engine,
    db: &str,
    body: bytes::Bytes,
    opts: &WriteOptions,
) -> Result<WriteOutcome> {
    let stats = &engine.metrics();
    stats
        .lp_bytes
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    let manifest = engine.catalog().snapshot();
    if !manifest.databases.contains_key(db) {
        if !opts.create_database {
            return Err(Error::UndefinedDatabase(db.to_string()));
        }
        if let Some(user) = &opts.user
            && !manifest.role(user).is_some_and(|r| r.create_db)
        {
            return Err(Error::sql(
                "42501",
                format!(
                    "permission denied to create database \"{db}\" (role \"{user}\" lacks CREATEDB)"
                ),
            ));
        }
        create_database(engine, db)?;
    }
    // Converted on the request's own thread: handing it to the blocking pool cost
    // a third of the ingest rate on two cores (BENCHMARKS.md).
    let manifest = engine.catalog().snapshot();
    let dbdef = manifest.database(db)?;
    let lookup = |name: &str| dbdef.tables.get(name).cloned();
    let conv = convert(&body, opts.precision, &lookup)?;
    let mut out = WriteOutcome {
        dropped: conv.error_count,
        errors: conv.errors,
        ..Default::default()
    };
    if out.dropped > 0 && !opts.accept_partial {
        out.dropped += conv.rows;
        stats
            .lp_lines_rejected
            .fetch_add(out.dropped as u64, Ordering::Relaxed);
        return Ok(out);
    }
    // Past the cap on tables per database, new measurements are refused (a writer
    // inventing names must not grow the catalog without bound).
    let max_tables = engine.config().lp_max_tables;
    let mut room = max_tables.saturating_sub(dbdef.tables.len());
    let (measurements, refused): (Vec<_>, Vec<_>) = conv.measurements.into_iter().partition(|m| {
        if m.table.is_some() {
            return true;
        }
        let fits = room > 0;
        room = room.saturating_sub(1);
        fits
    });
    for m in &refused {
        out.dropped += m.lines.len();
        if let Some(l) = m.lines.first() {
            out.errors.push(LineError {
                line: *l,
                text: String::new(),
                message: format!(
                    "database \"{db}\" has {max_tables} tables, the most line \
                     protocol creates; measurement \"{}\" is not created ({} lines)",
                    m.name,
                    m.lines.len()
                ),
            });
        }
    }
    if let Some(user) = &opts.user {
        for m in &measurements {
            let ok = match m.table {
                Some(_) => manifest.allowed(user, db, &m.name, Privilege::Insert),
                None => manifest.may_create(user, db),
            };
            if !ok {
                return Err(Error::sql(
                    "42501",
                    format!("permission denied for table {} (role \"{user}\")", m.name),
                ));
            }
        }
    }
    let tables = ensure_tables(engine, db, &measurements)?;
    if let Some(user) = &opts.user {
        for (m, t) in measurements.iter().zip(&tables) {
            if m.table.is_none() && t.is_ok() && manifest.owner(db, &m.name).is_none() {
                engine.catalog().set_owner(db, &m.name, user)?;
            }
        }
    }
    let mut ready = vec![];
    for (m, table) in measurements.into_iter().zip(tables) {
        let table = match table {
            Ok(t) => t,
            Err(reason) => {
                out.dropped += m.lines.len();
                if let Some(l) = m.lines.first() {
                    out.errors.push(LineError {
                        line: *l,
                        text: String::new(),
                        message: format!("{reason} ({} lines of \"{}\")", m.lines.len(), m.name),
                    });
                }
                continue;
            }
        };
        // Testing keys of other tables takes a query: refused rather than unchecked.
        if !table.foreign_keys.is_empty() {
            out.dropped += m.lines.len();
            if let Some(l) = m.lines.first() {
                out.errors.push(LineError {
                    line: *l,
                    text: String::new(),
                    message: format!(
                        "table \"{}\" has foreign keys, which line protocol writes cannot check; write it with SQL ({} lines)",
                        m.name,
                        m.lines.len()
                    ),
                });
            }
            continue;
        }
        let batch = without_failing_checks(&table, m.batch, &m.lines, &mut out)?;
        ready.push((table, batch));
    }
    if out.dropped > 0 && !opts.accept_partial {
        out.dropped += ready.iter().map(|(_, b)| b.num_rows()).sum::<usize>();
        stats
            .lp_lines_rejected
            .fetch_add(out.dropped as u64, Ordering::Relaxed);
        return Ok(out);
    }
    for (table, batch) in ready {
        if batch.num_rows() > 0 {
            out.rows += engine.write(&table, batch).await?;
        }
    }
    stats.lp_rows.fetch_add(out.rows, Ordering::Relaxed);
    stats
        .lp_lines_rejected
        .fetch_add(out.dropped as u64, Ordering::Relaxed);
    Ok(out)
}

/// `batch` without the rows that make a CHECK of `table` false: each is a
/// rejected line (23514's message), the others are written.
fn without_failing_checks(
    table: &TableDef,
    batch: RecordBatch,
    lines: &[usize],
    out: &mut WriteOutcome,
) -> Result<RecordBatch> {
    if table.checks.is_empty() {
        return Ok(batch);
    }
    let conformed = crate::write::conform(table, &batch)?;
    let failing = crate::write::checks::failing_rows(table, &conformed)?;
    if failing.is_empty() {
        return Ok(batch);
    }
    let mut keep = vec![true; batch.num_rows()];
    for (row, check) in failing {
        keep[row] = false;
        out.dropped += 1;
        if out.errors.len() < MAX_REPORTED_ERRORS {
            out.errors.push(LineError {
                line: lines.get(row).copied().unwrap_or_default(),
                text: String::new(),
                message: format!(
                    "new row for relation \"{}\" violates check constraint \"{check}\": failing row contains ({})",
                    table.name,
                    crate::write::checks::row_text(&conformed, row)
                ),
            });
        }
    }
    let mask = arrow::array::BooleanArray::from(keep);
    Ok(arrow::compute::filter_record_batch(&batch, &mask)?)
}

fn create_database(engine: &Engine, db: &str) -> Result<()> {
    let max = engine.config().lp_max_databases;
    if engine.catalog().snapshot().databases.len() >= max {
        return Err(Error::sql(
            "54000",
            format!(
                "there are {max} databases, the most line protocol creates; \
                 database \"{db}\" is not created (CREATE DATABASE it with SQL)"
            ),
        ));
    }
    if engine.catalog().create_database(db, true)? {
        tracing::info!(
            database = db,
            "created database on first line-protocol write"
        );
    }
    Ok(())
}

/// The tables for `ms`, created or widened as needed in one catalog update (none
/// when every table already has every column). An `Err` rejects every row of that
/// measurement: a concurrent writer gave one of its columns another type, or the
/// table would grow past [`MAX_COLUMNS`].
fn ensure_tables(
    engine: &Engine,
    db: &str,
    ms: &[MeasurementBatch],
) -> Result<Vec<std::result::Result<Arc<TableDef>, String>>> {
    fn ready(m: &MeasurementBatch) -> Option<&Arc<TableDef>> {
        m.table.as_ref().filter(|_| m.new_columns.is_empty())
    }
    if ms.iter().all(|m| ready(m).is_some()) {
        return Ok(ms
            .iter()
            .filter_map(|m| ready(m).cloned().map(Ok))
            .collect());
    }
    let interval = engine.config().chunk_interval_micros;
    let wanted: Vec<ColumnsWanted> = ms
        .iter()
        .map(|m| ColumnsWanted {
            table: NewTable {
                name: m.name.clone(),
                columns: vec![ColumnDef {
                    name: "time".into(),
                    sql_type: SqlType::Timestamptz,
                    nullable: false,
                    default: None,
                    identity: None,
                }],
                time_column: Some("time".into()),
                chunk_interval_micros: Some(interval),
                line_protocol: true,
                lp_columns: false,
                keys: vec![],
                checks: vec![],
                foreign_keys: vec![],
                compression: None,
            },
            // Tables already complete ask for nothing: they come back unchanged.
            columns: if ready(m).is_some() {
                vec![]
            } else {
                m.new_columns
                    .iter()
                    .map(|(name, kind)| {
                        let def = ColumnDef {
                            name: name.clone(),
                            sql_type: kind.sql_type(),
                            nullable: true,
                            default: None,
                            identity: None,
                        };
                        (def, *kind == Kind::Tag)
                    })
                    .collect()
            },
        })
        .collect();
    let check = |t: &TableDef, wi: usize, ci: usize, def: &ColumnDef| {
        let m = &ms[wi];
        let kind = m.new_columns[ci].1;
        if accepts(t, def, kind) {
            return None;
        }
        let is_tag = t.series_key.contains(&def.name);
        Some(conflict(
            &def.name,
            &m.name,
            kind,
            existing_kind_name(&def.sql_type, is_tag),
        ))
    };
    engine
        .catalog()
        .ensure_columns(db, &wanted, MAX_COLUMNS, &check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Float64Array};

    fn none(_: &str) -> Option<Arc<TableDef>> {
        None
    }

    #[test]
    fn builds_one_batch_per_measurement_with_nulls_for_missing_keys() {
        let body = b"cpu,host=a usage=1.5 1000000000\nmem,host=a free=3i 1000000000\ncpu,host=b,dc=x usage=2,idle=7i 2000000000\n";
        let c = convert(body, Precision::Nanos, &none).unwrap();
        assert!(c.errors.is_empty());
        assert_eq!(c.rows, 3);
        let cpu = &c.measurements[0];
        assert_eq!(cpu.name, "cpu");
        let schema = cpu.batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["time", "host", "usage", "dc", "idle"]);
        let usage = cpu
            .batch
            .column(2)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert_eq!(usage.values(), &[1.5, 2.0]);
        assert!(cpu.batch.column(3).is_null(0));
        assert_eq!(cpu.batch.column(3).as_string::<i32>().value(1), "x");
        let t = cpu
            .batch
            .column(0)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(t.values(), &[1_000_000, 2_000_000]);
    }

    #[test]
    fn type_conflict_inside_a_body_rejects_the_line_only() {
        let body = b"m v=1.5 1\nm v=2i 2\nm v=3 3\n";
        let c = convert(body, Precision::Nanos, &none).unwrap();
        assert_eq!(c.rows, 2);
        assert_eq!(c.errors.len(), 1);
        assert_eq!(c.errors[0].line, 2);
        assert!(
            c.errors[0].message.contains("field type conflict"),
            "{}",
            c.errors[0].message
        );
        assert!(
            c.errors[0]
                .message
                .contains("is type integer, already exists as type float")
        );
    }

    #[test]
    fn precision_units() {
        assert_eq!(Precision::Nanos.to_micros(1_999), Some(1));
        assert_eq!(Precision::Nanos.to_micros(-1), Some(-1));
        assert_eq!(Precision::Seconds.to_micros(2), Some(2_000_000));
        assert_eq!(Precision::Hours.to_micros(1), Some(3_600_000_000));
        assert_eq!(Precision::Seconds.to_micros(i64::MAX), None);
        assert_eq!(
            Precision::Auto.to_micros(1_700_000_000),
            Some(1_700_000_000_000_000)
        );
        assert_eq!(
            Precision::Auto.to_micros(1_700_000_000_000),
            Some(1_700_000_000_000_000)
        );
        assert_eq!(
            Precision::Auto.to_micros(1_700_000_000_000_000_000),
            Some(1_700_000_000_000_000)
        );
        assert!(Precision::parse_v1(Some("x")).is_err());
        assert!(Precision::parse_v2(Some("h")).is_err());
        assert_eq!(Precision::parse_v3(None), Ok(Precision::Auto));
    }

    #[test]
    fn too_many_columns_rejects_the_line() {
        let mut body = String::from("m ");
        for i in 0..2000 {
            body.push_str(&format!("f{i}=1,"));
        }
        body.pop();
        body.push_str(" 1\nm f0=2 2\n");
        let c = convert(body.as_bytes(), Precision::Nanos, &none).unwrap();
        assert_eq!(c.errors.len(), 1);
        assert!(c.errors[0].message.contains("more than 1024 columns"));
        assert_eq!(c.rows, 1);
    }

    #[test]
    fn time_as_a_key_is_rejected() {
        let c = convert(b"m,time=1 v=1 1\nm v=1,time=2 1\n", Precision::Nanos, &none).unwrap();
        assert_eq!(c.errors.len(), 2);
        assert_eq!(c.rows, 0);
    }
}
