//! Session statements clients send on connect: `SET`, `RESET`, `SHOW`,
//! `DISCARD`, `DEALLOCATE`; settings live per connection (transactions: `tx`).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{self, Expr, Statement, Value};
use parking_lot::RwLock;

use super::functions::Settings;
use super::{Output, Session};
use crate::error::{Error, Result};

/// Settings a fresh session starts with (keys are lower case).
pub fn default_settings(db: &str, user: &str) -> Settings {
    let mut m = BTreeMap::new();
    for (k, v) in [
        ("timezone", "UTC"),
        ("datestyle", "ISO, MDY"),
        ("intervalstyle", "postgres"),
        ("search_path", "\"$user\", public"),
        ("application_name", ""),
        ("extra_float_digits", "1"),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
        ("standard_conforming_strings", "on"),
        ("integer_datetimes", "on"),
        ("transaction_isolation", "read committed"),
        ("default_transaction_isolation", "read committed"),
        ("default_transaction_read_only", "off"),
        ("transaction_read_only", "off"),
        ("max_identifier_length", "63"),
        ("bytea_output", "hex"),
        ("lc_messages", "C"),
        ("lc_monetary", "C"),
        ("lc_numeric", "C"),
        ("lc_time", "C"),
        ("server_version_num", "150006"),
        ("is_superuser", "on"),
    ] {
        m.insert(k.to_string(), v.to_string());
    }
    // Every other setting of PostgreSQL 15 with its default, so SHOW and
    // current_setting answer as PostgreSQL would (SQLAlchemy reads
    // default_table_access_method, tools read work_mem, max_connections, ...).
    for (k, v, _) in super::pg_catalog::defs::SETTINGS {
        m.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    m.insert("server_version".into(), "15.6".into());
    m.insert("session_authorization".into(), user.to_string());
    m.insert("sundial.database".into(), db.to_string());
    m.insert(LATEST_ROWS.into(), "on".into());
    m.insert(NEWEST_BUCKETS.into(), "on".into());
    m.insert(PLAN_CACHE.into(), "on".into());
    m.insert(STATS_ANSWERS.into(), "on".into());
    m.insert(DECODED_SCANS.into(), "on".into());
    m.insert(SMALL_SCAN_ROWS.into(), DEFAULT_SMALL_SCAN_ROWS.to_string());
    Arc::new(RwLock::new(m))
}

/// Whether `stmt` is a session statement.
pub fn handles(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Set(_)
            | Statement::Reset(_)
            | Statement::ShowVariable { .. }
            | Statement::Discard { .. }
            | Statement::Deallocate { .. }
    )
}

/// Result schema of a session statement, if it returns rows.
pub fn result_schema(stmt: &Statement) -> Option<SchemaRef> {
    match stmt {
        Statement::ShowVariable { variable } => {
            let name = show_name(variable);
            if name == "all" {
                Some(Arc::new(Schema::new(vec![
                    Field::new("name", DataType::Utf8, true),
                    Field::new("setting", DataType::Utf8, true),
                    Field::new("description", DataType::Utf8, true),
                ])))
            } else {
                Some(Arc::new(Schema::new(vec![Field::new(
                    name,
                    DataType::Utf8,
                    true,
                )])))
            }
        }
        _ => None,
    }
}

