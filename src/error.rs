//! The crate error type and the one place that maps an error to a PostgreSQL
//! SQLSTATE (for pgwire) and to an HTTP status (for the line-protocol port).

use datafusion::error::DataFusionError;

/// Result alias used across Sundial.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error Sundial reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("WAL segment {file} is corrupt at offset {offset}: {reason}")]
    WalCorrupt {
        file: String,
        offset: u64,
        reason: String,
    },
    #[error(
        "WAL records {first} to {last} are missing (before {file}): a segment was removed or \
         lost; start with --wal-accept-loss true to go on without them"
    )]
    WalGap { first: u64, last: u64, file: String },
    #[error("WAL: {0}")]
    Wal(String),
    /// The disk is full: nothing was written (writes work again once space is freed).
    #[error("could not write: disk full ({0})")]
    DiskFull(String),
    #[error("catalog: {0}")]
    Catalog(String),
    #[error("database \"{0}\" does not exist")]
    UndefinedDatabase(String),
    #[error("database \"{0}\" already exists")]
    DuplicateDatabase(String),
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
    #[error("relation \"{0}\" already exists")]
    DuplicateTable(String),
    #[error("column \"{0}\" does not exist")]
    UndefinedColumn(String),
    #[error("column \"{0}\" already exists")]
    DuplicateColumn(String),
    #[error("{0}")]
    NotSupported(String),
    /// A user error with an explicit SQLSTATE.
    #[error("{message}")]
    Sql { code: &'static str, message: String },
    /// A user error with an explicit SQLSTATE and PostgreSQL's DETAIL / HINT lines.
    #[error("{message}")]
    Detailed {
        code: &'static str,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
    #[error("{0}")]
    Parse(String),
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// A write would give two rows one PRIMARY KEY or UNIQUE value (23505).
    #[error("duplicate key value violates unique constraint \"{constraint}\"")]
    Unique { constraint: String, detail: String },
    /// Stored rows changed while a statement read them (it may run again).
    #[error("could not serialize access due to concurrent update: {0}")]
    Changed(String),
    #[error("canceling statement due to user request")]
    Canceled,
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Whether this is a write that failed because the disk is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::DiskFull(_) => true,
            Error::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.raw_os_error() == Some(libc::ENOSPC)
            }
            _ => false,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A user error with an explicit SQLSTATE.
    pub fn sql(code: &'static str, message: impl Into<String>) -> Error {
        Error::Sql {
            code,
            message: message.into(),
        }
    }

    /// A user error with a DETAIL line.
    pub fn sql_detail(
        code: &'static str,
        message: impl Into<String>,
        detail: impl Into<String>,
    ) -> Error {
        Error::Detailed {
            code,
            message: message.into(),
            detail: Some(detail.into()),
            hint: None,
        }
    }

    /// A user error with DETAIL and HINT lines.
    pub fn sql_detail_hint(
        code: &'static str,
        message: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Error {
        Error::Detailed {
            code,
            message: message.into(),
            detail: Some(detail.into()),
            hint: Some(hint.into()),
        }
    }

    /// The HINT line a client sees.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::Detailed { hint, .. } => hint.clone(),
            Error::DataFusion(DataFusionError::External(inner)) => {
                inner.downcast_ref::<Error>().and_then(Error::hint)
            }
            _ => None,
        }
    }

    /// The PostgreSQL SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::Config(_) => "F0000",
            Error::Io { .. } => "58030",
            Error::DiskFull(_) => "53100",
            Error::WalCorrupt { .. } | Error::WalGap { .. } | Error::Wal(_) | Error::Catalog(_) => {
                "XX000"
            }
            Error::UndefinedDatabase(_) => "3D000",
            Error::DuplicateDatabase(_) => "42P04",
            Error::UndefinedTable(_) => "42P01",
            Error::DuplicateTable(_) => "42P07",
            Error::UndefinedColumn(_) => "42703",
            Error::DuplicateColumn(_) => "42701",
            Error::NotSupported(_) => "0A000",
            Error::Sql { code, .. } | Error::Detailed { code, .. } => code,
            Error::Parse(_) => "42601",
            Error::DataFusion(e) => datafusion_sqlstate(e),
            Error::Arrow(e) => arrow_sqlstate(e),
            Error::Parquet(_) | Error::ObjectStore(_) => "58030",
            Error::Canceled => "57014",
            Error::Changed(_) => "40001",
            Error::Unique { .. } => "23505",
            Error::Internal(_) => "XX000",
        }
    }

    /// The HTTP status for this error on the line-protocol port.
    pub fn http_status(&self) -> u16 {
        match self.sqlstate() {
            "3D000" => 404,
            "42501" => 403,
            s if s.starts_with("22") || s.starts_with("42") => 400,
            "0A000" => 400,
            "57014" => 503,
            "53100" => 507,
            "54000" => 400,
            _ => 500,
        }
    }
}

