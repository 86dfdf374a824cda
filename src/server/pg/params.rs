//! Bound `numeric` parameters, decoded exactly. arrow-pg goes through
//! `rust_decimal` (28 digits, silent wrong digits when a value is rescaled past
//! that); Sundial reads the text and binary forms itself into the plan's decimal
//! type, rounding half away from zero as PostgreSQL does, and answers 22003 when
//! the value does not fit. A NULL parameter nothing types is kept in its place
//! (arrow-pg drops it, shifting the ones after it).

use arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::common::ScalarValue;
use datafusion::common::metadata::ScalarAndMetadata;
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::api::results::FieldFormat;
use pgwire::error::PgWireResult;

use crate::error::Error;
use crate::sql::pgnumeric::{binary_text, scaled};

/// How a parameter is decoded when arrow-pg cannot be left to it.
enum Own {
    /// A `numeric` into this decimal type (256-bit when `wide`).
    Numeric { wide: bool, p: u8, s: i8 },
    /// A NULL nothing types (psycopg's `None`): arrow-pg would drop it from the list.
    UntypedNull,
    /// A `json` or `jsonb` value, as its text (binary `jsonb` starts with a version
    /// byte, 1).
    Json,
}

/// The portal's parameters as DataFusion values for the plan's `types`.
pub fn decode<S: Clone>(
    portal: &Portal<S>,
    types: &[Option<DataType>],
    kinds: &[Option<crate::json::Kind>],
) -> PgWireResult<ParamValues> {
    let kind = |i: usize| kinds.get(i).copied().flatten();
    let own: Vec<(usize, Own)> = (0..portal.parameter_len())
        .filter_map(|i| {
            let hint = portal.statement.parameter_types.get(i).cloned().flatten();
            let hint = hint.filter(|h| *h != Type::UNKNOWN);
            match (hint, types.get(i).cloned().flatten()) {
                (None | Some(Type::NUMERIC), Some(DataType::Decimal128(p, s))) => {
                    Some((i, Own::Numeric { wide: false, p, s }))
                }
                (None | Some(Type::NUMERIC), Some(DataType::Decimal256(p, s))) => {
                    Some((i, Own::Numeric { wide: true, p, s }))
                }
                (Some(Type::JSON | Type::JSONB), _) => Some((i, Own::Json)),
                (None, _) if kind(i).is_some() => Some((i, Own::Json)),
                (None, None) if portal.parameters.get(i).is_some_and(Option::is_none) => {
                    Some((i, Own::UntypedNull))
                }
                _ => None,
            }
        })
        .collect();
    // arrow-pg knows numeric only as a 128-bit decimal: 256-bit slots are decoded
    // here (declared numeric or untyped) or into a 128-bit decimal and widened.
    let narrowed: Vec<Option<DataType>> = types
        .iter()
        .map(|t| match t {
            Some(DataType::Decimal256(..)) => Some(DataType::Decimal128(38, 10)),
            other => other.clone(),
        })
        .collect();
    let refs: Vec<Option<&DataType>> = narrowed.iter().map(|t| t.as_ref()).collect();
    let wide = types
        .iter()
        .any(|t| matches!(t, Some(DataType::Decimal256(..))));
    if own.is_empty() && !wide {
        return arrow_pg::datatypes::df::deserialize_parameters(portal, &refs);
    }
    // Everything else through arrow-pg, with these values stood in for.
    let mut parameters = portal.parameters.clone();
    for (i, how) in &own {
        parameters[*i] = match how {
            Own::Numeric { .. } | Own::Json => None,
            Own::UntypedNull => Some(bytes::Bytes::new()),
        };
    }
    // JSON slots are read as text here: arrow-pg would refuse their declared type.
    let mut parameter_types = portal.statement.parameter_types.clone();
    for (i, how) in &own {
        if let (Own::Json, Some(t)) = (how, parameter_types.get_mut(*i)) {
            *t = Some(Type::TEXT);
        }
    }
    let statement = std::sync::Arc::new(pgwire::api::stmt::StoredStatement::new(
        portal.statement.id.clone(),
        portal.statement.statement.clone(),
        parameter_types,
    ));
    let mut blanked = Portal::new_cursor(portal.name.clone(), statement);
    blanked.parameter_format = portal.parameter_format.clone();
    blanked.parameters = parameters;
    let ParamValues::List(mut list) =
        arrow_pg::datatypes::df::deserialize_parameters(&blanked, &refs)?
    else {
        return arrow_pg::datatypes::df::deserialize_parameters(portal, &refs);
    };
    for (i, t) in types.iter().enumerate() {
        if let (Some(t @ DataType::Decimal256(..)), Some(slot)) = (t, list.get_mut(i)) {
            let value = slot.value.cast_to(t).map_err(|e| {
                super::to_pg(Error::sql(
                    "22003",
                    format!("numeric parameter ${}: {e}", i + 1),
                ))
            })?;
            *slot = ScalarAndMetadata::from(value);
        }
    }
    for (i, how) in own {
        let value = match how {
            Own::UntypedNull => ScalarValue::Utf8(None),
            Own::Json => {
                let binary = portal.parameter_format.format_for(i) == FieldFormat::Binary;
                let text = match &portal.parameters[i] {
                    None => None,
                    Some(bytes) => {
                        let hint = portal.statement.parameter_types.get(i).cloned().flatten();
                        let jsonb = hint == Some(Type::JSONB)
                            || (hint.is_none() || hint == Some(Type::UNKNOWN))
                                && kind(i) == Some(crate::json::Kind::Jsonb);
                        let body = match bytes.split_first() {
                            Some((1, rest)) if binary && jsonb => rest,
                            Some(_) if binary && jsonb => {
                                return Err(super::to_pg(Error::sql(
                                    "22P03",
                                    "unsupported jsonb version number",
                                )));
                            }
                            _ => bytes.as_ref(),
                        };
                        Some(
                            std::str::from_utf8(body)
                                .map_err(|_| {
                                    super::to_pg(Error::sql(
                                        "22021",
                                        "invalid byte sequence for encoding \"UTF8\"",
                                    ))
                                })?
                                .to_string(),
                        )
                    }
                };
                ScalarValue::Utf8(text)
            }
            Own::Numeric { wide, p, s } => {
                let value = match &portal.parameters[i] {
                    None => None,
                    Some(bytes) => {
                        let text = if portal.parameter_format.format_for(i) == FieldFormat::Binary {
                            binary_text(bytes)
                        } else {
                            std::str::from_utf8(bytes)
                                .map(str::to_string)
                                .map_err(|_| Error::sql("22P02", "numeric parameter is not UTF-8"))
                        };
                        let text = text.map_err(super::to_pg)?;
                        Some(scaled(&text, p, s).map_err(super::to_pg)?)
                    }
                };
                if wide {
                    ScalarValue::Decimal256(value, p, s)
                } else {
                    let narrow = value
                        .map(|v| {
                            v.to_i128().ok_or_else(|| {
                                super::to_pg(Error::sql("22003", "numeric field overflow"))
                            })
                        })
                        .transpose()?;
                    ScalarValue::Decimal128(narrow, p, s)
                }
            }
        };
        if let Some(slot) = list.get_mut(i) {
            *slot = ScalarAndMetadata::from(value);
        }
    }
    Ok(ParamValues::List(list))
}