fn show_name(variable: &[ast::Ident]) -> String {
    let name = variable
        .iter()
        .map(|i| i.value.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(" ");
    match name.as_str() {
        "time zone" => "timezone".into(),
        "transaction isolation level" => "transaction_isolation".into(),
        "session authorization" => "session_authorization".into(),
        // The parser splits a dotted name (`sundial.plan_cache`) into its parts.
        _ => name.replace(' ', "."),
    }
}

/// Canonical key of a setting name.
fn key(name: &str) -> String {
    let k = name.trim_matches('"').to_ascii_lowercase();
    match k.as_str() {
        "time zone" | "time_zone" => "timezone".into(),
        _ => k,
    }
}

/// Text of a SET value expression, as PostgreSQL would store it.
fn value_text(values: &[Expr]) -> Result<String> {
    let parts = values
        .iter()
        .map(|e| match e {
            Expr::Value(v) => Ok(match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                Value::Number(n, _) => n.clone(),
                Value::Boolean(b) => {
                    if *b {
                        "on".into()
                    } else {
                        "off".into()
                    }
                }
                other => other.to_string(),
            }),
            Expr::Identifier(i) => Ok(i.value.clone()),
            Expr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr,
            } => Ok(format!("-{}", value_text(std::slice::from_ref(expr))?)),
            other => Ok(other.to_string()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(parts.join(", "))
}

/// Whether queries that need only each series' newest rows read only those
/// (`on`, the default) or every row (`off`: for comparing answers).
pub const LATEST_ROWS: &str = "sundial.latest_rows";
/// Whether `GROUP BY bucket ORDER BY bucket DESC LIMIT k` reads only the newest
/// window holding k buckets (`on`, the default) or every row in the range (`off`).
pub const NEWEST_BUCKETS: &str = "sundial.newest_buckets";
/// Whether count/min/max without GROUP BY take the files wholly inside the time
/// filter from their statistics (`on`, the default) or read them (`off`).
pub const STATS_ANSWERS: &str = "sundial.stats_answers";
/// Whether scans read chunk files' columns kept decoded in memory (`on`, the
/// default) or always from Parquet (`off`: for comparing answers and timings).
pub const DECODED_SCANS: &str = "sundial.decoded_scans";
/// Whether query plans are kept per shape and per prepared statement and reused
/// (`on`, the default) or every query is planned from its text (`off`: for
/// measuring what the cache saves).
pub const PLAN_CACHE: &str = "sundial.plan_cache";
/// Queries whose scans are estimated (from file and memtable time ranges) to read
/// at most this many rows run in one partition: no repartitioning, no merge, each
/// file opened once. `0` plans every query over all cores.
pub const SMALL_SCAN_ROWS: &str = "sundial.small_scan_rows";
/// [`SMALL_SCAN_ROWS`]'s default.
pub const DEFAULT_SMALL_SCAN_ROWS: u64 = 250_000;

/// A Boolean setting's value.
fn boolean(k: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" | "default" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(Error::sql(
            "22023",
            format!("parameter \"{k}\" requires a Boolean value"),
        )),
    }
}

fn set(session: &Session, name: &str, value: String) -> Result<()> {
    let k = key(name);
    let value = if k == "timezone" {
        let tz = if value.eq_ignore_ascii_case("local") || value.eq_ignore_ascii_case("default") {
            "UTC".to_string()
        } else {
            value
        };
        normalize_tz(&tz)?;
        tz
    } else {
        value
    };
    if k == PLAN_CACHE {
        let on = boolean(&k, &value)?;
        session
            .settings
            .write()
            .insert(k, if on { "on" } else { "off" }.into());
        return Ok(());
    }
    if k.starts_with("datafusion.") {
        // DataFusion's own options, for tuning and measurement. PostgreSQL's
        // Boolean spellings (SET stores `on` / `off`) mean true / false.
        let value = match value.to_ascii_lowercase().as_str() {
            "on" | "yes" => "true".to_string(),
            "off" | "no" => "false".to_string(),
            _ => value,
        };
        with_options(session, |o| o.set(&k, &value)).map_err(|e| {
            Error::sql(
                "22023",
                format!("invalid value for parameter \"{name}\": {e}"),
            )
        })?;
        session.settings.write().insert(k, value);
        return Ok(());
    }
    if k == DECODED_SCANS {
        let on = boolean(&k, &value)?;
        session
            .settings
            .write()
            .insert(k, if on { "on" } else { "off" }.into());
        session
            .ctx
            .state_ref()
            .write()
            .config_mut()
            .set_extension(Arc::new(crate::query::provider::DecodedScans(on)));
        return Ok(());
    }
    if k == SMALL_SCAN_ROWS {
        let rows: u64 = value.trim().parse().map_err(|_| {
            Error::sql(
                "22023",
                format!("invalid value for parameter \"{k}\": \"{value}\""),
            )
        })?;
        session.settings.write().insert(k, rows.to_string());
        return Ok(());
    }
    if k == LATEST_ROWS || k == NEWEST_BUCKETS || k == STATS_ANSWERS {
        let on = boolean(&k, &value)?;
        session
            .settings
            .write()
            .insert(k, if on { "on" } else { "off" }.into());
        // Sundial's rules, in the order the context starts with (which rule takes a
        // query both could serve must not depend on what was switched when).
        let rules: [(
            &str,
            Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>,
        ); 3] = [
            (LATEST_ROWS, Arc::new(crate::query::latest::LatestRows)),
            (
                NEWEST_BUCKETS,
                Arc::new(crate::query::newest_buckets::NewestBuckets),
            ),
            (
                STATS_ANSWERS,
                Arc::new(crate::query::stats_answers::StatsAnswers),
            ),
        ];
        for (_, rule) in &rules {
            session.ctx.remove_optimizer_rule(rule.name());
        }
        for (key, rule) in rules {
            let on = session.settings.read().get(key).is_none_or(|v| v == "on");
            if on {
                session.ctx.add_optimizer_rule(rule);
            }
        }
        return Ok(());
    }
    if k == "timezone" {
        let tz = Some(normalize_tz(&value)?);
        with_options(session, |o| o.execution.time_zone = tz);
    }
    session.settings.write().insert(k, value);
    Ok(())
}