/// At most one log line per second for a repeated failure (a full disk fails every
/// write), with the number of occurrences left out since the last line.
#[derive(Debug, Default)]
pub struct Throttle {
    last_second: std::sync::atomic::AtomicU64,
    suppressed: std::sync::atomic::AtomicU64,
}

impl Throttle {
    pub const fn new() -> Throttle {
        Throttle {
            last_second: std::sync::atomic::AtomicU64::new(0),
            suppressed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line may be logged now (`n` occurrences were not logged since
    /// the last line), `None` when this one should be left out.
    pub fn allow(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let last = self.last_second.load(Ordering::Relaxed);
        if now != last
            && self
                .last_second
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl From<Error> for DataFusionError {
    /// Carries a Sundial error (and its SQLSTATE) through DataFusion unchanged.
    fn from(e: Error) -> DataFusionError {
        DataFusionError::External(Box::new(e))
    }
}

/// Which errors a [`MESSAGE_RULES`] row applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Any DataFusion or Arrow error.
    Any,
    /// `DataFusionError::Plan`.
    Plan,
    /// `DataFusionError::Execution`.
    Exec,
}

/// Read the message as a failed cast ([`cast_message_sqlstate`]).
const CAST: &str = "cast";

/// DataFusion's and Arrow's own errors carry no SQLSTATE; these rows pick one from
/// the message: the first row of the error's scope (or `Any`) whose substrings all
/// occur in the lower-cased message wins. Sundial's own errors never come here: they
/// carry their code ([`Error::sql`], through `DataFusionError::External`). Every row
/// is exercised by the test `every_message_rule_is_reachable`.
const MESSAGE_RULES: &[(Scope, &[&str], &str)] = &[
    (Scope::Any, &["non-nullable"], "23502"),
    (Scope::Any, &["violates not-null"], "23502"),
    (Scope::Any, &["percentile value must be between"], "22003"),
    // Arrow's precision check (a value past numeric's 38 integer digits).
    (Scope::Any, &["too large to store in a decimal"], "22003"),
    (
        Scope::Any,
        &["inconsistent data length across values list"],
        "42601",
    ),
    (Scope::Any, &["column count doesn't match"], "42601"),
    (
        Scope::Any,
        &["more expressions than target columns"],
        "42601",
    ),
    (Scope::Plan, &["table", "not found"], "42P01"),
    (Scope::Plan, &["invalid function"], "42883"),
    (Scope::Plan, &["function", "not found"], "42883"),
    (Scope::Plan, &["no function matches"], "42883"),
    (Scope::Plan, &["failed to coerce arguments"], "42883"),
    (Scope::Plan, &["does not support"], "42883"),
    (Scope::Plan, &["arithmetic expression"], "42883"),
    (Scope::Plan, &["no operator"], "42883"),
    (Scope::Plan, &["cannot cast"], "42846"),
    (Scope::Plan, &["cannot coerce"], "42846"),
    (Scope::Plan, &["no field named"], "42703"),
    (Scope::Plan, &["placeholder"], "42P02"),
    (Scope::Plan, &["parameter"], "42P02"),
    (Scope::Exec, &["cast"], CAST),
    (Scope::Exec, &["parse"], CAST),
    (Scope::Exec, &["invalid"], CAST),
    (Scope::Exec, &["divide by zero"], "22012"),
    (Scope::Exec, &["division by zero"], "22012"),
    (Scope::Exec, &["overflow"], "22003"),
    (Scope::Exec, &["out of range"], "22003"),
];

/// The SQLSTATE [`MESSAGE_RULES`] give message `m` of an error of `scope`.
fn message_sqlstate(scope: Scope, m: &str) -> Option<&'static str> {
    let l = m.to_ascii_lowercase();
    let (_, _, code) = MESSAGE_RULES.iter().find(|(s, all, _)| {
        (*s == scope || *s == Scope::Any) && all.iter().all(|part| l.contains(part))
    })?;
    Some(if *code == CAST {
        cast_message_sqlstate(m)
    } else {
        code
    })
}

fn arrow_sqlstate(e: &arrow::error::ArrowError) -> &'static str {
    use arrow::error::ArrowError as A;
    if let Some(code) = message_sqlstate(Scope::Any, &e.to_string()) {
        return code;
    }
    match e {
        A::CastError(m) | A::ParseError(m) => cast_message_sqlstate(m),
        A::DivideByZero => "22012",
        A::ArithmeticOverflow(_) => "22003",
        A::ComputeError(m) if m.contains("Overflow") || m.contains("overflow") => "22003",
        A::ExternalError(inner) => {
            if let Some(df) = inner.downcast_ref::<DataFusionError>() {
                datafusion_sqlstate(df)
            } else if let Some(e) = inner.downcast_ref::<Error>() {
                e.sqlstate()
            } else {
                "XX000"
            }
        }
        _ => "XX000",
    }
}

/// The value in "Error parsing timestamp from 'VALUE'" messages.
fn timestamp_parse_value(m: &str) -> Option<&str> {
    let i = m.find("Error parsing timestamp from '")?;
    let rest = &m[i + "Error parsing timestamp from '".len()..];
    rest.split('\'').next()
}

/// A timestamp that has the shape `YYYY-MM-DD` but names no real date is out of range.
fn looks_like_date(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// The SQLSTATE of a failed cast or parse, from Arrow's message.
fn cast_message_sqlstate(m: &str) -> &'static str {
    if let Some(v) = timestamp_parse_value(m) {
        return if looks_like_date(v) { "22008" } else { "22007" };
    }
    if let Some(rest) = m.split("Cannot cast string '").nth(1)
        && let Some((v, ty)) = rest.split_once("' to value of ")
    {
        if ty.starts_with("Date") || ty.starts_with("Timestamp") {
            return if looks_like_date(v) { "22008" } else { "22007" };
        }
        if ty.starts_with("Interval") {
            return "22007";
        }
    }
    let l = m.to_ascii_lowercase();
    if l.contains("interval") {
        return "22007";
    }
    if l.contains("can't cast value") {
        return "22003";
    }
    if l.contains("overflow") || l.contains("out of range") || l.contains("too large") {
        if l.contains("timestamp") || l.contains("date") {
            "22008"
        } else {
            "22003"
        }
    } else if l.contains("timestamp") || l.contains("date") || l.contains("time") {
        "22007"
    } else {
        "22P02"
    }
}

/// Maps a DataFusion error to a SQLSTATE by variant and, where DataFusion has no
/// finer variant, by [`MESSAGE_RULES`].
fn df_detail(e: &DataFusionError) -> Option<String> {
    match e {
        DataFusionError::External(inner) => inner.downcast_ref::<Error>().and_then(Error::detail),
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            df_detail(inner)
        }
        DataFusionError::Shared(inner) => df_detail(inner),
        _ => None,
    }
}

fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    use datafusion::common::SchemaError;
    match e {
        DataFusionError::SQL(_, _) => "42601",
        DataFusionError::SchemaError(se, _) => match se.as_ref() {
            SchemaError::FieldNotFound { .. } => "42703",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
            SchemaError::AmbiguousReference { .. } => "42702",
        },
        DataFusionError::ArrowError(a, _) => arrow_sqlstate(a),
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::Context(_, inner) => datafusion_sqlstate(inner),
        DataFusionError::Diagnostic(_, inner) => datafusion_sqlstate(inner),
        DataFusionError::Shared(inner) => datafusion_sqlstate(inner),
        DataFusionError::Collection(errs) => {
            errs.first().map(datafusion_sqlstate).unwrap_or("XX000")
        }
        DataFusionError::External(inner) => {
            if let Some(e) = inner.downcast_ref::<Error>() {
                e.sqlstate()
            } else if let Some(df) = inner.downcast_ref::<DataFusionError>() {
                datafusion_sqlstate(df)
            } else if let Some(a) = inner.downcast_ref::<arrow::error::ArrowError>() {
                arrow_sqlstate(a)
            } else {
                "XX000"
            }
        }
        DataFusionError::Plan(m) => message_sqlstate(Scope::Plan, m).unwrap_or("42000"),
        // Arrow's timestamp parser names the value it could not read: a cast error
        // whatever else the message says.
        DataFusionError::Execution(m) if timestamp_parse_value(m).is_some() => {
            cast_message_sqlstate(m)
        }
        DataFusionError::Execution(m) => message_sqlstate(Scope::Exec, m).unwrap_or("XX000"),
        DataFusionError::ObjectStore(_) | DataFusionError::ParquetError(_) => "58030",
        DataFusionError::IoError(_) => "58030",
        _ => "XX000",
    }
}

