//! PostgreSQL's ordered-set aggregates, `… WITHIN GROUP (ORDER BY x)`: exact
//! `percentile_cont` and `percentile_disc` with one fraction or an array of them
//! (`percentile_cont(ARRAY[0.25, 0.5])` gives a float8[]), and `mode()`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, ListArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

use super::sql_error;

/// Which ordered-set aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// The first value whose position in the order is at least the fraction of rows.
    Disc,
    /// The value at the fraction of the rows, interpolated between neighbours (float8).
    Cont,
    /// The most frequent value; among equally frequent ones the first in the order, as
    /// PostgreSQL's `mode_final` picks it.
    Mode,
}

/// `percentile_disc(f)`, `percentile_cont(f)` and `mode()` `WITHIN GROUP (ORDER BY
/// x)`; `f` is a constant fraction or an array of them.
#[derive(Debug, PartialEq, Eq, Hash)]
struct OrderedSet {
    signature: Signature,
    kind: Kind,
}

/// The fraction argument's type when it is an array (`ARRAY[0.25, 0.5]`).
fn is_array(t: Option<&DataType>) -> bool {
    matches!(
        t,
        Some(DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..))
    )
}

impl AggregateUDFImpl for OrderedSet {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Disc => "percentile_disc",
            Kind::Cont => "percentile_cont",
            Kind::Mode => "mode",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let item = match self.kind {
            Kind::Cont => match &arg_types[0] {
                t if t.is_numeric() || t.is_null() => DataType::Float64,
                t => {
                    return Err(sql_error(
                        "42883",
                        &format!("function percentile_cont({t}) does not exist"),
                    ));
                }
            },
            _ => arg_types[0].clone(),
        };
        Ok(match is_array(arg_types.get(1)) {
            true => DataType::new_list(item, true),
            false => item,
        })
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let t = match self.kind {
            Kind::Cont => DataType::Float64,
            _ => args.input_fields[0].data_type().clone(),
        };
        Ok(vec![Arc::new(Field::new(
            format!("{}[values]", args.name),
            DataType::new_list(t, true),
            true,
        ))])
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let fractions = match self.kind {
            Kind::Mode => Fractions::None,
            _ => fractions(&args, self.name())?,
        };
        let descending = args
            .order_bys
            .first()
            .map(|s| s.options.descending)
            .unwrap_or(false);
        let data_type = match self.kind {
            Kind::Cont => DataType::Float64,
            _ => args.expr_fields[0].data_type().clone(),
        };
        Ok(Box::new(OrderedAcc {
            values: vec![],
            data_type,
            kind: self.kind,
            fractions,
            descending,
        }))
    }
    fn supports_within_group_clause(&self) -> bool {
        true
    }
}

/// The fraction argument: one, an array (NULL elements give NULL results), or none
/// (`mode`).
#[derive(Debug)]
enum Fractions {
    None,
    One(Option<f64>),
    Many(Vec<Option<f64>>),
}

/// The constant fraction argument, each 0 to 1 (22003 otherwise, as PostgreSQL).
fn fractions(args: &AccumulatorArgs, name: &str) -> Result<Fractions> {
    let constant = args.exprs.get(1).and_then(|e| {
        let batch =
            arrow::array::RecordBatch::new_empty(Arc::new(arrow::datatypes::Schema::empty()));
        match e.evaluate(&batch) {
            Ok(ColumnarValue::Scalar(v)) => Some(v),
            _ => None,
        }
    });
    let check = |v: Option<f64>| match v {
        Some(f) if !(0.0..=1.0).contains(&f) => Err(sql_error(
            "22003",
            &format!("percentile value {f} is not between 0 and 1"),
        )),
        _ => Ok(v),
    };
    let Some(v) = constant else {
        return exec_err!("{name} needs a constant fraction");
    };
    if is_array(Some(&v.data_type())) {
        // Any list type of any numeric element, as a list of float8.
        let list =
            arrow::compute::cast(&v.to_array()?, &DataType::new_list(DataType::Float64, true))?;
        let items = list.as_list::<i32>().values().as_primitive::<Float64Type>();
        let many = (0..items.len())
            .map(|i| check(items.is_valid(i).then(|| items.value(i))))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Fractions::Many(many));
    }
    match v.cast_to(&DataType::Float64)? {
        ScalarValue::Float64(f) => Ok(Fractions::One(check(f)?)),
        other => exec_err!("{name}: fraction {other:?}"),
    }
}