/// `SET` (`local`: `SET LOCAL`) as a block sees it: what it changes, ROLLBACK puts
/// back; SET LOCAL lasts until the block ends, and outside one it does nothing
/// (PostgreSQL warns and lets the value end with the statement).
fn scoped_set(session: &Session, name: &str, value: String, local: bool) -> Result<()> {
    let k = key(name);
    if !session.before_set(&k, local) {
        tracing::debug!(setting = %k, "SET LOCAL outside a transaction block has no effect");
        return Ok(());
    }
    set(session, name, value)?;
    if !local {
        session.after_set(&k);
    }
    Ok(())
}

/// Puts the session's settings back to `target` (what a block found, for ROLLBACK):
/// each setting that differs is set again, each the block added is removed.
pub(crate) fn restore(session: &Session, target: &BTreeMap<String, String>) {
    let now = session.settings.read().clone();
    for (k, v) in target {
        if now.get(k) != Some(v)
            && let Err(e) = set(session, k, v.clone())
        {
            tracing::warn!(setting = %k, error = %e, "could not restore a setting");
        }
    }
    let fresh = datafusion_defaults(&session.db);
    for k in now.keys().filter(|k| !target.contains_key(*k)) {
        if k.starts_with("datafusion.")
            && let Some(v) = fresh
                .entries()
                .into_iter()
                .find(|e| &e.key == k)
                .and_then(|e| e.value)
        {
            let _ = with_options(session, |o| o.set(k, &v));
        }
        session.settings.write().remove(k);
    }
}

/// Changes the session's DataFusion options with `f`.
fn with_options<R>(
    session: &Session,
    f: impl FnOnce(&mut datafusion::config::ConfigOptions) -> R,
) -> R {
    f(session.ctx.state_ref().write().config_mut().options_mut())
}

/// DataFusion's options as a new session of database `db` starts with them.
fn datafusion_defaults(db: &str) -> datafusion::config::ConfigOptions {
    let mut o = datafusion::config::ConfigOptions::new();
    crate::query::context::configure(&mut o, db);
    o
}

/// A time setting such as `statement_timeout` as PostgreSQL reads it: a number of
/// milliseconds, or a number with one of the units `us`, `ms`, `s`, `min`, `h`, `d`.
pub fn duration_setting(v: &str) -> Option<std::time::Duration> {
    let v = v.trim().trim_matches('\'').trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: f64 = n.parse().ok()?;
    let ms = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = n * ms;
    (ms.is_finite() && ms >= 0.0).then(|| std::time::Duration::from_secs_f64(ms / 1000.0))
}

/// Checks a time zone name and returns the form Arrow accepts.
pub fn normalize_tz(tz: &str) -> Result<String> {
    let t = tz.trim();
    if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("gmt") || t.eq_ignore_ascii_case("z")
    {
        return Ok("UTC".into());
    }
    if t.parse::<chrono_tz::Tz>().is_ok() {
        return Ok(t.to_string());
    }
    // Numeric offsets, as PostgreSQL reads them: a plain number of hours is east of
    // UTC when positive (`'-7'`, `'+5'`), while `'+05:30'` / `'-03:00'` are POSIX
    // specs, whose sign is the other way round (`'+05:30'` is 5.5 hours west).
    let numeric = t.trim_start_matches(['+', '-']);
    if !numeric.is_empty() && numeric.chars().all(|c| c.is_ascii_digit() || c == ':') {
        let west = t.starts_with('-') != numeric.contains(':');
        let sign = if west { '-' } else { '+' };
        let mut parts = numeric.split(':');
        let h: i32 = parts.next().unwrap_or("0").parse().unwrap_or(0);
        let m: i32 = parts.next().unwrap_or("0").parse().unwrap_or(0);
        if h <= 15 && m < 60 {
            return Ok(format!("{sign}{h:02}:{m:02}"));
        }
    }
    Err(Error::sql(
        "22023",
        format!("invalid value for parameter \"TimeZone\": \"{tz}\""),
    ))
}

fn rows(schema: SchemaRef, cols: Vec<Vec<Option<String>>>) -> Result<Output> {
    let arrays = cols
        .into_iter()
        .map(|c| Arc::new(StringArray::from(c)) as arrow::array::ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    let stream =
        RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter(vec![Ok(batch)]));
    Ok(Output::Rows(schema, Box::pin(stream)))
}

