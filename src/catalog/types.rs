//! Column types as the catalog stores them (PostgreSQL names) and their Arrow
//! representation. Time is `Timestamp(Microsecond)`, as in PostgreSQL.

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The UTC time-zone name stored on `timestamptz` Arrow types.
pub const UTC: &str = "UTC";

/// Digits in all of a `numeric` declared without a typmod: a 256-bit decimal.
pub const ANY_NUMERIC_PRECISION: u8 = 76;

/// Fractional digits kept by a `numeric` declared without a typmod (38 integer
/// digits remain). Arrow decimals have one scale per column, PostgreSQL one per
/// value: such values print without trailing zeros (`12.50` reads back as `12.5`).
pub const ANY_NUMERIC_SCALE: i8 = 38;

/// The Arrow type of `numeric` without a typmod.
pub const ANY_NUMERIC: DataType = DataType::Decimal256(ANY_NUMERIC_PRECISION, ANY_NUMERIC_SCALE);

/// Whether `dt` is `numeric` without a typmod ([`ANY_NUMERIC`]).
pub fn is_any_numeric(dt: &DataType) -> bool {
    *dt == ANY_NUMERIC
}

/// The Arrow decimal for `numeric(precision, scale)`: 128-bit up to 38 digits,
/// 256-bit up to 76.
pub fn numeric_type(precision: u8, scale: i8) -> DataType {
    if precision <= 38 {
        DataType::Decimal128(precision, scale)
    } else {
        DataType::Decimal256(precision, scale)
    }
}

/// A column type in PostgreSQL terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum SqlType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `numeric(p, s)`: a 128-bit decimal up to 38 digits, 256-bit up to 76.
    Numeric(u8, i8),
    /// `numeric` without precision: [`ANY_NUMERIC`], a 256-bit decimal with
    /// [`ANY_NUMERIC_SCALE`] fractional digits, printed without trailing zeros.
    NumericAny,
    Text,
    Varchar(Option<u32>),
    Bytea,
    Date,
    Timestamp,
    Timestamptz,
    /// `json`: the input text as written (Arrow text, [`crate::json::Kind`]).
    Json,
    /// `jsonb`: normalized JSON text (Arrow text, [`crate::json::Kind`]).
    Jsonb,
}

