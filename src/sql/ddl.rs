//! DDL and management functions: CREATE/DROP DATABASE, CREATE/DROP/ALTER TABLE
//! (with TimescaleDB hypertable options), `create_hypertable(...)` in its legacy
//! and `by_range` forms, CREATE/DROP VIEW (`views`), `sundial_flush()` and
//! `sundial_compact()`.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{
    self, AlterTableOperation, ColumnOption, CreateTableOptions, Expr, FunctionArg,
    FunctionArguments, GeneratedAs, ObjectType, SelectItem, SetExpr, SqlOption, Statement,
};

use super::sequences::Generated;
use super::{Output, Session, args};
use crate::catalog::{ColumnDef, NewTable, SqlType, check_time_column};
use crate::error::{Error, Result};

/// Management functions called as `SELECT f(...)`.
pub const FUNCTIONS: [&str; 4] = [
    "create_hypertable",
    "sundial_flush",
    "sundial_compact",
    "set_chunk_time_interval",
];

/// Whether `stmt` is DDL or a management function call Sundial runs itself.
pub fn handles(stmt: &Statement) -> bool {
    if super::constraints::handles(stmt) || super::compression::handles(stmt) {
        return true;
    }
    match stmt {
        Statement::CreateTable(_)
        | Statement::CreateDatabase { .. }
        | Statement::AlterTable(_)
        | Statement::CreateSequence { .. }
        | Statement::Comment { .. } => true,
        Statement::Drop { object_type, .. } => {
            matches!(
                object_type,
                ObjectType::Table
                    | ObjectType::Sequence
                    | ObjectType::Database
                    | ObjectType::View
                    | ObjectType::MaterializedView
            )
        }
        Statement::Query(_) => management_call(stmt).is_some(),
        Statement::CreateExtension(_) | Statement::DropExtension(_) => true,
        Statement::Delete(_) | Statement::Truncate(_) | Statement::Update(_) => true,
        Statement::Insert(i) => super::upsert::handles(i),
        Statement::Call(f) => {
            let n = f.name.to_string();
            n.eq_ignore_ascii_case("run_job")
                || n.eq_ignore_ascii_case(super::cagg::REFRESH)
                || super::maintenance::is_call(f)
        }
        other => super::views::handles(other),
    }
}

/// Management functions a block may call on any table: they change only
/// definitions (policies), which ROLLBACK puts back.
/// (`add_retention_policy` is not one: its job could drop chunks before the block
/// ends, which ROLLBACK could not undo.)
pub const DEFINITION_CALLS: [&str; 6] = [
    "remove_retention_policy",
    "add_compression_policy",
    "remove_compression_policy",
    "add_continuous_aggregate_policy",
    "remove_continuous_aggregate_policy",
    "set_chunk_time_interval",
];

/// DDL a block may hold because it changes only definitions, not rows or files:
/// ROLLBACK puts back what it changed (`tx::Undo::Definitions`). CREATE and DROP
/// TABLE and create_hypertable have undo steps of their own.
pub fn changes_definitions(stmt: &Statement) -> bool {
    match stmt {
        Statement::AlterTable(at) => !at.operations.iter().any(|op| {
            matches!(op, ast::AlterTableOperation::SetOptionsParens { options }
                if options.iter().any(|o| matches!(o, ast::SqlOption::KeyValue { key, .. }
                    if key.value.eq_ignore_ascii_case(super::prepass::MATVIEW_MARK))))
        }),
        Statement::CreateIndex(ci) => !ci.concurrently,
        Statement::Drop { object_type, .. } => matches!(
            object_type,
            ast::ObjectType::Index
                | ast::ObjectType::View
                | ast::ObjectType::Role
                | ast::ObjectType::Sequence
        ),
        Statement::CreateSequence { .. } | Statement::Comment { .. } => true,
        Statement::CreateView(cv) => !cv.materialized,
        Statement::Grant(_)
        | Statement::Revoke(_)
        | Statement::CreateRole(_)
        | Statement::AlterRole { .. } => true,
        Statement::Call(f) => {
            let n = f.name.to_string().to_ascii_lowercase();
            let n = n.trim_start_matches("public.");
            n == "add_columnstore_policy" || n == "remove_columnstore_policy"
        }
        Statement::Query(_) => {
            management_call(stmt).is_some_and(|(name, _)| DEFINITION_CALLS.contains(&name.as_str()))
        }
        _ => false,
    }
}

/// Result schema of a management function call.
pub fn result_schema(stmt: &Statement) -> Option<SchemaRef> {
    let (name, _) = management_call(stmt)?;
    Some(super::chunks::result_schema(&name))
}

/// `SELECT name(args)` with nothing else: the function name and its arguments.
pub fn management_call(stmt: &Statement) -> Option<(String, Vec<FunctionArg>)> {
    let Statement::Query(q) = stmt else {
        return None;
    };
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    if !sel.from.is_empty() || sel.projection.len() != 1 || sel.selection.is_some() {
        return None;
    }
    let expr = match &sel.projection[0] {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return None,
    };
    let Expr::Function(f) = expr else { return None };
    let name = f.name.to_string().to_ascii_lowercase();
    let name = name.trim_start_matches("public.").to_string();
    // The others are functions of the planner (`calls`, `chunks::register`); these
    // change a table's definition or return a record.
    if !FUNCTIONS.contains(&name.as_str())
        && !super::chunks::RECORD_FUNCTIONS.contains(&name.as_str())
    {
        return None;
    }
    let args = match &f.args {
        FunctionArguments::List(l) => l.args.clone(),
        FunctionArguments::None => vec![],
        FunctionArguments::Subquery(_) => return None,
    };
    Some((name, args))
}

fn one_text_row(name: &str, value: String) -> Result<Output> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from(vec![value]))],
    )?;
    let stream =
        RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter(vec![Ok(batch)]));
    Ok(Output::Rows(schema, Box::pin(stream)))
}

