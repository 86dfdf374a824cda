//! TimescaleDB's compression (columnstore) API on Sundial's storage, where every
//! chunk file is already compressed, sorted Parquet: the settings choose the sort
//! order of the files, `compress_chunk` merges a chunk into one sorted file, the
//! policy does that as chunks age, and the stats compare the rows' Arrow size with
//! their bytes on disk.

use std::sync::Arc;

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{self, Expr, FunctionArg, Statement};

use super::chunks::{Args, relation, rows_output};
use super::{Output, Session, args};
use crate::catalog::{CompressPolicy, CompressionDef, OrderBy, TableDef};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// Policy functions called as `SELECT f(…)`.
pub const FUNCTIONS: [&str; 2] = ["add_compression_policy", "remove_compression_policy"];

/// Procedures called as `CALL p(…)` (TimescaleDB 2.18+ names).
const PROCEDURES: [&str; 4] = [
    "add_columnstore_policy",
    "remove_columnstore_policy",
    "convert_to_columnstore",
    "convert_to_rowstore",
];

/// Whether this module runs the statement (policy calls go through
/// [`FUNCTIONS`] and the management-call path).
pub fn handles(stmt: &Statement) -> bool {
    match stmt {
        Statement::Call(f) => PROCEDURES.contains(&fn_name(&f.name).as_str()),
        _ => false,
    }
}

fn fn_name(n: &ast::ObjectName) -> String {
    n.to_string()
        .to_ascii_lowercase()
        .trim_start_matches("public.")
        .to_string()
}

/// Runs a statement [`handles`] takes.
pub async fn run(s: &Session, stmt: &Statement) -> Result<Output> {
    if let Statement::Call(f) = stmt {
        let name = fn_name(&f.name);
        let fargs = match &f.args {
            ast::FunctionArguments::List(l) => l.args.clone(),
            _ => vec![],
        };
        return match name.as_str() {
            "add_columnstore_policy" => {
                add_policy(s, &name, &fargs).await?;
                Ok(Output::Command("CALL".into()))
            }
            "remove_columnstore_policy" => {
                remove_policy(s, &name, &fargs)?;
                Ok(Output::Command("CALL".into()))
            }
            _ => {
                let a = Args::new(
                    &name,
                    &fargs,
                    &["chunk", "if_not_columnstore", "recompress"],
                )?;
                let chunk = a
                    .get(0)
                    .and_then(args::literal_text)
                    .ok_or_else(|| Error::sql("42883", format!("{name}(chunk regclass)")))?;
                let compress = name == "convert_to_columnstore";
                let lenient = a
                    .get(1)
                    .and_then(args::literal_text)
                    .is_none_or(|v| args::truthy(&v));
                chunk_op(s, &chunk, compress, lenient).await?;
                Ok(Output::Command("CALL".into()))
            }
        };
    }
    Err(Error::Internal("not a compression statement".into()))
}

/// `compress_chunk(chunk [, if_not_compressed [, recompress]])` /
/// `decompress_chunk(chunk [, if_compressed])` for one chunk: its name (NULL for a
/// NULL chunk).
pub async fn chunk_fn(s: &Session, name: &str, fargs: &[FunctionArg]) -> Result<Output> {
    let lenient_name = if name == "compress_chunk" {
        "if_not_compressed"
    } else {
        "if_compressed"
    };
    let a = Args::new(
        name,
        fargs,
        &["uncompressed_chunk", lenient_name, "recompress"],
    )?;
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, true)]));
    let chunk = match a.get(0) {
        Some(Expr::Value(v)) if matches!(v.value, ast::Value::Null) => None,
        Some(e) => Some(args::literal_text(e).ok_or_else(|| {
            Error::sql(
                "42883",
                format!("function {name}(chunk regclass) needs a chunk"),
            )
        })?),
        None => {
            return Err(Error::sql(
                "42883",
                format!("function {name}() does not exist"),
            ));
        }
    };
    let lenient = a
        .get(1)
        .and_then(args::literal_text)
        .is_none_or(|v| args::truthy(&v));
    let chunk = match chunk {
        Some(c) if chunk_op(s, &c, name == "compress_chunk", lenient).await? => Some(c),
        _ => None,
    };
    rows_output(schema, vec![Arc::new(StringArray::from(vec![chunk]))])
}

