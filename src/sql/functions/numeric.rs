//! `numeric` arithmetic as PostgreSQL computes it where DataFusion's decimal rules
//! differ: division with PostgreSQL's result scale (`select_div_scale`), products
//! involving `numeric` without a typmod (DataFusion's `s1 + s2` would ask for 76
//! fraction digits of a 76-digit type), `avg` of such numerics, `div(numeric,
//! numeric)`, and float → numeric
//! casts through the float's 15 (float4: 6) significant digits, as `float8_numeric`
//! does.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Decimal256Array};
use arrow::datatypes::{DataType, Field, FieldRef, i256};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::catalog::{ANY_NUMERIC, ANY_NUMERIC_PRECISION, ANY_NUMERIC_SCALE, is_any_numeric};

use super::sql_error;

/// Fractional digits a 128-bit numeric division keeps at most (18 integer digits
/// remain).
const DIV_SCALE: i8 = 20;

fn overflow(what: &str) -> DataFusionError {
    sql_error("22003", &format!("numeric field overflow: {what}"))
}

fn pow10(n: u32) -> Option<i256> {
    i256::from_i128(10).checked_pow(n)
}

/// Number of decimal digits of `|m|` (0 for 0).
fn digits(m: i256) -> u32 {
    match m.to_i128() {
        Some(0) => 0,
        Some(v) => v.unsigned_abs().ilog10() + 1,
        None => m.to_string().trim_start_matches('-').len() as u32,
    }
}

/// `m × 10^-s` with trailing fractional zeros dropped (the value's own scale).
fn trimmed(mut m: i256, mut s: u32) -> (i256, u32) {
    let ten = i256::from_i128(10);
    while s > 0 && m != i256::ZERO && m.wrapping_rem(ten) == i256::ZERO {
        m = m.wrapping_div(ten);
        s -= 1;
    }
    if m == i256::ZERO {
        s = 0;
    }
    (m, s)
}

/// Mantissa and scale of row `i` of an integer or decimal array. A numeric without
/// typmod is kept at a fixed scale; the value's own scale (what PostgreSQL would have
/// kept) is the one without trailing zeros.
pub(super) fn mantissa(a: &ArrayRef, i: usize) -> Option<(i256, u32)> {
    use arrow::datatypes as t;
    if a.is_null(i) {
        return None;
    }
    let small = |v: i128| Some((i256::from_i128(v), 0));
    match a.data_type() {
        DataType::Decimal256(_, s) => {
            let m = a.as_primitive::<t::Decimal256Type>().value(i);
            let s = (*s).max(0) as u32;
            Some(if is_any_numeric(a.data_type()) {
                trimmed(m, s)
            } else {
                (m, s)
            })
        }
        DataType::Decimal128(_, s) => Some((
            i256::from_i128(a.as_primitive::<t::Decimal128Type>().value(i)),
            (*s).max(0) as u32,
        )),
        DataType::Int8 => small(a.as_primitive::<t::Int8Type>().value(i).into()),
        DataType::Int16 => small(a.as_primitive::<t::Int16Type>().value(i).into()),
        DataType::Int32 => small(a.as_primitive::<t::Int32Type>().value(i).into()),
        DataType::Int64 => small(a.as_primitive::<t::Int64Type>().value(i).into()),
        DataType::UInt8 => small(a.as_primitive::<t::UInt8Type>().value(i).into()),
        DataType::UInt16 => small(a.as_primitive::<t::UInt16Type>().value(i).into()),
        DataType::UInt32 => small(a.as_primitive::<t::UInt32Type>().value(i).into()),
        DataType::UInt64 => small(a.as_primitive::<t::UInt64Type>().value(i).into()),
        _ => None,
    }
}

/// Where the leading base-10000 digit of a value of `n` decimal digits at scale `s`
/// sits in PostgreSQL's representation: its weight, and the power of ten it starts at.
pub(super) fn weight_position(n: i64, s: u32) -> (i64, i64) {
    let w = (n - 1 - i64::from(s)).div_euclid(4);
    (w, i64::from(s) + 4 * w)
}