impl Error {
    /// The message a PostgreSQL client sees: ours as written; DataFusion's without
    /// its prefixes and, where clients rely on PostgreSQL's wording, in that wording.
    /// The DETAIL line of the error, where it has one (also through DataFusion).
    pub fn detail(&self) -> Option<String> {
        match self {
            Error::Unique { detail, .. } => Some(detail.clone()),
            Error::Detailed { detail, .. } => detail.clone(),
            Error::DataFusion(e) => df_detail(e),
            _ => None,
        }
    }

    pub fn client_message(&self) -> String {
        match self {
            Error::DataFusion(df) => pg_message(self.sqlstate(), &strip_df(&df.to_string())),
            other => other.to_string(),
        }
    }
}

/// PostgreSQL's name of an Arrow type in a cast message.
fn pg_type_name(arrow: &str) -> &str {
    match arrow {
        "Int16" => "smallint",
        "Int32" => "integer",
        "Int64" => "bigint",
        "Float32" => "real",
        "Float64" => "double precision",
        "Boolean" => "boolean",
        t if t.starts_with("Timestamp") => "timestamp with time zone",
        t if t.starts_with("Date") => "date",
        t if t.starts_with("Decimal") => "numeric",
        other => other,
    }
}

/// Rewrites DataFusion wording into PostgreSQL's where clients rely on it.
fn pg_message(code: &str, m: &str) -> String {
    // A function's own coercion error, wrapped by DataFusion's planner: keep ours.
    if let Some((_, inner)) = m.split_once("coercion failed with: External error: ") {
        return inner
            .split(". No function matches")
            .next()
            .unwrap_or(inner)
            .to_string();
    }
    if code == "23502" {
        return "null value violates not-null constraint".into();
    }
    if code == "42601" && m.contains("values list") {
        return "INSERT has more expressions than target columns".into();
    }
    if code == "42P01"
        && let Some(rest) = m.strip_prefix("table '")
        && let Some(name) = rest.split('\'').next()
    {
        let short = name.rsplit('.').next().unwrap_or(name);
        return format!("relation \"{short}\" does not exist");
    }
    if let Some(v) = timestamp_parse_value(m) {
        return if code == "22008" {
            format!("date/time field value out of range: \"{v}\"")
        } else {
            format!("invalid input syntax for type timestamp with time zone: \"{v}\"")
        };
    }
    if let Some(rest) = m.strip_prefix("Cast error: Can't cast value ")
        && let Some((_, ty)) = rest.rsplit_once(" to type ")
    {
        let pg = match ty {
            "Int16" | "Int32" | "Int64" => pg_type_name(ty),
            other => other,
        };
        return format!("{pg} out of range");
    }
    if let Some(rest) = m.strip_prefix("Cast error: Cannot cast string '")
        && let Some((value, ty)) = rest.split_once("' to value of ")
    {
        let pg = pg_type_name(ty.trim_end_matches(" type"));
        return format!("invalid input syntax for type {pg}: \"{value}\"");
    }
    m.to_string()
}