impl SqlType {
    /// The Arrow type that stores values of this column.
    pub fn to_arrow(&self) -> DataType {
        match self {
            SqlType::Bool => DataType::Boolean,
            SqlType::Int2 => DataType::Int16,
            SqlType::Int4 => DataType::Int32,
            SqlType::Int8 => DataType::Int64,
            SqlType::Float4 => DataType::Float32,
            SqlType::Float8 => DataType::Float64,
            SqlType::Numeric(p, s) => numeric_type(*p, *s),
            SqlType::NumericAny => ANY_NUMERIC,
            SqlType::Text | SqlType::Varchar(_) | SqlType::Json | SqlType::Jsonb => DataType::Utf8,
            SqlType::Bytea => DataType::Binary,
            SqlType::Date => DataType::Date32,
            SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::Timestamptz => {
                DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from(UTC)))
            }
        }
    }

    /// The JSON kind of a `json` or `jsonb` column.
    pub fn json(&self) -> Option<crate::json::Kind> {
        match self {
            SqlType::Json => Some(crate::json::Kind::Json),
            SqlType::Jsonb => Some(crate::json::Kind::Jsonb),
            _ => None,
        }
    }

    /// The Arrow field of a column of this type (`json` and `jsonb` carry their
    /// kind in the field's metadata).
    pub fn field(&self, name: &str, nullable: bool) -> arrow::datatypes::Field {
        match self.json() {
            Some(kind) => kind.field(name, nullable),
            None => arrow::datatypes::Field::new(name, self.to_arrow(), nullable),
        }
    }

    /// The type whose Arrow form is `dt`, when there is one (the inverse of
    /// [`SqlType::to_arrow`]).
    pub fn from_arrow(dt: &DataType) -> Option<SqlType> {
        Some(match dt {
            DataType::Boolean => SqlType::Bool,
            DataType::Int16 => SqlType::Int2,
            DataType::Int32 => SqlType::Int4,
            DataType::Int64 => SqlType::Int8,
            DataType::Float32 => SqlType::Float4,
            DataType::Float64 => SqlType::Float8,
            d if is_any_numeric(d) => SqlType::NumericAny,
            DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => SqlType::Numeric(*p, *s),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => SqlType::Text,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => SqlType::Bytea,
            DataType::Date32 => SqlType::Date,
            DataType::Timestamp(TimeUnit::Microsecond, None) => SqlType::Timestamp,
            DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => SqlType::Timestamptz,
            _ => return None,
        })
    }

    pub fn is_time(&self) -> bool {
        matches!(
            self,
            SqlType::Timestamp | SqlType::Timestamptz | SqlType::Date
        )
    }

    /// Parses a type as written in SQL (`int8`, `bigint`, `double precision`,
    /// `numeric(10,2)`, `varchar(20)`, `timestamp with time zone`, ...).
    pub fn parse(s: &str) -> Result<SqlType> {
        let norm = s.trim().to_ascii_lowercase();
        let norm = norm.split_whitespace().collect::<Vec<_>>().join(" ");
        let (base, args) = match norm.find('(') {
            Some(i) => {
                let close = norm.rfind(')').unwrap_or(norm.len());
                let args: Vec<&str> = norm[i + 1..close.max(i + 1)]
                    .split(',')
                    .map(|a| a.trim())
                    .filter(|a| !a.is_empty())
                    .collect();
                let rest = norm[(close + 1).min(norm.len())..].trim().to_string();
                let base = format!("{} {}", norm[..i].trim(), rest);
                (base.trim().to_string(), args)
            }
            None => (norm.clone(), vec![]),
        };
        let num = |i: usize| -> Result<Option<i64>> {
            args.get(i)
                .map(|a| {
                    a.parse::<i64>()
                        .map_err(|_| Error::sql("42601", format!("invalid type modifier in {s}")))
                })
                .transpose()
        };
        Ok(match base.as_str() {
            "bool" | "boolean" => SqlType::Bool,
            "int2" | "smallint" => SqlType::Int2,
            "int" | "int4" | "integer" => SqlType::Int4,
            "int8" | "bigint" => SqlType::Int8,
            "float4" | "real" => SqlType::Float4,
            "float8" | "double precision" | "double" => SqlType::Float8,
            "float" => match num(0)? {
                Some(p) if p <= 24 => SqlType::Float4,
                _ => SqlType::Float8,
            },
            "numeric" | "decimal" => match (num(0)?, num(1)?) {
                (None, _) => SqlType::NumericAny,
                (Some(p), s) => {
                    let s = s.unwrap_or(0);
                    if !(1..=i64::from(ANY_NUMERIC_PRECISION)).contains(&p) || s < 0 || s > p {
                        return Err(Error::sql(
                            "22023",
                            format!(
                                "NUMERIC precision {p} and scale {s} must be 1..76 and 0..precision"
                            ),
                        ));
                    }
                    SqlType::Numeric(p as u8, s as i8)
                }
            },
            "text" | "string" => SqlType::Text,
            "varchar" | "character varying" | "char" | "character" | "bpchar" => {
                SqlType::Varchar(num(0)?.map(|n| n.max(0) as u32))
            }
            "bytea" => SqlType::Bytea,
            "json" => SqlType::Json,
            "jsonb" => SqlType::Jsonb,
            "date" => SqlType::Date,
            "timestamp" | "timestamp without time zone" => SqlType::Timestamp,
            "timestamptz" | "timestamp with time zone" => SqlType::Timestamptz,
            other => {
                return Err(Error::NotSupported(format!(
                    "column type \"{other}\" is not supported"
                )));
            }
        })
    }

    /// The PostgreSQL name, as `format_type` would print it.
    pub fn pg_name(&self) -> String {
        match self {
            SqlType::Bool => "boolean".into(),
            SqlType::Int2 => "smallint".into(),
            SqlType::Int4 => "integer".into(),
            SqlType::Int8 => "bigint".into(),
            SqlType::Float4 => "real".into(),
            SqlType::Float8 => "double precision".into(),
            SqlType::Numeric(p, s) => format!("numeric({p},{s})"),
            SqlType::NumericAny => "numeric".into(),
            SqlType::Text => "text".into(),
            SqlType::Varchar(None) => "character varying".into(),
            SqlType::Varchar(Some(n)) => format!("character varying({n})"),
            SqlType::Bytea => "bytea".into(),
            SqlType::Json => "json".into(),
            SqlType::Jsonb => "jsonb".into(),
            SqlType::Date => "date".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::Timestamptz => "timestamp with time zone".into(),
        }
    }
}

impl From<SqlType> for String {
    fn from(t: SqlType) -> String {
        match t {
            SqlType::Bool => "bool".into(),
            SqlType::Int2 => "int2".into(),
            SqlType::Int4 => "int4".into(),
            SqlType::Int8 => "int8".into(),
            SqlType::Float4 => "float4".into(),
            SqlType::Float8 => "float8".into(),
            SqlType::Numeric(p, s) => format!("numeric({p},{s})"),
            SqlType::NumericAny => "numeric".into(),
            SqlType::Text => "text".into(),
            SqlType::Varchar(None) => "varchar".into(),
            SqlType::Varchar(Some(n)) => format!("varchar({n})"),
            SqlType::Bytea => "bytea".into(),
            SqlType::Json => "json".into(),
            SqlType::Jsonb => "jsonb".into(),
            SqlType::Date => "date".into(),
            SqlType::Timestamp => "timestamp".into(),
            SqlType::Timestamptz => "timestamptz".into(),
        }
    }
}

impl TryFrom<String> for SqlType {
    type Error = Error;
    fn try_from(s: String) -> Result<SqlType> {
        SqlType::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_spellings() {
        assert_eq!(SqlType::parse("BIGINT").unwrap(), SqlType::Int8);
        assert_eq!(
            SqlType::parse("double  precision").unwrap(),
            SqlType::Float8
        );
        assert_eq!(
            SqlType::parse("numeric(10, 2)").unwrap(),
            SqlType::Numeric(10, 2)
        );
        assert_eq!(
            SqlType::parse("timestamp with time zone").unwrap(),
            SqlType::Timestamptz
        );
        assert_eq!(
            SqlType::parse("varchar(20)").unwrap(),
            SqlType::Varchar(Some(20))
        );
        assert!(SqlType::parse("geometry").is_err());
        let s: String = SqlType::Numeric(10, 2).into();
        assert_eq!(SqlType::parse(&s).unwrap(), SqlType::Numeric(10, 2));
    }
}