/// PostgreSQL's `select_div_scale` from the operands' weights, whether the
/// dividend's leading base-10000 digit is not greater than the divisor's, and their
/// scales: at least 16 significant digits, never fewer fractional digits than either
/// input has.
pub(super) fn select_div_scale(w1: i64, w2: i64, first_not_greater: bool, s1: u32, s2: u32) -> u32 {
    let qweight = w1 - w2 - i64::from(first_not_greater);
    (16 - qweight * 4)
        .max(i64::from(s1))
        .max(i64::from(s2))
        .clamp(0, 1000) as u32
}

/// PostgreSQL's weight (position of the leading base-10000 digit) and leading
/// base-10000 digit of `m × 10^-s`.
fn weight_and_first(m: i256, s: u32) -> (i64, i256) {
    let a = m.wrapping_abs();
    let n = digits(a);
    if n == 0 {
        return (0, i256::ZERO);
    }
    let (w, k) = weight_position(i64::from(n), s);
    let first = if k >= 0 {
        pow10(k as u32).map_or(i256::ZERO, |p| a.wrapping_div(p))
    } else {
        pow10((-k) as u32).map_or(i256::ZERO, |p| a.wrapping_mul(p))
    };
    (w, first)
}

/// [`select_div_scale`] of `m1 × 10^-s1 / m2 × 10^-s2`.
fn div_scale(m1: i256, s1: u32, m2: i256, s2: u32) -> i32 {
    let (w1, f1) = weight_and_first(m1, s1);
    let (w2, f2) = weight_and_first(m2, s2);
    select_div_scale(w1, w2, f1 <= f2, s1, s2) as i32
}

/// `num / den` rounded half away from zero.
fn div_round(num: i256, den: i256) -> Option<i256> {
    let q = num.checked_div(den)?;
    let rem = num.checked_rem(den)?;
    let twice = rem.wrapping_abs().checked_mul(i256::from_i128(2))?;
    if twice >= den.wrapping_abs() {
        let away = if num.is_negative() != den.is_negative() {
            -1
        } else {
            1
        };
        q.checked_add(i256::from_i128(away))
    } else {
        Some(q)
    }
}

/// `m × 10^-from` as a mantissa of scale `to`, rounded half away from zero, and
/// below `10^precision`.
fn rescale(m: i256, from: u32, to: u32, precision: u8) -> Result<i256> {
    let too_big = || {
        overflow(&format!(
            "a result has more than {} integer digits",
            u32::from(precision) - to
        ))
    };
    let out = if from > to {
        div_round(m, pow10(from - to).ok_or_else(too_big)?).ok_or_else(too_big)?
    } else {
        m.checked_mul(pow10(to - from).ok_or_else(too_big)?)
            .ok_or_else(too_big)?
    };
    if digits(out) > u32::from(precision) {
        return Err(too_big());
    }
    Ok(out)
}

/// `m1 × 10^-s1 / m2 × 10^-s2` rounded half away from zero to PostgreSQL's result
/// scale (at most `out`), as a mantissa of scale `out` below `10^precision`.
pub(super) fn numeric_div(
    m1: i256,
    s1: u32,
    m2: i256,
    s2: u32,
    out: u32,
    precision: u8,
) -> Result<i256> {
    if m2 == i256::ZERO {
        return Err(sql_error("22012", "division by zero"));
    }
    let too_big = || {
        overflow(&format!(
            "a division result has more than {} integer digits",
            u32::from(precision) - out
        ))
    };
    let r = div_scale(m1, s1, m2, s2).min(out as i32);
    let e = s2 as i32 - s1 as i32 + r;
    let (mut num, mut den) = (m1, m2);
    if e >= 0 {
        num = num
            .checked_mul(pow10(e as u32).ok_or_else(too_big)?)
            .ok_or_else(too_big)?;
    } else {
        den = den
            .checked_mul(pow10((-e) as u32).ok_or_else(too_big)?)
            .ok_or_else(too_big)?;
    }
    let q = div_round(num, den).ok_or_else(too_big)?;
    rescale(q, r as u32, out, precision)
}

fn decimal_scale(t: &DataType) -> i8 {
    match t {
        DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => *s,
        _ => 0,
    }
}

fn any_wide(args: &[DataType]) -> bool {
    args.iter().any(|t| matches!(t, DataType::Decimal256(..)))
}