/// Runs a DDL statement or management function.
pub async fn execute(s: &Session, stmt: &Statement) -> Result<Output> {
    if s.staging.in_block() {
        allowed_in_block(s, stmt)?;
    }
    if super::constraints::handles(stmt) {
        return super::constraints::run(s, stmt).await;
    }
    if super::compression::handles(stmt) {
        return super::compression::run(s, stmt).await;
    }
    match stmt {
        Statement::CreateExtension(ce) => create_extension(&ce.name.value, ce.if_not_exists),
        Statement::DropExtension(de) => {
            for name in &de.names {
                drop_extension(&name.value, de.if_exists)?;
            }
            Ok(Output::Command("DROP EXTENSION".into()))
        }
        Statement::CreateTable(ct) => {
            let name = args::table_name(&ct.name)?;
            let existed = s.engine.catalog().snapshot().table(&s.db, &name).is_ok();
            let out = create_table(s, ct)?;
            if !existed {
                s.created_in_block(&name);
            }
            Ok(out)
        }
        Statement::CreateDatabase {
            db_name,
            if_not_exists,
            ..
        } => create_database(s, &args::ident_name(db_name)?, *if_not_exists),
        Statement::Drop {
            object_type: ObjectType::Database,
            if_exists,
            names,
            ..
        } => {
            for n in names {
                drop_database(s, &args::ident_name(n)?, *if_exists).await?;
            }
            Ok(Output::Command("DROP DATABASE".into()))
        }
        Statement::Drop {
            object_type: ObjectType::Table,
            if_exists,
            names,
            cascade,
            ..
        } => {
            for n in names {
                let name = args::table_name(n)?;
                let table = s
                    .engine
                    .catalog()
                    .snapshot()
                    .table(&s.db, &name)
                    .ok()
                    .cloned();
                if let Some(c) = table.as_ref().and_then(|t| t.cagg.as_ref()) {
                    return Err(Error::sql(
                        "42809",
                        format!(
                            "cannot drop the materialization table of continuous aggregate \"{}\"; use DROP MATERIALIZED VIEW {}",
                            c.view, c.view
                        ),
                    ));
                }
                let is_table = table.is_some();
                if is_table {
                    super::fkeys::before_drop(s, &name, *cascade)?;
                    if s.staging.in_block()
                        && *cascade
                        && super::viewdefs::dependents_exist(s, &name)?
                    {
                        return Err(Error::NotSupported(format!(
                            "DROP TABLE {name} CASCADE inside a transaction block: views depend on it"
                        )));
                    }
                    super::viewdefs::release(s, &name, "table", *cascade)?;
                }
                if s.staging.in_block() {
                    s.drop_table_in_block(&name, *if_exists).await?;
                } else {
                    s.engine.drop_table(&s.db, &name, *if_exists).await?;
                }
            }
            Ok(Output::Command("DROP TABLE".into()))
        }
        Statement::AlterTable(at) => alter_table(s, at).await,
        Statement::CreateSequence { .. } => super::sequences::create(s, stmt),
        Statement::Comment {
            object_type,
            object_name,
            comment,
            if_exists,
        } => comment_on(s, object_type, object_name, comment.clone(), *if_exists),
        Statement::Drop {
            object_type: ObjectType::Sequence,
            if_exists,
            names,
            cascade,
            ..
        } => super::sequences::drop(s, names, *if_exists, *cascade),
        Statement::CreateView(cv) => super::views::create(s, cv).await,
        Statement::Drop {
            object_type: ObjectType::View,
            if_exists,
            names,
            cascade,
            ..
        } => super::views::drop(s, names, *if_exists, *cascade),
        Statement::Drop {
            object_type: ObjectType::MaterializedView,
            if_exists,
            names,
            cascade,
            ..
        } => super::cagg::drop(s, names, *if_exists, *cascade),
        Statement::Call(f)
            if f.name
                .to_string()
                .eq_ignore_ascii_case(super::cagg::REFRESH) =>
        {
            super::cagg::call_refresh(s, f).await
        }
        Statement::Delete(d) => super::chunks::delete(s, d).await,
        Statement::Update(u) => super::update::update(s, u).await,
        Statement::Insert(i) => super::upsert::insert(s, i).await,
        Statement::Truncate(t) => {
            let names: Vec<ast::ObjectName> =
                t.table_names.iter().map(|n| n.name.clone()).collect();
            super::chunks::truncate(s, &names).await
        }
        Statement::Call(f) if super::maintenance::is_call(f) => super::maintenance::run(s, f).await,
        Statement::Call(f) => super::chunks::run_job(s, f).await,
        Statement::Query(_) => {
            let (name, args) =
                management_call(stmt).ok_or_else(|| Error::Internal("not a call".into()))?;
            match name.as_str() {
                "create_hypertable" => create_hypertable(s, &args).await,
                "set_chunk_time_interval" => set_chunk_time_interval(s, &args).await,
                "sundial_flush" => {
                    let n = s.engine.flush().await?;
                    one_text_row("sundial_flush", n.to_string())
                }
                "sundial_compact" => {
                    s.engine.flush().await?;
                    let n = s.engine.compact(false).await?;
                    one_text_row("sundial_compact", n.to_string())
                }
                other => super::chunks::call(s, other, &args).await,
            }
        }
        other => Err(Error::NotSupported(format!(
            "statement not supported: {other}"
        ))),
    }
}

/// Inside a transaction block: DDL runs only where ROLLBACK can undo it (CREATE
/// TABLE, and changes to a table created in the same block); reading management
/// functions and DELETE / TRUNCATE (staged) run too. Anything else is refused
/// before it changes anything.
fn allowed_in_block(s: &Session, stmt: &Statement) -> Result<()> {
    let table_of_block =
        |n: &ast::ObjectName| args::table_name(n).is_ok_and(|t| s.is_created_in_block(&t));
    let ok = match stmt {
        // They change nothing (the extensions are built in, or refused).
        Statement::CreateExtension(_) | Statement::DropExtension(_) => true,
        Statement::CreateTable(_)
        | Statement::Delete(_)
        | Statement::Truncate(_)
        | Statement::Update(_)
        | Statement::Insert(_) => true,
        Statement::Drop {
            object_type: ObjectType::Table,
            ..
        } => true,
        Statement::CreateIndex(ci) => table_of_block(&ci.table_name),
        // ANALYZE changes nothing; VACUUM refuses itself, as PostgreSQL does.
        Statement::Call(f) => super::maintenance::is_call(f),
        Statement::AlterTable(at) => table_of_block(&at.name),
        Statement::Query(_) => match management_call(stmt) {
            Some((name, args)) => {
                super::chunks::is_read_only(&name)
                    // Undone by ROLLBACK (an empty table only; migrate_data is not).
                    || (name == "create_hypertable"
                        && !args.iter().any(|a| a.to_string().to_ascii_lowercase().contains("migrate_data")))
                    || args
                        .first()
                        .and_then(|a| match a {
                            FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Value(
                                v,
                            ))) => v.value.clone().into_string(),
                            _ => None,
                        })
                        .is_some_and(|t| s.is_created_in_block(&t.to_ascii_lowercase()))
            }
            None => true,
        },
        _ => false,
    };
    if ok {
        return Ok(());
    }
    s.check_ddl_in_block(&super::tx::ddl_name(stmt))
}