/// The hypertable and chunk start a chunk name (`_timescaledb_internal._hyper_1_2_chunk`) names.
fn find_chunk(s: &Session, name: &str) -> Result<(Arc<TableDef>, i64)> {
    let bare = name
        .rsplit('.')
        .next()
        .unwrap_or(name)
        .trim_matches('"')
        .to_string();
    let m = s.engine.catalog().snapshot();
    for t in m.database(&s.db)?.tables.values() {
        if !t.is_hypertable() {
            continue;
        }
        if let Some(start) = s
            .engine
            .chunk_starts(t)
            .into_iter()
            .find(|c| t.chunk_name(*c) == bare)
        {
            return Ok((t.clone(), start));
        }
    }
    Err(Error::sql(
        "42P01",
        format!("relation \"{name}\" does not exist"),
    ))
}

/// compress_chunk / convert_to_columnstore (`compress`), decompress_chunk /
/// convert_to_rowstore. Compressing merges the chunk into one sorted file;
/// decompressing has nothing to undo (rows are read and changed in place).
async fn chunk_op(s: &Session, chunk: &str, compress: bool, lenient: bool) -> Result<bool> {
    let (t, start) = find_chunk(s, chunk)?;
    let bare = t.chunk_name(start);
    let state = s
        .engine
        .chunk_compression(&t)
        .into_iter()
        .find(|c| c.chunk_start == start);
    let compressed = state.as_ref().is_some_and(|c| c.compressed);
    let partial = state.as_ref().is_some_and(|c| c.partial);
    if compress {
        if compressed && !partial {
            // TimescaleDB: an error, or with if_not_compressed a notice (and the name).
            let msg = format!("chunk \"{bare}\" is already converted to columnstore");
            if !lenient {
                return Err(Error::sql("42710", msg));
            }
            tracing::debug!("{msg}");
            return Ok(true);
        }
        for _ in 0..3 {
            if s.engine.compress_chunk(&s.db, t.id, start).await? {
                break;
            }
        }
        Ok(true)
    } else if !compressed {
        let msg = format!("chunk \"{bare}\" is not converted to columnstore");
        if !lenient {
            return Err(Error::sql("55000", msg));
        }
        // TimescaleDB answers NULL (with a notice).
        Ok(false)
    } else {
        // The rows stay where they are: only the state changes.
        s.engine
            .catalog()
            .set_chunk_compressed(t.id, start, false)?;
        Ok(true)
    }
}

/// Applies one compression option (`compress`, `segmentby`, `orderby` and their
/// other names; the `timescaledb.`/`tsdb.` prefix removed) to `c`. Returns false
/// for an option that is not a compression option.
pub fn apply_option(
    has_column: &dyn Fn(&str) -> bool,
    c: &mut CompressionDef,
    key: &str,
    value: &str,
) -> Result<bool> {
    let column = |name: &str| -> Result<String> {
        let n = name.trim();
        let folded = if n.starts_with('"') {
            n.trim_matches('"').to_string()
        } else {
            n.to_ascii_lowercase()
        };
        if !has_column(&folded) {
            return Err(Error::sql(
                "42703",
                format!("column \"{folded}\" does not exist"),
            ));
        }
        Ok(folded)
    };
    match key {
        "compress" | "enable_columnstore" | "columnstore" => c.enabled = args::truthy(value),
        "compress_segmentby" | "segmentby" => {
            c.enabled = true;
            c.segmentby = value
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(column)
                .collect::<Result<_>>()?;
        }
        "compress_orderby" | "orderby" => {
            c.enabled = true;
            let mut out = vec![];
            for part in value.split(',').filter(|p| !p.trim().is_empty()) {
                let words: Vec<String> = part
                    .split_whitespace()
                    .map(|w| w.to_ascii_lowercase())
                    .collect();
                let Some(name) = part.split_whitespace().next() else {
                    continue;
                };
                let desc = words.iter().any(|w| w == "desc");
                let nulls_first = match words.iter().position(|w| w == "nulls") {
                    Some(p) => words.get(p + 1).is_some_and(|w| w == "first"),
                    // PostgreSQL's default: NULLS FIRST for DESC, LAST for ASC.
                    None => desc,
                };
                out.push(OrderBy {
                    column: column(name)?,
                    desc,
                    nulls_first,
                });
            }
            c.orderby = out;
        }
        "compress_chunk_time_interval" | "compress_index" | "sparse_index" => {}
        _ => return Ok(false),
    }
    Ok(true)
}

