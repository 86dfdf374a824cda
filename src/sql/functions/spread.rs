//! `variance` / `var_samp` / `var_pop` / `stddev` / `stddev_samp` / `stddev_pop` of
//! integers and numerics as PostgreSQL computes them (`numeric_stddev_internal`):
//! exact sums, the quotient at PostgreSQL's division scale, the square root rounded
//! to that scale, and a `numeric` result. Floats in a plain aggregate use PostgreSQL's
//! float8 algorithm (Youngs–Cramer, `float8_accum`), so the last digits agree too.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, i256};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use num_bigint::BigInt;
use num_traits::{Signed, Zero};

use crate::catalog::{ANY_NUMERIC, ANY_NUMERIC_PRECISION, ANY_NUMERIC_SCALE, is_any_numeric};

use super::numeric::{select_div_scale, weight_position};
use super::sql_error;

/// Which of the six aggregates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Spread {
    VarSamp,
    VarPop,
    StddevSamp,
    StddevPop,
}

impl Spread {
    /// The aggregate DataFusion resolved a call to, by its name or alias.
    pub fn of_name(name: &str) -> Option<Self> {
        Some(match name {
            "var" | "var_samp" | "var_sample" | "variance" => Spread::VarSamp,
            "var_pop" | "var_population" => Spread::VarPop,
            "stddev" | "stddev_samp" => Spread::StddevSamp,
            "stddev_pop" => Spread::StddevPop,
            _ => return None,
        })
    }

    fn sample(self) -> bool {
        matches!(self, Spread::VarSamp | Spread::StddevSamp)
    }

    fn root(self) -> bool {
        matches!(self, Spread::StddevSamp | Spread::StddevPop)
    }

    fn name(self) -> &'static str {
        match self {
            Spread::VarSamp => "var_samp",
            Spread::VarPop => "var_pop",
            Spread::StddevSamp => "stddev_samp",
            Spread::StddevPop => "stddev_pop",
        }
    }
}

/// One of the aggregates over integers or a decimal, returning a numeric.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericSpread {
    signature: Signature,
    kind: Spread,
    /// Fraction digits of the input; `None` for a numeric without typmod, whose
    /// values carry their own (kept at [`ANY_NUMERIC_SCALE`]).
    scale: Option<u32>,
}

impl NumericSpread {
    /// `kind` over a column of type `t`, when PostgreSQL's answer is a numeric.
    pub fn of(kind: Spread, t: &DataType) -> Option<Self> {
        let scale = match t {
            t if t.is_integer() => Some(0),
            t if is_any_numeric(t) => None,
            DataType::Decimal128(_, s) | DataType::Decimal256(_, s)
                if (0..=ANY_NUMERIC_SCALE).contains(s) =>
            {
                Some(*s as u32)
            }
            _ => return None,
        };
        Some(NumericSpread {
            signature: Signature::any(1, Volatility::Immutable),
            kind,
            scale,
        })
    }
}

impl AggregateUDFImpl for NumericSpread {
    fn name(&self) -> &str {
        self.kind.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(ANY_NUMERIC)
    }
    fn return_field(&self, _: &[FieldRef]) -> Result<FieldRef> {
        Ok(super::numeric::own_scale_field(self.name(), ANY_NUMERIC))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let f = |part: &str, t: DataType| {
            Arc::new(Field::new(format!("{}[{part}]", args.name), t, true))
        };
        Ok(vec![
            f("count", DataType::Int64),
            f("scale", DataType::Int64),
            f("sum", DataType::Binary),
            f("sum2", DataType::Binary),
        ])
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SpreadAcc {
            kind: self.kind,
            work: self.scale.unwrap_or(ANY_NUMERIC_SCALE as u32),
            dscale: self.scale.unwrap_or(0),
            own: self.scale.is_none(),
            n: 0,
            sum: BigInt::zero(),
            sum2: BigInt::zero(),
        }))
    }
}

/// One of the aggregates over floats in a plain (non-window) aggregate, summed as
/// PostgreSQL's `float8_accum` / `float8_combine` sum (DataFusion's Welford updates
/// differ in the last digits).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FloatSpread {
    signature: Signature,
    kind: Spread,
}