/// The extensions Sundial has built in (as `pg_extension` lists them).
const BUILT_IN_EXTENSIONS: [&str; 2] = ["timescaledb", "plpgsql"];

/// `CREATE EXTENSION [IF NOT EXISTS] timescaledb`, the first statement of every
/// TimescaleDB tutorial and migration: the extension is always there, as in a
/// database where it was created before (IF NOT EXISTS: done; without: 42710).
/// Others are not available (0A000), as on a server without them.
fn create_extension(name: &str, if_not_exists: bool) -> Result<Output> {
    if BUILT_IN_EXTENSIONS.contains(&name) {
        if if_not_exists {
            tracing::info!(name, "extension already exists, skipping");
            return Ok(Output::Command("CREATE EXTENSION".into()));
        }
        return Err(Error::sql(
            "42710",
            format!("extension \"{name}\" already exists"),
        ));
    }
    Err(Error::sql(
        "0A000",
        format!("extension \"{name}\" is not available"),
    ))
}

/// `DROP EXTENSION`: the built-in ones cannot be dropped (0A000); others do not
/// exist (42704, or nothing with IF EXISTS).
fn drop_extension(name: &str, if_exists: bool) -> Result<()> {
    if BUILT_IN_EXTENSIONS.contains(&name) {
        return Err(Error::sql(
            "0A000",
            format!("extension \"{name}\" is built into Sundial and cannot be dropped"),
        ));
    }
    if if_exists {
        return Ok(());
    }
    Err(Error::sql(
        "42704",
        format!("extension \"{name}\" does not exist"),
    ))
}

fn create_database(s: &Session, name: &str, if_not_exists: bool) -> Result<Output> {
    s.engine.catalog().create_database(name, if_not_exists)?;
    Ok(Output::Command("CREATE DATABASE".into()))
}

async fn drop_database(s: &Session, name: &str, if_exists: bool) -> Result<()> {
    if name == s.db {
        return Err(Error::sql(
            "55006",
            "cannot drop the currently open database",
        ));
    }
    s.engine.drop_database(name, if_exists).await?;
    Ok(())
}

fn column_def(c: &ast::ColumnDef) -> Result<(ColumnDef, Option<Generated>)> {
    let serial = super::sequences::serial_type(&c.data_type);
    let mut generated = serial.is_some().then_some(Generated::Serial);
    let sql_type = match serial.clone() {
        Some(t) => t,
        None => SqlType::parse(&c.data_type.to_string())?,
    };
    let mut nullable = true;
    let mut default = None;
    for o in &c.options {
        match &o.option {
            ColumnOption::Default(e) => {
                let text = e.to_string();
                match super::sequences::nextval_target(&text) {
                    Some(seq) => default = Some(super::sequences::nextval_default(&seq)),
                    None => {
                        crate::query::provider::default_expr(&text, &sql_type.to_arrow())?;
                        default = Some(text);
                    }
                }
            }
            ColumnOption::Generated {
                generated_as: generated_as @ (GeneratedAs::Always | GeneratedAs::ByDefault),
                sequence_options,
                generation_expr: None,
                ..
            } if serial.is_none() => {
                if !matches!(sql_type, SqlType::Int2 | SqlType::Int4 | SqlType::Int8) {
                    return Err(Error::sql(
                        "22023",
                        format!(
                            "identity column type must be smallint, integer, or bigint (column \"{}\")",
                            args::fold(&c.name)
                        ),
                    ));
                }
                generated = Some(Generated::Identity {
                    always: matches!(generated_as, GeneratedAs::Always),
                    options: sequence_options.clone().unwrap_or_default(),
                });
            }
            ColumnOption::NotNull => nullable = false,
            ColumnOption::Null => nullable = true,
            ColumnOption::PrimaryKey(_) => nullable = false,
            // Taken by the table's keys and CHECK constraints.
            ColumnOption::Unique(_) | ColumnOption::Check(_) | ColumnOption::ForeignKey(_) => {}
            // Text compares by bytes, which is what C and POSIX mean.
            ColumnOption::Collation(c)
                if ["c", "posix", "default"].contains(
                    &c.to_string()
                        .trim_matches('"')
                        .to_ascii_lowercase()
                        .as_str(),
                ) => {}
            // Accepted and ignored would leave the data unprotected or the inserts
            // failing: refused until they are enforced.
            other => {
                return Err(Error::NotSupported(format!(
                    "column \"{}\": {other} is not supported (Sundial would not enforce it)",
                    args::fold(&c.name)
                )));
            }
        }
    }
    if let (Some(Generated::Serial), Some(_)) = (&generated, &default) {
        return Err(Error::sql(
            "42601",
            format!(
                "multiple default values specified for column \"{}\"",
                args::fold(&c.name)
            ),
        ));
    }
    Ok((
        ColumnDef {
            name: args::fold(&c.name),
            sql_type,
            nullable,
            default,
            identity: None,
        },
        generated,
    ))
}

/// Hypertable settings gathered from `WITH (...)` or `create_hypertable(...)`.
#[derive(Default)]
struct HyperOpts {
    hypertable: bool,
    partition_column: Option<String>,
    chunk_interval: Option<i64>,
    /// `sundial.line_protocol_columns`: line protocol may add columns.
    lp_columns: bool,
    /// Compression options (`tsdb.segmentby`, …), applied once the columns are known.
    compression: Vec<(String, String)>,
}