/// `ALTER TABLE t SET (timescaledb.compress, …)`: whether the options were
/// compression options (then they are applied).
pub fn alter(s: &Session, table: &str, options: &[ast::SqlOption]) -> Result<bool> {
    let mut pairs = vec![];
    for o in options {
        let ast::SqlOption::KeyValue { key, value } = o else {
            return Ok(false);
        };
        let k = key.value.to_ascii_lowercase();
        let Some(short) = k
            .strip_prefix("timescaledb.")
            .or_else(|| k.strip_prefix("tsdb."))
        else {
            return Ok(false);
        };
        let v = args::literal_text(value).unwrap_or_else(|| value.to_string());
        pairs.push((short.to_string(), v));
    }
    let t = s.engine.catalog().snapshot().table(&s.db, table)?.clone();
    s.engine
        .catalog()
        .update_compression(&s.db, table, |c, _| {
            let mut next = c.clone().unwrap_or_default();
            for (k, v) in &pairs {
                if !apply_option(&|c| t.column(c).is_some(), &mut next, k, v)? {
                    return Err(Error::sql(
                        "22023",
                        format!("unrecognized parameter \"timescaledb.{k}\""),
                    ));
                }
            }
            *c = Some(next);
            Ok(())
        })?;
    Ok(true)
}

/// `add_compression_policy(t, compress_after => i | compress_created_before => i
/// [, if_not_exists, schedule_interval])` and `add_columnstore_policy`.
async fn add_policy(s: &Session, func: &str, fargs: &[FunctionArg]) -> Result<Output> {
    let names: &[&str] = if func == "add_columnstore_policy" {
        &[
            "hypertable",
            "after",
            "if_not_exists",
            "schedule_interval",
            "initial_start",
            "timezone",
            "created_before",
        ]
    } else {
        super::signatures::params("add_compression_policy")
    };
    let a = Args::new(func, fargs, names)?;
    let t = relation(s, func, a.get(0))?;
    let interval = |i: usize| -> Result<Option<(i64, String)>> {
        match a.get(i).and_then(args::literal_text) {
            Some(text) => Ok(Some((args::parse_chunk_interval(&text)?, text))),
            None => Ok(None),
        }
    };
    let after = interval(1)?;
    let created = interval(6)?;
    if after.is_some() == created.is_some() {
        return Err(Error::sql(
            "22023",
            "need to specify one of \"compress_after\" or \"compress_created_before\"",
        ));
    }
    let if_not_exists = a
        .get(2)
        .and_then(args::literal_text)
        .is_some_and(|v| args::truthy(&v));
    let iv = t.chunk_interval_micros.unwrap_or(86_400_000_000);
    let schedule = match interval(3)? {
        Some((m, _)) => m,
        None => (iv / 2).clamp(1_000_000, 86_400_000_000),
    };
    let (key, (_, text)) = match (&after, &created) {
        (Some(a), _) => ("compress_after", a.clone()),
        (_, Some(c)) => ("compress_created_before", c.clone()),
        _ => return Err(Error::Internal("policy threshold".into())),
    };
    let config = format!(
        "{{\"hypertable_id\": {}, \"{key}\": \"{}\"}}",
        t.id,
        pg_interval_text(&text)
    );
    let initial_start_micros = super::schedule::job_start(s, a.get(4), a.get(5)).await?;
    let name = t.name.clone();
    let id = s.engine.catalog().update_compression(&s.db, &t.name, |c, job| {
        let def = c.get_or_insert_with(|| CompressionDef {
            enabled: true,
            ..Default::default()
        });
        if !def.enabled {
            return Err(Error::sql(
                "0A000",
                format!("columnstore not enabled on hypertable \"{name}\""),
            ));
        }
        if def.policy.is_some() {
            if if_not_exists {
                return Ok(-1);
            }
            return Err(Error::sql(
                "42710",
                format!("columnstore policy already exists for hypertable or continuous aggregate \"{name}\"",),
            ));
        }
        def.policy = Some(CompressPolicy {
            job_id: job,
            after_micros: after.as_ref().map(|(m, _)| *m),
            created_before_micros: created.as_ref().map(|(m, _)| *m),
            schedule_interval_micros: schedule,
            config: config.clone(),
            initial_start_micros,
        });
        Ok(job)
    })?;
    if id > 0 {
        s.engine.jobs().schedule_from(id, initial_start_micros);
    }
    let schema = Arc::new(Schema::new(vec![Field::new(func, DataType::Int64, true)]));
    rows_output(schema, vec![Arc::new(Int64Array::from(vec![id]))])
}