/// DataFusion prefixes messages with "Error during planning: " and the like.
fn strip_df(m: &str) -> String {
    let m = m.trim();
    if let Some((_, last)) = m.rsplit_once("caused by\n") {
        return strip_df(last);
    }
    for p in [
        "Error during planning: ",
        "Execution error: ",
        "SQL error: ",
        "Schema error: ",
        "External error: ",
        "Arrow error: ",
        "This feature is not implemented: ",
        "Optimizer rule 'type_coercion' failed\ncaused by\n",
    ] {
        if let Some(rest) = m.strip_prefix(p) {
            return strip_df(rest);
        }
    }
    m.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_messages_map() {
        let e = Error::DataFusion(DataFusionError::Plan("table 'a.b.c' not found".into()));
        assert_eq!(e.sqlstate(), "42P01");
        let e = Error::DataFusion(DataFusionError::Plan(
            "Invalid function 'nope'.\nDid you mean 'now'?".into(),
        ));
        assert_eq!(e.sqlstate(), "42883");
        assert_eq!(Error::UndefinedDatabase("x".into()).sqlstate(), "3D000");
        assert_eq!(Error::UndefinedDatabase("x".into()).http_status(), 404);
    }

    /// Each row of the table decides at least one message, so none is dead, and a
    /// message the rows do not know keeps the variant's default.
    #[test]
    fn every_message_rule_is_reachable() {
        for (i, (scope, parts, code)) in MESSAGE_RULES.iter().enumerate() {
            let m = parts.join(" ");
            let e = match scope {
                Scope::Plan | Scope::Any => DataFusionError::Plan(m.clone()),
                Scope::Exec => DataFusionError::Execution(m.clone()),
            };
            let want = if *code == CAST {
                cast_message_sqlstate(&m)
            } else {
                code
            };
            let first = MESSAGE_RULES
                .iter()
                .position(|(s, all, _)| {
                    (s == scope || *s == Scope::Any || *scope == Scope::Any && *s == Scope::Plan)
                        && all.iter().all(|p| m.to_ascii_lowercase().contains(p))
                })
                .unwrap_or(usize::MAX);
            assert_eq!(first, i, "row {i} ({m:?}) is shadowed by row {first}");
            assert_eq!(datafusion_sqlstate(&e), want, "row {i}: {m:?}");
        }
        assert_eq!(
            datafusion_sqlstate(&DataFusionError::Plan("something new".into())),
            "42000"
        );
        assert_eq!(
            datafusion_sqlstate(&DataFusionError::Execution("something new".into())),
            "XX000"
        );
    }

    #[test]
    fn casts_and_our_own_codes() {
        let e = Error::DataFusion(DataFusionError::Execution(
            "Error parsing timestamp from '2024-02-30' using format".into(),
        ));
        assert_eq!(e.sqlstate(), "22008");
        // The value is the user's: its words must not pick another code.
        let odd = Error::DataFusion(DataFusionError::Execution(
            "Error parsing timestamp from 'non-nullable' using format".into(),
        ));
        assert_eq!(odd.sqlstate(), "22007");
        assert_eq!(
            e.client_message(),
            "date/time field value out of range: \"2024-02-30\""
        );
        let e = Error::DataFusion(DataFusionError::Execution(
            "Cast error: Cannot cast string 'abc' to value of Int32 type".into(),
        ));
        assert_eq!(e.sqlstate(), "22P02");
        assert_eq!(
            e.client_message(),
            "invalid input syntax for type integer: \"abc\""
        );
        // Our code survives DataFusion's wrapping, whatever the message says.
        let ours: DataFusionError =
            Error::sql("TS102", "not a hypertable (table not found)").into();
        let wrapped = DataFusionError::Context("planning".into(), Box::new(ours));
        assert_eq!(Error::DataFusion(wrapped).sqlstate(), "TS102");
        let e = Error::DataFusion(DataFusionError::Plan(
            "table 'sundial.public.nope' not found".into(),
        ));
        assert_eq!(e.client_message(), "relation \"nope\" does not exist");
    }
}