fn with_options(ct: &ast::CreateTable) -> Result<HyperOpts> {
    let opts = match &ct.table_options {
        CreateTableOptions::With(o) => o.clone(),
        _ => vec![],
    };
    let mut h = HyperOpts::default();
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            continue;
        };
        let k = key.value.to_ascii_lowercase();
        if k == "sundial.line_protocol_columns" {
            let v = args::literal_text(&value).unwrap_or_else(|| value.to_string());
            h.lp_columns = args::truthy(&v);
            continue;
        }
        let Some(short) = k
            .strip_prefix("tsdb.")
            .or_else(|| k.strip_prefix("timescaledb."))
        else {
            continue; // storage parameters such as fillfactor are ignored
        };
        let v = args::literal_text(&value).unwrap_or_else(|| value.to_string());
        match short {
            "hypertable" => h.hypertable = args::truthy(&v),
            "partition_column" | "time_column" => h.partition_column = Some(v),
            "chunk_interval" | "chunk_time_interval" => {
                h.chunk_interval = Some(args::parse_chunk_interval(&v)?)
            }
            "compress"
            | "enable_columnstore"
            | "columnstore"
            | "segmentby"
            | "orderby"
            | "compress_segmentby"
            | "compress_orderby"
            | "sparse_index"
            | "compress_chunk_time_interval" => h.compression.push((short.to_string(), v)),
            // Accepted and ignored: Sundial keeps no indexes and names chunks itself.
            "create_default_indexes" | "associated_schema_name" | "associated_table_prefix" => {}
            "partition_func"
            | "partitioning_func"
            | "number_partitions"
            | "partitioning_column"
            | "time_partitioning_func" => {
                return Err(Error::NotSupported(format!(
                    "hypertable option \"{k}\" is not supported by Sundial"
                )));
            }
            _ => {
                return Err(Error::sql(
                    "22023",
                    format!("unrecognized parameter \"{k}\""),
                ));
            }
        }
    }
    Ok(h)
}

fn create_table(s: &Session, ct: &ast::CreateTable) -> Result<Output> {
    if ct.query.is_some() {
        return Err(Error::NotSupported(
            "CREATE TABLE AS is not supported; use CREATE TABLE then INSERT ... SELECT".into(),
        ));
    }
    let name = args::table_name(&ct.name)?;
    let (mut columns, generated): (Vec<ColumnDef>, Vec<Option<Generated>>) = ct
        .columns
        .iter()
        .map(column_def)
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    check_sequence_defaults(s, &columns)?;
    let sequences = super::sequences::for_columns(s, &name, &mut columns, &generated)?;
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].iter().any(|p| p.name == c.name) {
            return Err(Error::DuplicateColumn(c.name.clone()));
        }
    }
    let keys = table_keys(ct, &name, &mut columns)?;
    let checks = super::checks::from_create(s, ct, &name, &columns)?;
    let foreign_keys = super::fkeys::from_create(s, ct, &name, &columns, &keys)?;
    let opts = with_options(ct)?;
    // TimescaleDB 2.2x: a table created as a hypertable has the columnstore enabled
    // unless `tsdb.enable_columnstore = false`.
    let compression = if opts.compression.is_empty() && !opts.hypertable {
        None
    } else {
        let mut c = crate::catalog::CompressionDef {
            enabled: opts.hypertable,
            ..Default::default()
        };
        for (k, v) in &opts.compression {
            super::compression::apply_option(
                &|n| columns.iter().any(|c| c.name == n),
                &mut c,
                k,
                v,
            )?;
        }
        Some(c)
    };
    let (time_column, interval) = if opts.hypertable {
        let tc = match opts.partition_column {
            Some(c) => c,
            None => default_time_column(&columns).ok_or_else(|| {
                Error::sql(
                    "42703",
                    "a hypertable needs a timestamptz, timestamp or date column (tsdb.partition_column)",
                )
            })?,
        };
        let col = columns
            .iter_mut()
            .find(|c| c.name == tc)
            .ok_or_else(|| Error::UndefinedColumn(tc.clone()))?;
        check_time_column(col)?;
        col.nullable = false;
        crate::catalog::check_keys_partitioned(&keys, &tc)?;
        (
            Some(tc),
            Some(
                opts.chunk_interval
                    .unwrap_or(s.engine.config().chunk_interval_micros),
            ),
        )
    } else {
        (None, None)
    };
    let columnstore = compression.as_ref().is_some_and(|c| c.enabled);
    let created = s.engine.catalog().create_table_with_sequences(
        &s.db,
        NewTable {
            name: name.clone(),
            columns,
            time_column,
            chunk_interval_micros: interval,
            line_protocol: false,
            lp_columns: opts.lp_columns,
            keys,
            checks,
            foreign_keys,
            compression,
        },
        sequences,
        ct.if_not_exists,
    )?;
    if created
        && opts.hypertable
        && columnstore
        && let Some(iv) = interval
    {
        default_columnstore_policy(s, &name, iv)?;
    }
    Ok(Output::Command("CREATE TABLE".into()))
}

/// The columnstore policy TimescaleDB 2.2x gives a table created as a hypertable:
/// chunks older than one chunk interval, checked daily, first a day from now.
fn default_columnstore_policy(s: &Session, table: &str, interval: i64) -> Result<()> {
    const DAY: i64 = 86_400_000_000;
    let after = super::functions::pgtext::interval(0, (interval / DAY) as i32, interval % DAY);
    let initial_start = chrono::Utc::now().timestamp_micros().saturating_add(DAY);
    let tid = s.engine.catalog().snapshot().table(&s.db, table)?.id;
    let config = format!("{{\"hypertable_id\": {tid}, \"compress_after\": \"{after}\"}}");
    let job = s
        .engine
        .catalog()
        .update_compression(&s.db, table, |c, job| {
            let Some(def) = c.as_mut() else {
                return Ok(None);
            };
            def.policy = Some(crate::catalog::CompressPolicy {
                job_id: job,
                after_micros: Some(interval),
                created_before_micros: None,
                schedule_interval_micros: DAY,
                config,
                initial_start_micros: Some(initial_start),
            });
            Ok(Some(job))
        })?;
    if let Some(id) = job {
        s.engine.jobs().schedule_from(id, Some(initial_start));
    }
    Ok(())
}

