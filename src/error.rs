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
    #[error("WAL: {0}")]
    Wal(String),
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
    #[error("canceling statement due to user request")]
    Canceled,
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
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

    /// The PostgreSQL SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::Config(_) => "F0000",
            Error::Io { .. } => "58030",
            Error::WalCorrupt { .. } | Error::Wal(_) | Error::Catalog(_) => "XX000",
            Error::UndefinedDatabase(_) => "3D000",
            Error::DuplicateDatabase(_) => "42P04",
            Error::UndefinedTable(_) => "42P01",
            Error::DuplicateTable(_) => "42P07",
            Error::UndefinedColumn(_) => "42703",
            Error::DuplicateColumn(_) => "42701",
            Error::NotSupported(_) => "0A000",
            Error::Sql { code, .. } => code,
            Error::Parse(_) => "42601",
            Error::DataFusion(e) => datafusion_sqlstate(e),
            Error::Arrow(e) => arrow_sqlstate(e),
            Error::Parquet(_) | Error::ObjectStore(_) => "58030",
            Error::Canceled => "57014",
            Error::Internal(_) => "XX000",
        }
    }

    /// The HTTP status for this error on the line-protocol port.
    pub fn http_status(&self) -> u16 {
        match self.sqlstate() {
            "3D000" => 404,
            s if s.starts_with("22") || s.starts_with("42") => 400,
            "0A000" => 400,
            "57014" => 503,
            _ => 500,
        }
    }
}

fn arrow_sqlstate(e: &arrow::error::ArrowError) -> &'static str {
    use arrow::error::ArrowError as A;
    if let Some(code) = common_message_sqlstate(&e.to_string().to_ascii_lowercase()) {
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
pub fn timestamp_parse_value(m: &str) -> Option<&str> {
    let i = m.find("Error parsing timestamp from '")?;
    let rest = &m[i + "Error parsing timestamp from '".len()..];
    rest.split('\'').next()
}

/// A timestamp that has the shape `YYYY-MM-DD` but names no real date is out of range.
pub fn looks_like_date(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

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
    if m.to_ascii_lowercase().contains("interval") {
        return "22007";
    }
    let l = m.to_ascii_lowercase();
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
/// finer variant, by its message.
pub fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
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
        DataFusionError::Plan(m) => plan_message_sqlstate(m),
        DataFusionError::Execution(m) => execution_message_sqlstate(m),
        _ => "XX000",
    }
}

/// Messages that mean the same thing whatever DataFusion variant carries them.
fn common_message_sqlstate(l: &str) -> Option<&'static str> {
    if l.contains("non-nullable") || l.contains("violates not-null") {
        Some("23502")
    } else if l.contains("percentile value must be between") {
        Some("22003")
    } else if l.contains("inconsistent data length across values list")
        || l.contains("column count doesn't match")
        || l.contains("more expressions than target columns")
    {
        Some("42601")
    } else {
        None
    }
}

fn plan_message_sqlstate(m: &str) -> &'static str {
    let l = m.to_ascii_lowercase();
    if let Some(code) = common_message_sqlstate(&l) {
        code
    } else if l.contains("table") && l.contains("not found") {
        "42P01"
    } else if l.contains("invalid function")
        || (l.contains("function") && l.contains("not found"))
        || l.contains("no function matches")
        || l.contains("failed to coerce arguments")
        || l.contains("does not support")
        || l.contains("arithmetic expression")
        || l.contains("no operator")
    {
        "42883"
    } else if l.contains("cannot cast") || l.contains("cannot coerce") {
        "42846"
    } else if l.contains("no field named") {
        "42703"
    } else if l.contains("placeholder") || l.contains("parameter") {
        "42P02"
    } else {
        "42000"
    }
}

fn execution_message_sqlstate(m: &str) -> &'static str {
    if timestamp_parse_value(m).is_some() {
        return cast_message_sqlstate(m);
    }
    let l = m.to_ascii_lowercase();
    if let Some(code) = common_message_sqlstate(&l) {
        code
    } else if l.contains("cast") || l.contains("parse") || l.contains("invalid") {
        cast_message_sqlstate(m)
    } else if l.contains("divide by zero") || l.contains("division by zero") {
        "22012"
    } else if l.contains("overflow") || l.contains("out of range") {
        "22003"
    } else {
        "XX000"
    }
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
}
