//! TimescaleDB's `histogram(value, min, max, nbuckets)` aggregate: an int4[] of
//! `nbuckets + 2` counts (below `min`, the buckets, at or above `max`), bucketed
//! exactly as PostgreSQL's `width_bucket(float8, float8, float8, int4)`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, ListArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int32Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

const HINT: &str = "histogram(value double precision, min double precision, max double precision, nbuckets integer)";

fn sql_err(code: &'static str, msg: impl Into<String>) -> DataFusionError {
    crate::Error::sql(code, msg).into()
}

/// The `histogram` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Histogram {
    signature: Signature,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn list_type() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Int32, true)))
}

impl AggregateUDFImpl for Histogram {
    fn name(&self) -> &str {
        "histogram"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let numeric = |t: &DataType| t.is_numeric() || *t == DataType::Null;
        if args.len() != 4
            || !args.iter().all(numeric)
            || !(args[3].is_integer() || args[3] == DataType::Null)
        {
            let list: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            return Err(sql_err(
                "42883",
                format!(
                    "function histogram({}) does not exist. Hint: {HINT}",
                    list.join(", ")
                ),
            ));
        }
        Ok(vec![
            DataType::Float64,
            DataType::Float64,
            DataType::Float64,
            DataType::Int32,
        ])
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(list_type())
    }
    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(HistogramAcc::default()))
    }
    fn state_fields(&self, _: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new("counts", list_type(), true))])
    }
}

#[derive(Debug, Default)]
struct HistogramAcc {
    /// `nbuckets + 2` counts once a non-NULL value was seen.
    counts: Option<Vec<i32>>,
}

/// PostgreSQL 15's `width_bucket(operand, b1, b2, count)` for float8.
pub fn width_bucket(operand: f64, b1: f64, b2: f64, count: i32) -> Result<i32> {
    if count <= 0 {
        return Err(sql_err("2201G", "count must be greater than zero"));
    }
    if operand.is_nan() || b1.is_nan() || b2.is_nan() {
        return Err(sql_err(
            "2201G",
            "operand, lower bound, and upper bound cannot be NaN",
        ));
    }
    if b1.is_infinite() || b2.is_infinite() {
        return Err(sql_err("2201G", "lower and upper bounds must be finite"));
    }
    let n = count as f64;
    let result = if b1 < b2 {
        if operand < b1 {
            0
        } else if operand >= b2 {
            count
                .checked_add(1)
                .ok_or_else(|| sql_err("22003", "integer out of range"))?
        } else {
            let r = if (b2 - b1).is_finite() {
                n * ((operand - b1) / (b2 - b1))
            } else {
                n * ((operand / 2.0 - b1 / 2.0) / (b2 / 2.0 - b1 / 2.0))
            };
            (r as i32).min(count - 1) + 1
        }
    } else if b1 > b2 {
        if operand > b1 {
            0
        } else if operand <= b2 {
            count
                .checked_add(1)
                .ok_or_else(|| sql_err("22003", "integer out of range"))?
        } else {
            let r = if (b1 - b2).is_finite() {
                n * ((b1 - operand) / (b1 - b2))
            } else {
                n * ((b1 / 2.0 - operand / 2.0) / (b1 / 2.0 - b2 / 2.0))
            };
            (r as i32).min(count - 1) + 1
        }
    } else {
        return Err(sql_err("2201G", "lower bound cannot equal upper bound"));
    };
    Ok(result)
}

impl Accumulator for HistogramAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let v = values[0].as_primitive::<Float64Type>();
        let lo = values[1].as_primitive::<Float64Type>();
        let hi = values[2].as_primitive::<Float64Type>();
        let nb = values[3].as_primitive::<Int32Type>();
        for i in 0..v.len() {
            if v.is_null(i) || lo.is_null(i) || hi.is_null(i) || nb.is_null(i) {
                continue;
            }
            let b = width_bucket(v.value(i), lo.value(i), hi.value(i), nb.value(i))?;
            let counts = self
                .counts
                .get_or_insert_with(|| vec![0; nb.value(i) as usize + 2]);
            if let Some(c) = counts.get_mut(b as usize) {
                *c += 1;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(match &self.counts {
            Some(c) => {
                ScalarValue::List(Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
                    [Some(c.iter().map(|x| Some(*x)))],
                )))
            }
            None => ScalarValue::try_from(list_type())?,
        })
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.counts.as_ref().map_or(0, |c| c.len() * 4)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_null(i) {
                continue;
            }
            let part = lists.value(i);
            let part = part
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or_else(|| DataFusionError::Internal("histogram state type".into()))?;
            let counts = self.counts.get_or_insert_with(|| vec![0; part.len()]);
            if counts.len() != part.len() {
                return Err(sql_err(
                    "22023",
                    "histogram: min, max and nbuckets must be the same in every row",
                ));
            }
            for (c, p) in counts.iter_mut().zip(part.values().iter()) {
                *c += p;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_postgres_width_bucket() {
        // Values computed by PostgreSQL 15: SELECT width_bucket(x, 0, 10, 5).
        for (x, want) in [
            (-1.0, 0),
            (0.0, 1),
            (1.99, 1),
            (2.0, 2),
            (9.99, 5),
            (10.0, 6),
            (11.0, 6),
        ] {
            assert_eq!(width_bucket(x, 0.0, 10.0, 5).unwrap(), want, "{x}");
        }
        // Reversed bounds: SELECT width_bucket(x, 10, 0, 5).
        for (x, want) in [(11.0, 0), (10.0, 1), (8.0, 2), (0.0, 6), (0.5, 5)] {
            assert_eq!(width_bucket(x, 10.0, 0.0, 5).unwrap(), want, "{x}");
        }
        assert!(width_bucket(1.0, 1.0, 1.0, 5).is_err());
        assert!(width_bucket(1.0, 0.0, 2.0, 0).is_err());
    }
}