/// The PRIMARY KEY and UNIQUE constraints of a CREATE TABLE (column or table
/// constraints), the primary key first; its columns become NOT NULL.
fn table_keys(
    ct: &ast::CreateTable,
    table: &str,
    columns: &mut [ColumnDef],
) -> Result<Vec<crate::catalog::KeyDef>> {
    let mut keys: Vec<crate::catalog::KeyDef> = vec![];
    let mut add = |name: Option<&ast::Ident>, cols: Vec<String>, primary: bool| -> Result<()> {
        for c in &cols {
            if !columns.iter().any(|d| &d.name == c) {
                return Err(Error::sql(
                    "42703",
                    format!("column \"{c}\" named in key does not exist"),
                ));
            }
        }
        if primary && keys.iter().any(|k| k.primary) {
            return Err(Error::sql(
                "42P16",
                format!("multiple primary keys for table \"{table}\" are not allowed"),
            ));
        }
        let name = name
            .map(args::fold)
            .unwrap_or_else(|| super::constraints::key_name(table, &cols, primary));
        let k = crate::catalog::KeyDef {
            name,
            columns: cols,
            primary,
        };
        if primary {
            keys.insert(0, k);
        } else {
            keys.push(k);
        }
        Ok(())
    };
    for c in &ct.columns {
        for o in &c.options {
            match &o.option {
                ColumnOption::PrimaryKey(_) => {
                    add(o.name.as_ref(), vec![args::fold(&c.name)], true)?
                }
                ColumnOption::Unique(_) => add(o.name.as_ref(), vec![args::fold(&c.name)], false)?,
                _ => {}
            }
        }
    }
    let index_cols = |cols: &[ast::IndexColumn]| -> Result<Vec<String>> {
        cols.iter()
            .map(|c| match &c.column.expr {
                ast::Expr::Identifier(i) => Ok(args::fold(i)),
                other => Err(Error::NotSupported(format!(
                    "a key on an expression ({other})"
                ))),
            })
            .collect()
    };
    for tc in &ct.constraints {
        match tc {
            ast::TableConstraint::PrimaryKey(p) => {
                add(p.name.as_ref(), index_cols(&p.columns)?, true)?
            }
            ast::TableConstraint::Unique(u) => {
                add(u.name.as_ref(), index_cols(&u.columns)?, false)?
            }
            ast::TableConstraint::Check(_) | ast::TableConstraint::ForeignKey(_) => {}
            other => {
                return Err(Error::NotSupported(format!(
                    "table constraint {other} is not supported (Sundial would not enforce it)"
                )));
            }
        }
    }
    if let Some(pk) = keys.first().filter(|k| k.primary) {
        for c in columns.iter_mut() {
            if pk.columns.contains(&c.name) {
                c.nullable = false;
            }
        }
    }
    Ok(keys)
}

fn default_time_column(columns: &[ColumnDef]) -> Option<String> {
    [SqlType::Timestamptz, SqlType::Timestamp, SqlType::Date]
        .iter()
        .find_map(|t| columns.iter().find(|c| &c.sql_type == t))
        .map(|c| c.name.clone())
}

async fn alter_table(s: &Session, at: &ast::AlterTable) -> Result<Output> {
    let name = args::table_name(&at.name)?;
    // ALTER MATERIALIZED VIEW … SET (…), as the pre-pass handed it over.
    if let [AlterTableOperation::SetOptionsParens { options }] = at.operations.as_slice()
        && options.iter().any(|o| {
            matches!(o, ast::SqlOption::KeyValue { key, .. }
                if key.value.eq_ignore_ascii_case(super::prepass::MATVIEW_MARK))
        })
    {
        return super::cagg::alter(s, &name, options);
    }
    if let [AlterTableOperation::SetOptionsParens { options }] = at.operations.as_slice()
        && super::compression::alter(s, &name, options)?
    {
        return Ok(Output::Command("ALTER TABLE".into()));
    }
    if let [AlterTableOperation::RenameTable { table_name }] = at.operations.as_slice() {
        let to = match table_name {
            ast::RenameTableNameKind::As(n) | ast::RenameTableNameKind::To(n) => n,
        };
        return rename_table(s, &name, &args::table_name(to)?, at.if_exists);
    }
    if at
        .operations
        .iter()
        .any(|op| matches!(op, AlterTableOperation::AlterColumn { .. }))
    {
        return alter_columns(s, &name, at).await;
    }
    // Checked in statement order by the catalog: a bad definition or an
    // unsupported operation fails the statement where it stands.
    let mut pending_sequences = vec![];
    let columns: Vec<Result<(ColumnDef, bool)>> = at
        .operations
        .iter()
        .map(|op| match op {
            AlterTableOperation::AddColumn {
                if_not_exists,
                column_def: cd,
                ..
            } => {
                let (mut c, g) = column_def(cd)?;
                check_sequence_defaults(s, std::slice::from_ref(&c))?;
                if g.is_some() {
                    let seqs = super::sequences::for_columns(
                        s,
                        &name,
                        std::slice::from_mut(&mut c),
                        &[g],
                    )?;
                    pending_sequences.extend(seqs);
                }
                Ok((c, *if_not_exists))
            }
            other => Err(Error::NotSupported(format!(
                "ALTER TABLE {other} is not supported"
            ))),
        })
        .collect();
    // Rows the block staged count too.
    let in_memory = has_rows_in_memory(s, &name)
        || (s.staging.in_block()
            && s.engine
                .catalog()
                .snapshot()
                .table(&s.db, &name)
                .is_ok_and(|t| !s.staging.ops_for(t.id).is_empty()));
    let before = s.engine.catalog().snapshot();
    let added: Vec<ColumnDef> = columns
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .filter(|(c, _)| {
            before
                .table(&s.db, &name)
                .is_ok_and(|t| t.column(&c.name).is_none())
        })
        .map(|(c, _)| c.clone())
        .collect();
    let mut checks = vec![];
    if before.table(&s.db, &name).is_ok() {
        for op in &at.operations {
            if let AlterTableOperation::AddColumn { column_def: cd, .. } = op
                && let Some(c) = added.iter().find(|c| c.name == args::fold(&cd.name))
            {
                checks.extend(super::checks::for_added_column(s, &name, cd, c).await?);
            }
        }
    }
    if !s
        .engine
        .catalog()
        .add_columns(&s.db, &name, at.if_exists, columns, in_memory)?
    {
        return Ok(Output::Command("ALTER TABLE".into()));
    }
    for c in checks {
        s.engine.catalog().add_check(&s.db, &name, c)?;
    }
    for seq in pending_sequences {
        s.engine.catalog().create_sequence(&s.db, seq, false)?;
    }
    fill_added_defaults(s, &name, &added).await?;
    let not_null: Vec<String> = added
        .iter()
        .filter(|c| !c.nullable)
        .map(|c| c.name.clone())
        .collect();
    s.set_not_null(&name, not_null)?;
    Ok(Output::Command("ALTER TABLE".into()))
}