impl FloatSpread {
    /// `kind` over a float column.
    pub fn of(kind: Spread, t: &DataType) -> Option<Self> {
        matches!(t, DataType::Float32 | DataType::Float64).then(|| FloatSpread {
            signature: Signature::exact(vec![DataType::Float64], Volatility::Immutable),
            kind,
        })
    }
}

impl AggregateUDFImpl for FloatSpread {
    fn name(&self) -> &str {
        self.kind.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let f = |part: &str| {
            Arc::new(Field::new(
                format!("{}[{part}]", args.name),
                DataType::Float64,
                true,
            ))
        };
        Ok(vec![f("n"), f("sx"), f("sxx")])
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(FloatAcc {
            kind: self.kind,
            n: 0.0,
            sx: 0.0,
            sxx: 0.0,
        }))
    }
}

#[derive(Debug)]
struct FloatAcc {
    kind: Spread,
    n: f64,
    sx: f64,
    sxx: f64,
}

impl FloatAcc {
    /// `float8_accum`: one value.
    fn push(&mut self, v: f64) -> Result<()> {
        let before = self.n;
        self.n += 1.0;
        let sx_before = self.sx;
        self.sx += v;
        if before > 0.0 {
            let tmp = v * self.n - self.sx;
            self.sxx += tmp * tmp / (self.n * before);
            if self.sx.is_infinite() || self.sxx.is_infinite() {
                if !sx_before.is_infinite() && !v.is_infinite() {
                    return Err(sql_error("22003", "value out of range: overflow"));
                }
                self.sxx = f64::NAN;
            }
        } else if v.is_nan() || v.is_infinite() {
            self.sxx = f64::NAN;
        }
        Ok(())
    }

    /// `float8_combine`: another partial state.
    fn combine(&mut self, n: f64, sx: f64, sxx: f64) -> Result<()> {
        if n == 0.0 {
            return Ok(());
        }
        if self.n == 0.0 {
            (self.n, self.sx, self.sxx) = (n, sx, sxx);
            return Ok(());
        }
        let total = self.n + n;
        let tmp = self.sx / self.n - sx / n;
        let sum = self.sx + sx;
        if sum.is_infinite() && !self.sx.is_infinite() && !sx.is_infinite() {
            return Err(sql_error("22003", "value out of range: overflow"));
        }
        self.sxx = self.sxx + sxx + self.n * n * tmp * tmp / total;
        self.sx = sum;
        self.n = total;
        Ok(())
    }
}