/// PostgreSQL's text of an interval literal as TimescaleDB stores it in a config.
fn pg_interval_text(text: &str) -> String {
    text.trim().to_string()
}

/// `remove_compression_policy(t [, if_exists])` and `remove_columnstore_policy`.
fn remove_policy(s: &Session, func: &str, fargs: &[FunctionArg]) -> Result<Output> {
    let a = Args::new(func, fargs, &["hypertable", "if_exists"])?;
    let t = relation(s, func, a.get(0))?;
    let if_exists = a
        .get(1)
        .and_then(args::literal_text)
        .is_some_and(|v| args::truthy(&v));
    let name = t.name.clone();
    let removed = s
        .engine
        .catalog()
        .update_compression(&s.db, &t.name, |c, _| {
            match c.as_mut().and_then(|d| d.policy.take()) {
                Some(_) => Ok(true),
                None if if_exists => Ok(false),
                None => Err(Error::sql(
                    "42704",
                    format!("columnstore policy not found for hypertable \"{name}\""),
                )),
            }
        })?;
    let schema = Arc::new(Schema::new(vec![Field::new(func, DataType::Boolean, true)]));
    rows_output(schema, vec![Arc::new(BooleanArray::from(vec![removed]))])
}

/// `SELECT add_compression_policy(…)` / `remove_compression_policy(…)`.
pub async fn call(s: &Session, name: &str, fargs: &[FunctionArg]) -> Result<Output> {
    match name {
        "add_compression_policy" => add_policy(s, name, fargs).await,
        _ => remove_policy(s, name, fargs),
    }
}

/// Result columns of one of [`FUNCTIONS`].
pub fn result_schema(name: &str) -> SchemaRef {
    let ty = if name == "add_compression_policy" {
        DataType::Int64
    } else {
        DataType::Boolean
    };
    Arc::new(Schema::new(vec![Field::new(name, ty, true)]))
}

/// `hypertable_compression_stats(t)` / `chunk_compression_stats(t)` (and the
/// columnstore names) as table functions.
#[derive(Debug)]
struct StatsFn {
    chunks: bool,
    engine: Arc<Engine>,
    db: String,
}

const BYTE_COLUMNS: [&str; 8] = [
    "before_compression_table_bytes",
    "before_compression_index_bytes",
    "before_compression_toast_bytes",
    "before_compression_total_bytes",
    "after_compression_table_bytes",
    "after_compression_index_bytes",
    "after_compression_toast_bytes",
    "after_compression_total_bytes",
];