/// `ALTER TABLE t ALTER COLUMN c { SET DEFAULT e | DROP DEFAULT | SET NOT NULL |
/// DROP NOT NULL }` (several, comma-separated), checked and applied in order:
/// SET NOT NULL fails with 23502 while a row holds NULL there.
async fn alter_columns(s: &Session, table: &str, at: &ast::AlterTable) -> Result<Output> {
    use ast::AlterColumnOperation as Op;
    /// What one operation changes, applied once every operation checked out.
    enum Change {
        Default(Option<String>),
        NotNull,
        Nullable,
    }
    let mut changes: Vec<(String, Change)> = vec![];
    for op in &at.operations {
        let AlterTableOperation::AlterColumn { column_name, op } = op else {
            return Err(Error::NotSupported(format!(
                "ALTER TABLE {op} together with ALTER COLUMN is not supported"
            )));
        };
        let m = s.engine.catalog().snapshot();
        let t = match m.table(&s.db, table) {
            Ok(t) => t.clone(),
            Err(_) if at.if_exists => return Ok(Output::Command("ALTER TABLE".into())),
            Err(e) => return Err(e),
        };
        let col = args::fold(column_name);
        let c = t.column(&col).cloned().ok_or_else(|| {
            Error::sql(
                "42703",
                format!("column \"{col}\" of relation \"{table}\" does not exist"),
            )
        })?;
        let identity = || {
            Error::sql_detail_hint(
                "42601",
                format!("column \"{col}\" of relation \"{table}\" is an identity column"),
                "An identity column takes its values from its sequence.",
                "Use ALTER TABLE ... ALTER COLUMN ... DROP IDENTITY instead.",
            )
        };
        match op {
            Op::SetDefault { value } => {
                if c.identity.is_some() {
                    return Err(identity());
                }
                let text = value.to_string();
                let default = match super::sequences::nextval_target(&text) {
                    Some(seq) => super::sequences::nextval_default(&seq),
                    None => {
                        crate::query::provider::default_expr(&text, &c.sql_type.to_arrow())?;
                        text
                    }
                };
                let probe = ColumnDef {
                    default: Some(default.clone()),
                    ..c.clone()
                };
                check_sequence_defaults(s, std::slice::from_ref(&probe))?;
                changes.push((col, Change::Default(Some(default))));
            }
            Op::DropDefault => {
                if c.identity.is_some() {
                    return Err(identity());
                }
                changes.push((col, Change::Default(None)));
            }
            Op::SetNotNull => {
                let sql = format!(
                    "SELECT count(*) FROM {} WHERE {} IS NULL",
                    crate::pgident::quote_ident(table),
                    crate::pgident::quote_ident(&col)
                );
                let nulls = Box::pin(count_of(s, &sql)).await?;
                if nulls > 0 {
                    return Err(Error::sql(
                        "23502",
                        format!("column \"{col}\" of relation \"{table}\" contains null values"),
                    ));
                }
                changes.push((col, Change::NotNull));
            }
            Op::DropNotNull => {
                if c.identity.is_some() {
                    return Err(identity());
                }
                if t.keys
                    .first()
                    .is_some_and(|k| k.primary && k.columns.contains(&col))
                {
                    return Err(Error::sql(
                        "42P16",
                        format!("column \"{col}\" is in a primary key"),
                    ));
                }
                if t.time_column.as_deref() == Some(col.as_str()) {
                    return Err(Error::sql(
                        "42P16",
                        "cannot drop not-null constraint from a time-partitioned column",
                    ));
                }
                changes.push((col, Change::Nullable));
            }
            other => {
                return Err(Error::NotSupported(format!(
                    "ALTER TABLE ... ALTER COLUMN {col} {other} is not supported"
                )));
            }
        }
    }
    let mut not_null = vec![];
    for (col, change) in changes {
        match change {
            Change::Default(d) => s
                .engine
                .catalog()
                .alter_column(&s.db, table, &col, |c| c.default = d)?,
            Change::Nullable => s
                .engine
                .catalog()
                .alter_column(&s.db, table, &col, |c| c.nullable = true)?,
            Change::NotNull => not_null.push(col),
        }
    }
    s.set_not_null(table, not_null)?;
    Ok(Output::Command("ALTER TABLE".into()))
}

/// `ALTER TABLE t RENAME TO u`: the table keeps its chunks, keys, grants, owner,
/// comments and sequences (which keep their names, as in PostgreSQL). Refused
/// (0A000) while a view or continuous aggregate names the table: they are kept as
/// SQL text and would not follow.
fn rename_table(s: &Session, from: &str, to: &str, if_exists: bool) -> Result<Output> {
    if [from, to]
        .iter()
        .any(|n| n.starts_with(crate::catalog::DROPPED_PREFIX))
    {
        return Err(Error::sql(
            "42939",
            format!(
                "names starting with \"{}\" are reserved for tables dropped in open blocks",
                crate::catalog::DROPPED_PREFIX
            ),
        ));
    }
    if s.is_created_in_block(from) {
        return Err(Error::NotSupported(format!(
            "ALTER TABLE {from} RENAME in the block that created it: rename it after COMMIT"
        )));
    }
    let m = s.engine.catalog().snapshot();
    let d = m.database(&s.db)?;
    let Some(t) = d.tables.get(from) else {
        if if_exists {
            return Ok(Output::Command("ALTER TABLE".into()));
        }
        return Err(Error::UndefinedTable(from.to_string()));
    };
    if s.staging.in_block() && !s.staging.ops_for(t.id).is_empty() {
        return Err(Error::NotSupported(format!(
            "ALTER TABLE {from} RENAME in a block that changed its rows: rename it in its own transaction"
        )));
    }
    let feeds_cagg = d
        .tables
        .values()
        .filter_map(|x| x.cagg.as_ref())
        .any(|c| c.source_id == t.id || c.raw_id == t.id);
    if t.cagg.is_some() || feeds_cagg || super::viewdefs::dependents_exist(s, from)? {
        return Err(Error::NotSupported(format!(
            "ALTER TABLE {from} RENAME: views or continuous aggregates depend on it (drop them, rename, then create them again)"
        )));
    }
    if d.views.contains_key(to) || d.sequences.contains_key(to) || d.tables.contains_key(to) {
        return Err(Error::sql(
            "42P07",
            format!("relation \"{to}\" already exists"),
        ));
    }
    s.engine.catalog().rename_table(&s.db, from, to)?;
    Ok(Output::Command("ALTER TABLE".into()))
}