impl Accumulator for FloatAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = values[0].as_primitive::<arrow::datatypes::Float64Type>();
        for v in a.iter().flatten() {
            self.push(v)?;
        }
        Ok(())
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let den = if self.kind.sample() {
            self.n - 1.0
        } else {
            self.n
        };
        if self.n == 0.0 || den <= 0.0 {
            return Ok(ScalarValue::Float64(None));
        }
        let var = self.sxx / den;
        Ok(ScalarValue::Float64(Some(if self.kind.root() {
            var.sqrt()
        } else {
            var
        })))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Float64(Some(self.n)),
            ScalarValue::Float64(Some(self.sx)),
            ScalarValue::Float64(Some(self.sxx)),
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let col = |k: usize| states[k].as_primitive::<arrow::datatypes::Float64Type>();
        let (n, sx, sxx) = (col(0), col(1), col(2));
        for i in 0..n.len() {
            if n.is_valid(i) {
                self.combine(n.value(i), sx.value(i), sxx.value(i))?;
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
struct SpreadAcc {
    kind: Spread,
    /// Fraction digits of `sum` (`sum2` has twice as many).
    work: u32,
    /// PostgreSQL's display scale of the sum: the most fraction digits of any input.
    dscale: u32,
    /// Inputs carry their own scale (numeric without typmod).
    own: bool,
    n: i64,
    sum: BigInt,
    sum2: BigInt,
}

fn ten_pow(n: u32) -> BigInt {
    BigInt::from(10u8).pow(n)
}

fn big(m: i256) -> BigInt {
    BigInt::from_signed_bytes_le(&m.to_le_bytes())
}

/// Row `i` as a mantissa and its scale (integers: 0).
fn value(a: &ArrayRef, i: usize) -> Result<Option<(BigInt, u32)>> {
    use arrow::datatypes as t;
    if a.is_null(i) {
        return Ok(None);
    }
    let small = |v: i128| Ok(Some((BigInt::from(v), 0)));
    match a.data_type() {
        DataType::Decimal256(_, s) => Ok(Some((
            big(a.as_primitive::<t::Decimal256Type>().value(i)),
            (*s).max(0) as u32,
        ))),
        DataType::Decimal128(_, s) => Ok(Some((
            BigInt::from(a.as_primitive::<t::Decimal128Type>().value(i)),
            (*s).max(0) as u32,
        ))),
        DataType::Int8 => small(a.as_primitive::<t::Int8Type>().value(i).into()),
        DataType::Int16 => small(a.as_primitive::<t::Int16Type>().value(i).into()),
        DataType::Int32 => small(a.as_primitive::<t::Int32Type>().value(i).into()),
        DataType::Int64 => small(a.as_primitive::<t::Int64Type>().value(i).into()),
        DataType::UInt8 => small(a.as_primitive::<t::UInt8Type>().value(i).into()),
        DataType::UInt16 => small(a.as_primitive::<t::UInt16Type>().value(i).into()),
        DataType::UInt32 => small(a.as_primitive::<t::UInt32Type>().value(i).into()),
        DataType::UInt64 => small(a.as_primitive::<t::UInt64Type>().value(i).into()),
        other => exec_err!("variance of a numeric got {other}"),
    }
}

/// Fraction digits of `m × 10^-s` without its trailing zeros.
fn own_scale(m: &BigInt, s: u32) -> u32 {
    if m.is_zero() {
        return 0;
    }
    let text = m.abs().to_string();
    let zeros = text.len() - text.trim_end_matches('0').len();
    s.saturating_sub(zeros as u32)
}

/// PostgreSQL's weight and leading base-10000 digit of `m × 10^-s`.
fn weight_and_first(m: &BigInt, s: u32) -> (i64, BigInt) {
    let a = m.abs();
    if a.is_zero() {
        return (0, BigInt::zero());
    }
    let (w, k) = weight_position(a.to_string().len() as i64, s);
    let first = if k >= 0 {
        a / ten_pow(k as u32)
    } else {
        a * ten_pow((-k) as u32)
    };
    (w, first)
}

/// PostgreSQL's `select_div_scale` for `m1 × 10^-s1 / m2 × 10^-s2`.
fn div_scale(m1: &BigInt, s1: u32, m2: &BigInt, s2: u32) -> u32 {
    let (w1, f1) = weight_and_first(m1, s1);
    let (w2, f2) = weight_and_first(m2, s2);
    select_div_scale(w1, w2, f1 <= f2, s1, s2)
}

/// `num / den` rounded half away from zero.
fn div_round(num: &BigInt, den: &BigInt) -> BigInt {
    let q = num / den;
    let rem = num - &q * den;
    if rem.abs() * 2u8 >= den.abs() {
        if num.is_negative() != den.is_negative() {
            q - 1u8
        } else {
            q + 1u8
        }
    } else {
        q
    }
}

impl SpreadAcc {
    fn add(&mut self, values: &ArrayRef, sign: i64) -> Result<()> {
        if values.data_type().is_integer() && self.work == 0 {
            return self.add_integers(values, sign);
        }
        for i in 0..values.len() {
            let Some((m, s)) = value(values, i)? else {
                continue;
            };
            if self.own {
                self.dscale = self.dscale.max(own_scale(&m, s));
            }
            // At the working scale (inputs never have more fraction digits).
            let m = m * ten_pow(self.work.saturating_sub(s));
            let sq = &m * &m;
            if sign < 0 {
                self.sum -= m;
                self.sum2 -= sq;
            } else {
                self.sum += m;
                self.sum2 += sq;
            }
            self.n += sign;
        }
        Ok(())
    }

    /// Integers summed in machine words (`i128` sums, `i256` sums of squares: no
    /// overflow below 10^18 rows of 64-bit values) and added to the exact sums once
    /// per batch, instead of big-integer arithmetic per row.
    fn add_integers(&mut self, values: &ArrayRef, sign: i64) -> Result<()> {
        let a = arrow::compute::cast(values, &DataType::Decimal128(38, 0))?;
        let a = a.as_primitive::<arrow::datatypes::Decimal128Type>();
        let (mut sum, mut sum2, mut n) = (0i128, i256::ZERO, 0i64);
        for v in a.iter().flatten() {
            sum += v;
            let w = i256::from_i128(v);
            sum2 = sum2.wrapping_add(w.wrapping_mul(w));
            n += 1;
        }
        if sign < 0 {
            self.sum -= BigInt::from(sum);
            self.sum2 -= big(sum2);
            self.n -= n;
        } else {
            self.sum += BigInt::from(sum);
            self.sum2 += big(sum2);
            self.n += n;
        }
        Ok(())
    }

    /// The answer as a mantissa of [`ANY_NUMERIC_SCALE`], or `None` (too few rows).
    fn answer(&self) -> Result<Option<i256>> {
        let n = BigInt::from(self.n);
        if self.n <= 0 || (self.kind.sample() && self.n <= 1) {
            return Ok(None);
        }
        // sumX at the display scale d and sumX2 at 2d: exact, the inputs have no
        // more fraction digits than d.
        let d = self.dscale.min(self.work);
        let sx = &self.sum / ten_pow(self.work - d);
        let sx2 = &self.sum2 / ten_pow(2 * (self.work - d));
        let num = &n * sx2 - &sx * &sx;
        if !num.is_positive() {
            return Ok(Some(i256::ZERO));
        }
        let den = if self.kind.sample() {
            &n * (&n - 1u8)
        } else {
            &n * &n
        };
        let r = div_scale(&num, 2 * d, &den, 0);
        // num / den at scale r: num × 10^(r - 2d) / den.
        let q = if r >= 2 * d {
            div_round(&(num * ten_pow(r - 2 * d)), &den)
        } else {
            div_round(&num, &(den * ten_pow(2 * d - r)))
        };
        let q = if self.kind.root() {
            // sqrt(q × 10^-r) at scale r = sqrt(q × 10^r); one more digit, then round.
            let t = (q * ten_pow(r) * 100u8).sqrt();
            (t + 5u8) / 10u8
        } else {
            q
        };
        let wide = ANY_NUMERIC_SCALE as u32;
        let out = if r > wide {
            div_round(&q, &ten_pow(r - wide))
        } else {
            q * ten_pow(wide - r)
        };
        let too_big = || {
            sql_error(
                "22003",
                "numeric field overflow: a variance has more than 38 integer digits",
            )
        };
        if out.abs() >= ten_pow(u32::from(ANY_NUMERIC_PRECISION)) {
            return Err(too_big());
        }
        i256::from_string(&out.to_string())
            .map(Some)
            .ok_or_else(too_big)
    }
}

impl Accumulator for SpreadAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], 1)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], -1)
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Decimal256(
            self.answer()?,
            ANY_NUMERIC_PRECISION,
            ANY_NUMERIC_SCALE,
        ))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + (self.sum.bits() + self.sum2.bits()) as usize / 8
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Int64(Some(self.n)),
            ScalarValue::Int64(Some(i64::from(self.dscale))),
            ScalarValue::Binary(Some(self.sum.to_signed_bytes_le())),
            ScalarValue::Binary(Some(self.sum2.to_signed_bytes_le())),
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let n = states[0].as_primitive::<arrow::datatypes::Int64Type>();
        let d = states[1].as_primitive::<arrow::datatypes::Int64Type>();
        let sum = states[2].as_binary::<i32>();
        let sum2 = states[3].as_binary::<i32>();
        for i in 0..n.len() {
            if n.is_null(i) || sum.is_null(i) || sum2.is_null(i) {
                continue;
            }
            self.n += n.value(i);
            self.dscale = self.dscale.max(d.value(i).clamp(0, 1000) as u32);
            self.sum += BigInt::from_signed_bytes_le(sum.value(i));
            self.sum2 += BigInt::from_signed_bytes_le(sum2.value(i));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int32Array};

    fn text(m: i256) -> String {
        use arrow::datatypes::DecimalType;
        let t = arrow::datatypes::Decimal256Type::format_decimal(m, 76, ANY_NUMERIC_SCALE);
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    }

    fn run(kind: Spread, t: &DataType, a: ArrayRef) -> Option<String> {
        let f = NumericSpread::of(kind, t).unwrap();
        let mut acc = SpreadAcc {
            kind,
            work: f.scale.unwrap_or(38),
            dscale: f.scale.unwrap_or(0),
            own: f.scale.is_none(),
            n: 0,
            sum: BigInt::zero(),
            sum2: BigInt::zero(),
        };
        acc.update_batch(&[a]).unwrap();
        acc.answer().unwrap().map(text)
    }

    #[test]
    fn integers_as_postgresql() {
        // PostgreSQL 15: variance = 2.3333333333333333, stddev = 1.5275252316519467,
        // var_pop = 1.5555555555555556, stddev_pop = 1.2472191289246471.
        let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), Some(2), None, Some(4)]));
        let t = DataType::Int32;
        assert_eq!(
            run(Spread::VarSamp, &t, a.clone()).unwrap(),
            "2.3333333333333333"
        );
        assert_eq!(
            run(Spread::StddevSamp, &t, a.clone()).unwrap(),
            "1.5275252316519467"
        );
        assert_eq!(
            run(Spread::VarPop, &t, a.clone()).unwrap(),
            "1.5555555555555556"
        );
        assert_eq!(run(Spread::StddevPop, &t, a).unwrap(), "1.2472191289246471");
        let one: ArrayRef = Arc::new(Int32Array::from(vec![7]));
        assert_eq!(run(Spread::VarSamp, &t, one.clone()), None);
        assert_eq!(run(Spread::VarPop, &t, one).unwrap(), "0");
    }

    #[test]
    fn floats_sum_as_postgresql() {
        // PostgreSQL 15: variance of 1, 1, 2 as float8 is 0.3333333333333333 (Welford
        // gives 0.33333333333333337); split in two partial states the same here.
        let mut acc = FloatAcc {
            kind: Spread::VarSamp,
            n: 0.0,
            sx: 0.0,
            sxx: 0.0,
        };
        for v in [1.0, 1.0, 2.0] {
            acc.push(v).unwrap();
        }
        assert_eq!(
            acc.evaluate().unwrap(),
            ScalarValue::Float64(Some(0.3333333333333333))
        );
        let mut a = FloatAcc {
            kind: Spread::VarSamp,
            n: 0.0,
            sx: 0.0,
            sxx: 0.0,
        };
        a.push(1.0).unwrap();
        let mut b = FloatAcc {
            kind: Spread::VarSamp,
            n: 0.0,
            sx: 0.0,
            sxx: 0.0,
        };
        b.push(1.0).unwrap();
        b.push(2.0).unwrap();
        a.combine(b.n, b.sx, b.sxx).unwrap();
        assert!((a.sxx - acc.sxx).abs() < 1e-15);
        let mut big = FloatAcc {
            kind: Spread::VarPop,
            n: 0.0,
            sx: 0.0,
            sxx: 0.0,
        };
        big.push(f64::MAX).unwrap();
        assert!(big.push(f64::MAX).is_err());
    }

    #[test]
    fn decimals_keep_their_scale() {
        // numeric(10,2) 1.00, 1.00, 2.00: stddev 0.57735026918962576451,
        // variance 0.33333333333333333333 (PostgreSQL 15).
        let a: ArrayRef = Arc::new(
            Decimal128Array::from(vec![100, 100, 200])
                .with_precision_and_scale(10, 2)
                .unwrap(),
        );
        let t = DataType::Decimal128(10, 2);
        assert_eq!(
            run(Spread::StddevSamp, &t, a.clone()).unwrap(),
            "0.57735026918962576451"
        );
        assert_eq!(
            run(Spread::VarSamp, &t, a).unwrap(),
            "0.33333333333333333333"
        );
    }
}