/// Keeps the group's values; sorts them once at the end.
#[derive(Debug)]
struct OrderedAcc {
    values: Vec<ScalarValue>,
    data_type: DataType,
    kind: Kind,
    fractions: Fractions,
    descending: bool,
}

impl OrderedAcc {
    /// The value at `fraction` of the sorted, non-empty `v`.
    fn at(&self, v: &[ScalarValue], fraction: f64) -> Result<ScalarValue> {
        let n = v.len();
        if self.kind == Kind::Disc {
            let idx = ((fraction * n as f64).ceil() as usize).clamp(1, n) - 1;
            return Ok(v[idx].clone());
        }
        // PostgreSQL's percentile_cont_final: between rows floor and ceil of f·(n−1).
        let pos = fraction * (n - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        let value = |i: usize| match &v[i.min(n - 1)] {
            ScalarValue::Float64(Some(x)) => Ok(*x),
            other => exec_err!("percentile_cont over {other:?}"),
        };
        let (a, b) = (value(lo)?, value(hi)?);
        let x = if lo == hi {
            a
        } else {
            a + (b - a) * (pos - lo as f64)
        };
        Ok(ScalarValue::Float64(Some(x)))
    }
}

impl Accumulator for OrderedAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = match self.kind {
            Kind::Cont => arrow::compute::cast(&values[0], &DataType::Float64)?,
            _ => values[0].clone(),
        };
        for i in 0..a.len() {
            if a.is_valid(i) {
                self.values.push(ScalarValue::try_from_array(&a, i)?);
            }
        }
        Ok(())
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let null_item = ScalarValue::try_from(&self.data_type)?;
        // No rows, or a NULL fraction: NULL, as in PostgreSQL.
        if self.values.is_empty() || matches!(self.fractions, Fractions::One(None)) {
            return match &self.fractions {
                Fractions::Many(_) => {
                    ScalarValue::try_from(&DataType::new_list(self.data_type.clone(), true))
                }
                _ => Ok(null_item),
            };
        }
        let mut v = std::mem::take(&mut self.values);
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if self.descending {
            v.reverse();
        }
        let out = match &self.fractions {
            Fractions::None => {
                // The first of the longest runs of equal values.
                let (mut best, mut best_len, mut run) = (0, 0, 0);
                for i in 0..v.len() {
                    run = if i > 0 && v[i] == v[i - 1] {
                        run + 1
                    } else {
                        1
                    };
                    if run > best_len {
                        (best, best_len) = (i + 1 - run, run);
                    }
                }
                v[best].clone()
            }
            Fractions::One(f) => self.at(&v, f.unwrap_or_default())?,
            Fractions::Many(fs) => {
                let items = fs
                    .iter()
                    .map(|f| match f {
                        Some(f) => self.at(&v, *f),
                        None => Ok(null_item.clone()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                ScalarValue::List(ScalarValue::new_list_nullable(&items, &self.data_type))
            }
        };
        self.values = v;
        Ok(out)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.iter().map(|v| v.size()).sum::<usize>()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &self.values,
            &self.data_type,
        ))])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists: &ListArray = states[0].as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_valid(i) {
                self.update_batch(&[lists.value(i)])?;
            }
        }
        Ok(())
    }
}

/// Registers `percentile_disc`, `percentile_cont` (replacing DataFusion's, whose
/// interpolation weight is rounded to 1e-6) and `mode` in `ctx`.
pub fn register(ctx: &SessionContext) {
    let imm = Volatility::Immutable;
    for (kind, args) in [(Kind::Disc, 2), (Kind::Cont, 2), (Kind::Mode, 1)] {
        ctx.register_udaf(AggregateUDF::from(OrderedSet {
            signature: Signature::any(args, imm),
            kind,
        }));
    }
}