/// The one integer a `SELECT count(*) …` of the session answers.
async fn count_of(s: &Session, sql: &str) -> Result<i64> {
    use futures::TryStreamExt;
    let stmt = super::parse(sql)?
        .pop()
        .ok_or_else(|| Error::Internal(format!("no statement in {sql}")))?;
    let Output::Rows(_, stream) = s.run_statement(stmt).await? else {
        return Err(Error::Internal(format!("{sql} gave no rows")));
    };
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    let Some(b) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(0);
    };
    let c = arrow::compute::cast(b.column(0), &DataType::Int64)?;
    Ok(c.as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .map_or(0, |a| a.value(0)))
}

/// Rows a table had before `ADD COLUMN … DEFAULT x` read `x` in the new column, as
/// PostgreSQL gives them: the default is written into them (one UPDATE, staged in
/// a block like the ALTER itself).
async fn fill_added_defaults(s: &Session, table: &str, added: &[ColumnDef]) -> Result<()> {
    let sets: Vec<String> = added
        .iter()
        .filter_map(|c| {
            let d = c.insert_default()?;
            let d = d.as_str();
            (!d.trim().eq_ignore_ascii_case("null"))
                .then(|| format!("{} = {d}", crate::pgident::quote_ident(&c.name)))
        })
        .collect();
    if sets.is_empty() {
        return Ok(());
    }
    let has_rows = s
        .engine
        .catalog()
        .snapshot()
        .table(&s.db, table)
        .is_ok_and(|t| !t.files.is_empty())
        || has_rows_in_memory(s, table)
        || s.staging.in_block();
    if !has_rows {
        return Ok(());
    }
    let sql = format!(
        "UPDATE {} SET {}",
        crate::pgident::quote_ident(table),
        sets.join(", ")
    );
    match super::parse(&sql)?.as_slice() {
        [Statement::Update(u)] => {
            Box::pin(super::update::update(s, u)).await?;
            Ok(())
        }
        _ => Err(Error::Internal(format!("cannot fill defaults: {sql}"))),
    }
}

/// `COMMENT ON { TABLE | VIEW | MATERIALIZED VIEW | SEQUENCE | COLUMN } … IS …`
/// (`IS NULL` removes it), as `obj_description`, `col_description` and psql's
/// `\d+` show it. Other objects are refused.
fn comment_on(
    s: &Session,
    object_type: &ast::CommentObject,
    name: &ast::ObjectName,
    comment: Option<String>,
    if_exists: bool,
) -> Result<Output> {
    use ast::CommentObject as C;
    let m = s.engine.catalog().snapshot();
    let d = m.database(&s.db)?;
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(args::fold)
                .unwrap_or_else(|| p.to_string())
        })
        .collect();
    let relation_exists = |n: &str| -> bool {
        match object_type {
            C::Table => d.tables.get(n).is_some_and(|t| t.cagg.is_none()),
            C::View => d.views.get(n).is_some_and(|v| v.cagg.is_none()),
            C::MaterializedView => d.views.get(n).is_some_and(|v| v.cagg.is_some()),
            C::Sequence => d.sequences.contains_key(n),
            _ => false,
        }
    };
    let key = match object_type {
        C::Table | C::View | C::MaterializedView | C::Sequence => {
            let rel = args::table_name(name)?;
            if !relation_exists(&rel) {
                if if_exists {
                    return Ok(Output::Command("COMMENT".into()));
                }
                return Err(Error::sql(
                    "42P01",
                    format!("relation \"{rel}\" does not exist"),
                ));
            }
            crate::catalog::comment_key(&rel, None)
        }
        C::Column => {
            let [.., rel, col] = parts.as_slice() else {
                return Err(Error::sql("42601", "column name must be qualified"));
            };
            let columns: Option<Vec<String>> = d
                .tables
                .get(rel)
                .map(|t| t.columns.iter().map(|c| c.name.clone()).collect())
                .or_else(|| d.views.get(rel).map(|v| v.columns.clone()));
            match columns {
                None => {
                    return Err(Error::sql(
                        "42P01",
                        format!("relation \"{rel}\" does not exist"),
                    ));
                }
                Some(cols) if !cols.contains(col) => {
                    return Err(Error::sql(
                        "42703",
                        format!("column \"{col}\" of relation \"{rel}\" does not exist"),
                    ));
                }
                Some(_) => crate::catalog::comment_key(rel, Some(col)),
            }
        }
        other => {
            return Err(Error::NotSupported(format!(
                "COMMENT ON {other} is not supported"
            )));
        }
    };
    s.engine
        .catalog()
        .set_comment(&s.db, key, comment.filter(|c| !c.is_empty()))?;
    Ok(Output::Command("COMMENT".into()))
}

/// A `DEFAULT nextval('s')` names a sequence that exists (42P01), as PostgreSQL
/// checks the `regclass`.
fn check_sequence_defaults(s: &Session, columns: &[ColumnDef]) -> Result<()> {
    let m = s.engine.catalog().snapshot();
    for c in columns {
        if let Some(seq) = c
            .default
            .as_deref()
            .and_then(super::sequences::nextval_target)
        {
            crate::catalog::sequences::sequence(&m, &s.db, &seq)?;
        }
    }
    Ok(())
}