impl datafusion::catalog::TableFunctionImpl for StatsFn {
    fn call_with_args(
        &self,
        args: datafusion::catalog::TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn datafusion::datasource::TableProvider>> {
        use datafusion::common::ScalarValue;
        let name = match args
            .exprs()
            .first()
            .map(|e| {
                super::functions::const_value(
                    e,
                    &datafusion::execution::context::ExecutionProps::new(),
                )
            })
            .transpose()?
        {
            Some(ScalarValue::Utf8(Some(n))) | Some(ScalarValue::Utf8View(Some(n))) => n,
            _ => {
                return Err(Error::sql(
                    "42883",
                    "hypertable_compression_stats(hypertable regclass)",
                )
                .into());
            }
        };
        let name = args::regclass_name(&Expr::value(ast::Value::SingleQuotedString(name)))?;
        let schema = self.rows(&name)?.schema();
        let f = StatsFn {
            chunks: self.chunks,
            engine: self.engine.clone(),
            db: self.db.clone(),
        };
        // The rows when the plan runs: a kept or prepared plan shows the chunks of then.
        crate::query::deferred::sync_table(schema, move || Ok(f.rows(&name)?))
    }
}

impl StatsFn {
    /// The rows for hypertable `name`, from the catalog as it is now.
    fn rows(&self, name: &str) -> Result<RecordBatch> {
        let t = self
            .engine
            .catalog()
            .snapshot()
            .table(&self.db, name)?
            .clone();
        // A plain table has no chunks: no rows, as in TimescaleDB.
        let plain = !t.is_hypertable();
        let enabled = t.compression.as_ref().is_some_and(|c| c.enabled);
        let chunks = if plain {
            vec![]
        } else {
            self.engine.chunk_compression(&t)
        };
        let bytes = |v: Vec<Option<i64>>| -> Arc<dyn Array> { Arc::new(Int64Array::from(v)) };
        let mut fields = vec![];
        let mut cols: Vec<Arc<dyn Array>> = vec![];
        let text = |n: &str| Field::new(n, DataType::Utf8, true);
        let int = |n: &str| Field::new(n, DataType::Int64, true);
        // Before: the rows' Arrow size; after: bytes on disk (no index, no toast).
        let per = |raw: i64, disk: i64| -> [Option<i64>; 8] {
            [
                Some(raw),
                Some(0),
                Some(0),
                Some(raw),
                Some(disk),
                Some(0),
                Some(0),
                Some(disk),
            ]
        };
        if self.chunks {
            fields.push(text("chunk_schema"));
            fields.push(text("chunk_name"));
            fields.push(text("compression_status"));
            let n = chunks.len();
            cols.push(Arc::new(StringArray::from(vec![
                "_timescaledb_internal";
                n
            ])));
            cols.push(Arc::new(StringArray::from(
                chunks
                    .iter()
                    .map(|c| t.chunk_name(c.chunk_start))
                    .collect::<Vec<_>>(),
            )));
            cols.push(Arc::new(StringArray::from(
                chunks
                    .iter()
                    .map(|c| {
                        if enabled && c.compressed {
                            "Compressed"
                        } else {
                            "Uncompressed"
                        }
                    })
                    .collect::<Vec<_>>(),
            )));
            for (k, f) in BYTE_COLUMNS.iter().enumerate() {
                fields.push(int(f));
                cols.push(bytes(
                    chunks
                        .iter()
                        .map(|c| {
                            (enabled && c.compressed)
                                .then(|| per(c.raw_bytes as i64, c.disk_bytes as i64)[k])
                                .flatten()
                        })
                        .collect(),
                ));
            }
        } else {
            fields.push(int("total_chunks"));
            fields.push(int("number_compressed_chunks"));
            let done: Vec<_> = chunks.iter().filter(|c| enabled && c.compressed).collect();
            cols.push(bytes(vec![Some(chunks.len() as i64)]));
            cols.push(bytes(vec![Some(done.len() as i64)]));
            let raw: i64 = done.iter().map(|c| c.raw_bytes as i64).sum();
            let disk: i64 = done.iter().map(|c| c.disk_bytes as i64).sum();
            for (k, f) in BYTE_COLUMNS.iter().enumerate() {
                fields.push(int(f));
                cols.push(bytes(vec![
                    (!done.is_empty()).then(|| per(raw, disk)[k]).flatten(),
                ]));
            }
        }
        fields.push(text("node_name"));
        let rows = cols.first().map_or(0, |c| c.len());
        cols.push(Arc::new(StringArray::from(vec![None::<String>; rows])));
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema, cols)?;
        Ok(if plain { batch.slice(0, 0) } else { batch })
    }
}

/// Registers the stats table functions on a connection.
pub fn register(ctx: &datafusion::prelude::SessionContext, engine: &Arc<Engine>, db: &str) {
    for (name, chunks) in [
        ("hypertable_compression_stats", false),
        ("hypertable_columnstore_stats", false),
        ("chunk_compression_stats", true),
        ("chunk_columnstore_stats", true),
    ] {
        ctx.register_udtf(
            name,
            Arc::new(StatsFn {
                chunks,
                engine: engine.clone(),
                db: db.to_string(),
            }),
        );
    }
}