/// Field metadata marking a numeric whose values carry their own scale.
pub(super) fn own_scale_field(name: &str, t: DataType) -> FieldRef {
    let meta = std::collections::HashMap::from([(
        super::pgtext::OWN_SCALE.to_string(),
        "true".to_string(),
    )]);
    Arc::new(Field::new(name, t, true).with_metadata(meta))
}

fn arg_types(args: &datafusion::logical_expr::ReturnFieldArgs) -> Vec<DataType> {
    args.arg_fields
        .iter()
        .map(|f| f.data_type().clone())
        .collect()
}

/// Mantissas (of the output's scale) as a decimal array of type `t`.
fn decimal_array(values: Vec<Option<i256>>, t: &DataType) -> Result<ArrayRef> {
    Ok(match t {
        DataType::Decimal256(p, s) => {
            Arc::new(Decimal256Array::from(values).with_precision_and_scale(*p, *s)?)
        }
        DataType::Decimal128(p, s) => {
            let narrow = values
                .into_iter()
                .map(|v| {
                    v.map(|v| {
                        v.to_i128()
                            .ok_or_else(|| overflow("a result does not fit 38 digits"))
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>>>()?;
            Arc::new(Decimal128Array::from(narrow).with_precision_and_scale(*p, *s)?)
        }
        other => return exec_err!("not a decimal type: {other}"),
    })
}

/// `numeric / numeric` (or with an integer) as PostgreSQL divides: planned for `/`
/// when a numeric is involved. With a 256-bit operand the result is
/// [`ANY_NUMERIC`]; otherwise a 128-bit decimal of [`DIV_SCALE`] or more digits.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericDiv {
    signature: Signature,
}

impl Default for NumericDiv {
    fn default() -> Self {
        NumericDiv {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for NumericDiv {
    fn name(&self) -> &str {
        "numeric_div"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if any_wide(args) {
            return Ok(ANY_NUMERIC);
        }
        let scale = args
            .iter()
            .map(decimal_scale)
            .max()
            .unwrap_or(0)
            .clamp(DIV_SCALE, 38);
        Ok(DataType::Decimal128(38, scale))
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<FieldRef> {
        Ok(own_scale_field(
            self.name(),
            self.return_type(&arg_types(&args))?,
        ))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let t = args.return_field.data_type().clone();
        let (precision, out) = match t {
            DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => (p, s.max(0) as u32),
            _ => return exec_err!("numeric_div returns a decimal"),
        };
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            values.push(match (mantissa(&arrays[0], i), mantissa(&arrays[1], i)) {
                (Some((m1, s1)), Some((m2, s2))) => {
                    Some(numeric_div(m1, s1, m2, s2, out, precision)?)
                }
                _ => None,
            });
        }
        super::columnar(decimal_array(values, &t)?, scalar)
    }
}

/// `numeric * numeric` with a 256-bit operand: the exact product, rounded half away
/// from zero to `s1 + s2` fraction digits but at most [`ANY_NUMERIC_SCALE`];
/// 22003 when it has more than 76 digits.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericMul {
    signature: Signature,
}

impl Default for NumericMul {
    fn default() -> Self {
        NumericMul {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for NumericMul {
    fn name(&self) -> &str {
        "numeric_mul"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let scale: i8 = args.iter().map(decimal_scale).sum();
        Ok(DataType::Decimal256(
            ANY_NUMERIC_PRECISION,
            scale.clamp(0, ANY_NUMERIC_SCALE),
        ))
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<FieldRef> {
        let types = arg_types(&args);
        let t = self.return_type(&types)?;
        Ok(if types.iter().any(is_any_numeric) {
            own_scale_field(self.name(), t)
        } else {
            Arc::new(Field::new(self.name(), t, true))
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let t = args.return_field.data_type().clone();
        let out = decimal_scale(&t).max(0) as u32;
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            values.push(match (mantissa(&arrays[0], i), mantissa(&arrays[1], i)) {
                (Some((m1, s1)), Some((m2, s2))) => {
                    let m = m1
                        .checked_mul(m2)
                        .ok_or_else(|| overflow("a product has more than 76 digits"))?;
                    Some(rescale(m, s1 + s2, out, ANY_NUMERIC_PRECISION)?)
                }
                _ => None,
            });
        }
        super::columnar(decimal_array(values, &t)?, scalar)
    }
}

/// `div(numeric, numeric)`: the integer quotient, truncated toward zero, as a numeric
/// of scale 0 (integers are taken as numerics).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntegerQuotient {
    signature: Signature,
}

impl Default for IntegerQuotient {
    fn default() -> Self {
        IntegerQuotient {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for IntegerQuotient {
    fn name(&self) -> &str {
        "div"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let exact = |t: &DataType| {
            matches!(
                t,
                DataType::Null
                    | DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::Decimal128(_, _)
                    | DataType::Decimal256(_, _)
            )
        };
        if !args.iter().all(exact) {
            let names: Vec<String> = args.iter().map(|t| t.to_string()).collect();
            return Err(sql_error(
                "42883",
                &format!(
                    "function div({}) does not exist. Hint: div takes numeric arguments",
                    names.join(", ")
                ),
            ));
        }
        Ok(if any_wide(args) {
            DataType::Decimal256(ANY_NUMERIC_PRECISION, 0)
        } else {
            DataType::Decimal128(38, 0)
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let t = args.return_field.data_type().clone();
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            values.push(match (mantissa(&arrays[0], i), mantissa(&arrays[1], i)) {
                (Some((m1, s1)), Some((m2, s2))) => {
                    let s = s1.max(s2);
                    let widen = |m: i256, from: u32| {
                        pow10(s - from)
                            .and_then(|f| m.checked_mul(f))
                            .ok_or_else(|| overflow("div() operands"))
                    };
                    let (a, b) = (widen(m1, s1)?, widen(m2, s2)?);
                    if b == i256::ZERO {
                        return Err(sql_error("22012", "division by zero"));
                    }
                    Some(a.wrapping_div(b))
                }
                _ => None,
            });
        }
        super::columnar(decimal_array(values, &t)?, scalar)
    }
}

/// `avg` of a decimal (`numeric` with or without typmod), as PostgreSQL computes it:
/// the exact sum divided by the count with PostgreSQL's division scale (at least 16
/// significant digits: `avg(1.00, 1.00, 2.00)` = 1.3333333333333333), not
/// DataFusion's four extra fraction digits. The result is a numeric without typmod;
/// the sum overflows (22003) past 38 integer digits.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericAvg {
    signature: Signature,
    /// The input's fraction digits; `None` for a numeric without typmod, whose
    /// values carry their own.
    scale: Option<u32>,
    /// Averages `a / b` of two arguments: each quotient taken at PostgreSQL's
    /// division scale for its row, the largest of which is the sum's scale (as
    /// PostgreSQL's per-value display scales make it).
    quotient: bool,
}

impl NumericAvg {
    /// `avg(a / b)` of a numeric division (see [`NumericDiv`]).
    pub fn of_quotient() -> Self {
        NumericAvg {
            signature: Signature::any(2, Volatility::Immutable),
            scale: None,
            quotient: true,
        }
    }

    /// The average of a decimal column of type `t`, when it has at most
    /// [`ANY_NUMERIC_SCALE`] fraction digits.
    pub fn of(t: &DataType) -> Option<Self> {
        let scale = match t {
            t if is_any_numeric(t) => None,
            DataType::Decimal128(_, s) | DataType::Decimal256(_, s)
                if (0..=ANY_NUMERIC_SCALE).contains(s) =>
            {
                Some(*s as u32)
            }
            _ => return None,
        };
        Some(NumericAvg {
            signature: Signature::any(1, Volatility::Immutable),
            scale,
            quotient: false,
        })
    }
}

/// Row `i` of a decimal array as a mantissa of [`ANY_NUMERIC_SCALE`] fraction digits.
fn at_wide_scale(a: &ArrayRef, i: usize) -> Result<Option<i256>> {
    use arrow::datatypes as t;
    if a.is_null(i) {
        return Ok(None);
    }
    let (m, s) = match a.data_type() {
        DataType::Decimal256(_, s) => (a.as_primitive::<t::Decimal256Type>().value(i), *s),
        DataType::Decimal128(_, s) => (
            i256::from_i128(a.as_primitive::<t::Decimal128Type>().value(i)),
            *s,
        ),
        other => return exec_err!("avg of a decimal got {other}"),
    };
    rescale(
        m,
        s.max(0) as u32,
        ANY_NUMERIC_SCALE as u32,
        ANY_NUMERIC_PRECISION,
    )
    .map(Some)
}

impl AggregateUDFImpl for NumericAvg {
    fn name(&self) -> &str {
        "avg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(ANY_NUMERIC)
    }
    fn return_field(&self, _: &[FieldRef]) -> Result<FieldRef> {
        Ok(own_scale_field(self.name(), ANY_NUMERIC))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(format!("{}[sum]", args.name), ANY_NUMERIC, true)),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::Int64,
                true,
            )),
            Arc::new(Field::new(
                format!("{}[scale]", args.name),
                DataType::Int64,
                true,
            )),
        ])
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(NumericAvgAcc {
            sum: i256::ZERO,
            count: 0,
            scale: self.scale,
            quotient: self.quotient,
            dscale: 0,
        }))
    }
}

#[derive(Debug)]
struct NumericAvgAcc {
    /// At [`ANY_NUMERIC_SCALE`].
    sum: i256,
    count: i64,
    /// See [`NumericAvg`].
    scale: Option<u32>,
    quotient: bool,
    /// With `quotient`: the largest division scale of the quotients summed.
    dscale: u32,
}

impl NumericAvgAcc {
    /// Row `i`'s `a / b` at [`ANY_NUMERIC_SCALE`], rounded at PostgreSQL's division
    /// scale for it, which may raise the sum's scale.
    fn quotient(&mut self, a: &ArrayRef, b: &ArrayRef, i: usize) -> Result<Option<i256>> {
        let (Some((m1, s1)), Some((m2, s2))) = (mantissa(a, i), mantissa(b, i)) else {
            return Ok(None);
        };
        let wide = ANY_NUMERIC_SCALE as u32;
        if m2 != i256::ZERO {
            self.dscale = self
                .dscale
                .max(div_scale(m1, s1, m2, s2).clamp(0, ANY_NUMERIC_SCALE as i32) as u32);
        }
        numeric_div(m1, s1, m2, s2, wide, ANY_NUMERIC_PRECISION).map(Some)
    }

    fn add(&mut self, values: &[ArrayRef], sign: i64) -> Result<()> {
        for i in 0..values[0].len() {
            let v = if self.quotient {
                self.quotient(&values[0], &values[1], i)?
            } else {
                at_wide_scale(&values[0], i)?
            };
            let Some(v) = v else {
                continue;
            };
            let v = if sign < 0 { v.wrapping_neg() } else { v };
            self.sum = self
                .sum
                .checked_add(v)
                .ok_or_else(|| overflow("an avg() sum has more than 38 integer digits"))?;
            self.count += sign;
        }
        Ok(())
    }
}

impl Accumulator for NumericAvgAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, 1)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values, -1)
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let wide = ANY_NUMERIC_SCALE as u32;
        let value = if self.count == 0 {
            None
        } else {
            // The sum at the input's scale (PostgreSQL's dscale of the sum).
            let (m, s) = match self.scale {
                // Exact: every quotient was rounded at no more than `dscale` digits.
                None if self.quotient => (
                    self.sum
                        .wrapping_div(pow10(wide - self.dscale.min(wide)).unwrap_or(i256::ONE)),
                    self.dscale.min(wide),
                ),
                None => trimmed(self.sum, wide),
                Some(s) => (
                    self.sum.wrapping_div(pow10(wide - s).unwrap_or(i256::ONE)),
                    s,
                ),
            };
            Some(numeric_div(
                m,
                s,
                i256::from_i128(i128::from(self.count)),
                0,
                wide,
                ANY_NUMERIC_PRECISION,
            )?)
        };
        Ok(ScalarValue::Decimal256(
            value,
            ANY_NUMERIC_PRECISION,
            ANY_NUMERIC_SCALE,
        ))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Decimal256(Some(self.sum), ANY_NUMERIC_PRECISION, ANY_NUMERIC_SCALE),
            ScalarValue::Int64(Some(self.count)),
            ScalarValue::Int64(Some(i64::from(self.dscale))),
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let sums = states[0].as_primitive::<arrow::datatypes::Decimal256Type>();
        let counts = states[1].as_primitive::<arrow::datatypes::Int64Type>();
        let scales = states[2].as_primitive::<arrow::datatypes::Int64Type>();
        for i in 0..sums.len() {
            if scales.is_valid(i) {
                self.dscale = self
                    .dscale
                    .max(scales.value(i).clamp(0, i64::from(ANY_NUMERIC_SCALE)) as u32);
            }
            if sums.is_valid(i) && counts.is_valid(i) {
                self.sum = self
                    .sum
                    .checked_add(sums.value(i))
                    .ok_or_else(|| overflow("an avg() sum has more than 38 integer digits"))?;
                self.count += counts.value(i);
            }
        }
        Ok(())
    }
}

/// `float8::numeric` (and float4) as PostgreSQL converts: the float's shortest
/// text of 15 (float4: 6) significant digits, then rounded to the target scale.
/// The second argument is a typed NULL naming the target decimal type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FloatNumeric {
    signature: Signature,
}

impl Default for FloatNumeric {
    fn default() -> Self {
        FloatNumeric {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for FloatNumeric {
    fn name(&self) -> &str {
        "pg_float_numeric"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[1].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let t = args.return_field.data_type().clone();
        let out = crate::numeric_text::float_to_decimal(&a, &t)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        super::columnar(out, scalar)
    }
}

/// `numeric::float8` / `numeric::float4` as PostgreSQL computes it: the nearest
/// float to the exact decimal (Arrow's cast divides by a power of ten in floating
/// point, which can miss it by one unit in the last place: 417.25000000000006 for
/// 417.25). Exact operands divide exactly-rounded; others go through the decimal
/// text, which Rust parses correctly rounded. The second argument is a typed NULL
/// naming the float type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericFloat {
    signature: Signature,
}

impl Default for NumericFloat {
    fn default() -> Self {
        NumericFloat {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

/// The nearest f64 to `m / 10^scale`.
fn decimal_to_f64(m: i128, scale: i8, text: impl FnOnce() -> String) -> f64 {
    const EXACT: i128 = 1 << 53;
    if (0..=22).contains(&scale) && m.abs() <= EXACT {
        // Both operands are exact doubles: one correctly rounded division.
        return m as f64 / 10f64.powi(scale as i32);
    }
    text().parse::<f64>().unwrap_or(f64::NAN)
}

impl ScalarUDFImpl for NumericFloat {
    fn name(&self) -> &str {
        "pg_numeric_float"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[1].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::array::{Decimal128Array, Decimal256Array, Float64Array};
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let out: Float64Array = match a.data_type() {
            DataType::Decimal128(_, s) => {
                let d = a
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .ok_or_else(|| {
                        DataFusionError::Internal("pg_numeric_float: decimal128".into())
                    })?;
                (0..d.len())
                    .map(|i| {
                        d.is_valid(i)
                            .then(|| decimal_to_f64(d.value(i), *s, || d.value_as_string(i)))
                    })
                    .collect()
            }
            DataType::Decimal256(_, s) => {
                let d = a
                    .as_any()
                    .downcast_ref::<Decimal256Array>()
                    .ok_or_else(|| {
                        DataFusionError::Internal("pg_numeric_float: decimal256".into())
                    })?;
                (0..d.len())
                    .map(|i| {
                        d.is_valid(i).then(|| match d.value(i).to_i128() {
                            Some(m) => decimal_to_f64(m, *s, || d.value_as_string(i)),
                            None => d.value_as_string(i).parse::<f64>().unwrap_or(f64::NAN),
                        })
                    })
                    .collect()
            }
            _ => {
                return Err(DataFusionError::Internal(
                    "pg_numeric_float takes a decimal".into(),
                ));
            }
        };
        let out: ArrayRef = Arc::new(out);
        let t = args.return_field.data_type().clone();
        let out = if t == DataType::Float64 {
            out
        } else {
            arrow::compute::cast(&out, &t)?
        };
        super::columnar(out, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_to_float_is_correctly_rounded() {
        // 417.25 = 41725000000000000000 / 10^17 (a scale as numeric division gives).
        assert_eq!(decimal_to_f64(41725, 2, || "417.25".into()), 417.25);
        let big = 41_725_000_000_000_000_000i128;
        assert_eq!(
            decimal_to_f64(big, 17, || "417.25000000000000000".into()),
            417.25
        );
        assert_eq!(decimal_to_f64(-462625, 2, || "-4626.25".into()), -4626.25);
    }

    fn text(m: i256, scale: i8) -> String {
        use arrow::datatypes::DecimalType;
        let t = arrow::datatypes::Decimal256Type::format_decimal(m, 76, scale);
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t
        }
    }

    fn m(v: i128) -> i256 {
        i256::from_i128(v)
    }

    #[test]
    fn numeric_division_keeps_postgresql_digits() {
        // PostgreSQL: 22686379 / 144 = 157544.298611111111; 16 / 144 = 0.11111111111111111111
        let q = numeric_div(m(22_686_379), 0, m(144), 0, 20, 38).unwrap();
        assert_eq!(text(q, 20), "157544.298611111111");
        let q = numeric_div(m(16), 0, m(144), 0, 20, 38).unwrap();
        assert_eq!(text(q, 20), "0.11111111111111111111");
        // 2 / 3 rounds half away from zero in the last digit; negative too.
        let q = numeric_div(m(-2), 0, m(3), 0, 20, 38).unwrap();
        assert_eq!(text(q, 20), "-0.66666666666666666667");
        assert!(numeric_div(m(1), 0, m(0), 0, 20, 38).is_err());
        // The same at the wide type's scale: PostgreSQL's digits, not 38 of them.
        let q = numeric_div(m(16), 0, m(144), 0, 38, 76).unwrap();
        assert_eq!(text(q, 38), "0.11111111111111111111");
        // 12345.678901234567890 / 3 = 4115.2263004115226300 (PostgreSQL 15).
        let q = numeric_div(m(1_234_567_890_123_456_789), 14, m(3), 0, 38, 76).unwrap();
        assert_eq!(text(q, 38), "4115.22630041152263");
    }

    #[test]
    fn products_round_at_38_digits_and_fail_past_76() {
        // 1.5 * 1.5 = 2.25 at scale 38.
        let q = rescale(m(225), 2, 38, 76).unwrap();
        assert_eq!(text(q, 38), "2.25");
        // 0.1^20 * 0.1^20 = 1e-40 rounds to 0 at 38 digits; 5e-39 rounds away.
        assert_eq!(rescale(m(1), 40, 38, 76).unwrap(), i256::ZERO);
        assert_eq!(rescale(m(5), 39, 38, 76).unwrap(), m(1));
        assert_eq!(rescale(m(-5), 39, 38, 76).unwrap(), m(-1));
        // 10^38 at scale 38 has 39 integer digits: too many.
        let big = pow10(38).unwrap();
        assert!(rescale(big, 0, 38, 76).is_err());
    }

    #[test]
    fn own_scale_drops_trailing_zeros() {
        assert_eq!(trimmed(m(12_500), 4), (m(125), 2));
        assert_eq!(trimmed(m(0), 38), (m(0), 0));
        assert_eq!(trimmed(m(-10), 1), (m(-1), 0));
        assert_eq!(digits(pow10(70).unwrap()), 71);
        assert_eq!(digits(m(-999)), 3);
    }
}

/// `scale`, `min_scale` and `trim_scale` of a numeric (integers are taken as numerics
/// of scale 0).
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum ScaleFn {
    /// The display scale: known for `numeric(p, s)` and literals; a numeric without
    /// typmod does not keep its values' display scales here (0A000).
    Scale,
    /// The fewest fraction digits that represent the value exactly.
    MinScale,
    /// The value without trailing fractional zeros.
    TrimScale,
}

/// A [`ScaleFn`] as a scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericScale {
    signature: Signature,
    kind: ScaleFn,
}

impl NumericScale {
    pub fn new(kind: ScaleFn) -> Self {
        NumericScale {
            signature: Signature::any(1, Volatility::Immutable),
            kind,
        }
    }
}

impl ScalarUDFImpl for NumericScale {
    fn name(&self) -> &str {
        match self.kind {
            ScaleFn::Scale => "scale",
            ScaleFn::MinScale => "min_scale",
            ScaleFn::TrimScale => "trim_scale",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let t = &args[0];
        let exact = t.is_integer()
            || t.is_null()
            || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..));
        if !exact {
            return Err(sql_error(
                "42883",
                &format!(
                    "function {}({t}) does not exist. Hint: it takes a numeric",
                    self.name()
                ),
            ));
        }
        if self.kind == ScaleFn::Scale && is_any_numeric(t) {
            return Err(sql_error(
                "0A000",
                "scale() of a numeric without typmod is not supported: Sundial does not keep each value's display scale (min_scale() gives the digits the value needs)",
            ));
        }
        Ok(match self.kind {
            ScaleFn::TrimScale => ANY_NUMERIC,
            _ => DataType::Int32,
        })
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<FieldRef> {
        let t = self.return_type(&arg_types(&args))?;
        Ok(if self.kind == ScaleFn::TrimScale {
            own_scale_field(self.name(), t)
        } else {
            Arc::new(Field::new(self.name(), t, true))
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let a = &arrays[0];
        let declared = decimal_scale(a.data_type()).max(0) as u32;
        let out: ArrayRef = match self.kind {
            ScaleFn::TrimScale => {
                let mut values = Vec::with_capacity(n);
                for i in 0..n {
                    values.push(match mantissa(a, i) {
                        Some((m, s)) => Some(rescale(
                            m,
                            s,
                            ANY_NUMERIC_SCALE as u32,
                            ANY_NUMERIC_PRECISION,
                        )?),
                        None => None,
                    });
                }
                decimal_array(values, &ANY_NUMERIC)?
            }
            ScaleFn::MinScale | ScaleFn::Scale => {
                let values: Vec<Option<i32>> = (0..n)
                    .map(|i| {
                        mantissa(a, i).map(|(m, s)| {
                            if self.kind == ScaleFn::Scale {
                                declared as i32
                            } else {
                                trimmed(m, s).1 as i32
                            }
                        })
                    })
                    .collect();
                Arc::new(arrow::array::Int32Array::from(values))
            }
        };
        super::columnar(out, scalar)
    }
}

/// DataFusion's `round` with a narrower type for a numeric without typmod: its 38
/// integer digits (and one of carry) instead of 76 minus the scale. `round(x, 1) -
/// 0.25` asked DataFusion for 75 integer digits and 2 fraction digits, more than its
/// 76, and failed to plan ("Cannot coerce Decimal256(76, 1) - Decimal128(2, 2)").
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgRound {
    inner: datafusion::logical_expr::ScalarUDF,
}

impl PgRound {
    pub fn new(inner: datafusion::logical_expr::ScalarUDF) -> PgRound {
        PgRound { inner }
    }

    /// The narrower type for `round`'s `out` given its argument `input`: the
    /// input's integer digits and one of carry, not all that 76 leaves.
    fn narrow(input: &DataType, out: &DataType) -> DataType {
        match (input, out) {
            (DataType::Decimal256(p, s), DataType::Decimal256(_, out_s))
                if *s >= 0 && *out_s >= 0 && s <= &(*p as i8) =>
            {
                let int_digits = *p - *s as u8 + 1;
                DataType::Decimal256(
                    (int_digits + *out_s as u8).min(ANY_NUMERIC_PRECISION),
                    *out_s,
                )
            }
            _ => out.clone(),
        }
    }
}

impl ScalarUDFImpl for PgRound {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<FieldRef> {
        let input = args.arg_fields.first().cloned();
        let f = self.inner.return_field_from_args(args)?;
        let Some(input) = input else {
            return Ok(f);
        };
        let t = Self::narrow(input.data_type(), f.data_type());
        Ok(Arc::new(f.as_ref().clone().with_data_type(t)))
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let want = args.return_field.data_type().clone();
        let wide = match want {
            DataType::Decimal256(_, s) => DataType::Decimal256(ANY_NUMERIC_PRECISION, s),
            ref other => other.clone(),
        };
        if wide == want {
            return self.inner.invoke_with_args(args);
        }
        args.return_field = Arc::new(args.return_field.as_ref().clone().with_data_type(wide));
        let out = self.inner.invoke_with_args(args)?;
        out.cast_to(&want, None)
    }
}