/// Runs a session statement; `None` if `stmt` is not one.
pub fn execute(session: &Session, stmt: &Statement) -> Result<Option<Output>> {
    Ok(Some(match stmt {
        Statement::Set(s) => {
            match s {
                ast::Set::SingleAssignment {
                    scope,
                    variable,
                    values,
                    ..
                } => {
                    let name = variable.to_string();
                    let local = matches!(scope, Some(ast::ContextModifier::Local));
                    let v = value_text(values)?;
                    let v = if v.eq_ignore_ascii_case("default") {
                        default_settings("", "")
                            .read()
                            .get(&key(&name))
                            .cloned()
                            .unwrap_or_default()
                    } else {
                        v
                    };
                    scoped_set(session, &name, v, local)?;
                }
                ast::Set::SetTimeZone { local, value } => {
                    let v = value_text(std::slice::from_ref(value))?;
                    scoped_set(session, "timezone", v, *local)?;
                }
                ast::Set::SetNames { charset_name, .. } => {
                    scoped_set(
                        session,
                        "client_encoding",
                        charset_name.value.clone(),
                        false,
                    )?;
                }
                _ => {}
            }
            Output::Command("SET".into())
        }
        Statement::Reset(r) => {
            let defaults = default_settings(&session.db, "");
            // Inside a block RESET is a SET to the default: ROLLBACK undoes it.
            let reset_key = match &r.reset {
                ast::Reset::ALL => None,
                ast::Reset::ConfigurationParameter(name) => Some(key(&name.to_string())),
            };
            session.before_set(reset_key.as_deref().unwrap_or(""), false);
            match &r.reset {
                ast::Reset::ALL => {
                    let keep = session
                        .settings
                        .read()
                        .get("session_authorization")
                        .cloned();
                    let mut d = defaults.read().clone();
                    if let Some(u) = keep {
                        d.insert("session_authorization".into(), u);
                    }
                    *session.settings.write() = d;
                    let fresh = datafusion_defaults(&session.db);
                    with_options(session, |o| *o = fresh);
                    set(session, "timezone", "UTC".into())?;
                    set(session, LATEST_ROWS, "on".into())?;
                    set(session, NEWEST_BUCKETS, "on".into())?;
                    set(session, DECODED_SCANS, "on".into())?;
                }
                ast::Reset::ConfigurationParameter(name)
                    if key(&name.to_string()).starts_with("datafusion.") =>
                {
                    let k = key(&name.to_string());
                    let fresh = datafusion_defaults(&session.db);
                    let default = fresh
                        .entries()
                        .into_iter()
                        .find(|e| e.key == k)
                        .ok_or_else(|| {
                            Error::sql(
                                "42704",
                                format!("unrecognized configuration parameter \"{k}\""),
                            )
                        })?;
                    if let Some(v) = default.value {
                        set(session, &k, v)?;
                    }
                    session.settings.write().remove(&k);
                }
                ast::Reset::ConfigurationParameter(name) => {
                    let k = key(&name.to_string());
                    let v = defaults.read().get(&k).cloned().unwrap_or_default();
                    set(session, &k, v)?;
                }
            }
            match reset_key {
                Some(k) => session.after_set(&k),
                None => {
                    let keys: Vec<String> = session.settings.read().keys().cloned().collect();
                    for k in keys {
                        session.after_set(&k);
                    }
                }
            }
            Output::Command("RESET".into())
        }
        Statement::ShowVariable { variable } => {
            let name = show_name(variable);
            let schema =
                result_schema(stmt).ok_or_else(|| Error::Internal("show schema".into()))?;
            let settings = session.settings.read().clone();
            if name == "all" {
                let (mut n, mut v, mut d) = (vec![], vec![], vec![]);
                for (k, val) in settings {
                    n.push(Some(k));
                    v.push(Some(val));
                    d.push(Some(String::new()));
                }
                return rows(schema, vec![n, v, d]).map(Some);
            }
            let value = match name.as_str() {
                "server_version" => Some("15.6".to_string()),
                _ => settings.get(&key(&name)).cloned(),
            };
            match value {
                Some(v) => rows(schema, vec![vec![Some(v)]])?,
                None => {
                    return Err(Error::sql(
                        "42704",
                        format!("unrecognized configuration parameter \"{name}\""),
                    ));
                }
            }
        }
        Statement::Discard { .. } => Output::Command("DISCARD ALL".into()),
        Statement::Deallocate { .. } => Output::Command("DEALLOCATE".into()),
        _ => return Ok(None),
    }))
}