fn interval_arg(e: &Expr) -> Result<i64> {
    let text = args::literal_text(e)
        .ok_or_else(|| Error::sql("22023", format!("invalid chunk interval {e}")))?;
    args::parse_chunk_interval(&text)
}

async fn create_hypertable(s: &Session, args: &[FunctionArg]) -> Result<Output> {
    let hint = "create_hypertable(relation, time_column [, chunk_time_interval => interval]) or create_hypertable(relation, by_range(column [, interval]))";
    let (pos, named) = args::split_args(args);
    let rel = pos
        .first()
        .or_else(|| named.iter().find(|(n, _)| n == "relation").map(|(_, e)| e))
        .ok_or_else(|| {
            Error::sql(
                "42883",
                format!("function create_hypertable() needs a relation. Hint: {hint}"),
            )
        })?;
    let table = args::regclass_name(rel)?;
    let mut by_range = false;
    let mut column: Option<String> = None;
    let mut interval: Option<i64> = None;
    let mut if_not_exists = false;
    let mut migrate = false;
    match pos.get(1) {
        Some(Expr::Function(f)) if f.name.to_string().eq_ignore_ascii_case("by_range") => {
            by_range = true;
            let (fpos, fnamed) = match &f.args {
                FunctionArguments::List(l) => args::split_args(&l.args),
                _ => (vec![], vec![]),
            };
            column = fpos.first().and_then(args::literal_text);
            if let Some(iv) = fpos.get(1).or_else(|| {
                fnamed
                    .iter()
                    .find(|(n, _)| n == "partition_interval")
                    .map(|(_, e)| e)
            }) {
                interval = Some(interval_arg(iv)?);
            }
        }
        Some(Expr::Function(f)) if f.name.to_string().eq_ignore_ascii_case("by_hash") => {
            return Err(Error::NotSupported(
                "by_hash space partitioning is not supported".into(),
            ));
        }
        Some(e) => column = args::literal_text(e),
        None => {}
    }
    for (n, e) in &named {
        match n.as_str() {
            "relation" => {}
            "time_column_name" | "column_name" => column = args::literal_text(e),
            "chunk_time_interval" => interval = Some(interval_arg(e)?),
            "if_not_exists" => {
                if_not_exists = args::literal_text(e)
                    .map(|v| args::truthy(&v))
                    .unwrap_or(false)
            }
            "dimension" => {}
            "migrate_data" => {
                migrate = args::literal_text(e)
                    .map(|v| args::truthy(&v))
                    .unwrap_or(false)
            }
            "create_default_indexes" | "associated_schema_name" | "associated_table_prefix" => {}
            "partitioning_column"
            | "number_partitions"
            | "partitioning_func"
            | "time_partitioning_func"
            | "chunk_sizing_func"
            | "chunk_target_size" => {
                return Err(Error::NotSupported(format!(
                    "create_hypertable option \"{n}\" is not supported by Sundial"
                )));
            }
            other => {
                return Err(Error::sql(
                    "42883",
                    format!(
                        "function create_hypertable has no parameter named \"{other}\". Hint: {hint}"
                    ),
                ));
            }
        }
    }
    let column = column.ok_or_else(|| {
        Error::sql(
            "42883",
            format!("create_hypertable needs a time column. Hint: {hint}"),
        )
    })?;
    let default_iv = s.engine.config().chunk_interval_micros;
    let in_memory = has_rows_in_memory(s, &table);
    let current = s.engine.catalog().snapshot().table(&s.db, &table)?.clone();
    if migrate && !current.is_hypertable() && (in_memory || !current.files.is_empty()) {
        let id = s
            .engine
            .migrate_to_hypertable(&s.db, &table, &column, interval.unwrap_or(default_iv))
            .await?;
        let text = if by_range {
            format!("({id},t)")
        } else {
            format!("({id},public,{table},t)")
        };
        return one_text_row("create_hypertable", text);
    }
    let nullable = current
        .columns
        .iter()
        .find(|c| c.name == column)
        .is_some_and(|c| c.nullable);
    let (id, created) = s.engine.catalog().make_hypertable(
        &s.db,
        &table,
        &column,
        interval.unwrap_or(default_iv),
        if_not_exists,
        in_memory,
    )?;
    if created {
        s.plans.clear();
        s.made_hypertable_in_block(&table, &column, nullable);
    }
    let flag = if created { "t" } else { "f" };
    let text = if by_range {
        format!("({id},{flag})")
    } else {
        format!("({id},public,{table},{flag})")
    };
    one_text_row("create_hypertable", text)
}

async fn set_chunk_time_interval(s: &Session, args: &[FunctionArg]) -> Result<Output> {
    let (pos, named) = args::split_args(args);
    let table = args::regclass_name(pos.first().ok_or_else(|| {
        Error::sql(
            "42883",
            "set_chunk_time_interval(hypertable, chunk_time_interval)",
        )
    })?)?;
    let iv = pos
        .get(1)
        .or_else(|| {
            named
                .iter()
                .find(|(n, _)| n == "chunk_time_interval")
                .map(|(_, e)| e)
        })
        .ok_or_else(|| {
            Error::sql(
                "42883",
                "set_chunk_time_interval(hypertable, chunk_time_interval)",
            )
        })?;
    let micros = interval_arg(iv)?;
    if micros <= 0 {
        return Err(Error::sql(
            "22023",
            "invalid chunk interval: must be positive",
        ));
    }
    // Rows in memory belong to chunks of the old interval: write them out first, so
    // every existing chunk keeps its range (new chunks use the new interval).
    s.engine.flush().await?;
    s.engine
        .catalog()
        .set_chunk_interval(&s.db, &table, micros)?;
    one_text_row("set_chunk_time_interval", String::new())
}

/// Whether table `name` has rows not yet in files (they count as rows for the
/// checks of ALTER TABLE and create_hypertable).
fn has_rows_in_memory(s: &Session, name: &str) -> bool {
    let Ok(t) = s.engine.catalog().snapshot().table(&s.db, name).cloned() else {
        return false;
    };
    s.engine
        .view(t.id)
        .map(|v| !v.mem.is_empty())
        .unwrap_or(false)
}
