//! `avg` as PostgreSQL has it: DataFusion's average for numbers and durations, plus
//! `avg(interval)` (the sum of the months, days and times over the count, divided
//! as PostgreSQL's `interval_div` does). Integer and numeric averages are replaced
//! later by [`super::pgcoerce`] with PostgreSQL's exact ones.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, IntervalUnit};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature, StatisticsArgs, Volatility,
};

use super::sql_error;

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// DataFusion's `avg` (`inner`) that also averages intervals.
#[derive(Debug)]
pub struct PgAvg {
    inner: AggregateUDF,
    signature: Signature,
}

impl PgAvg {
    /// Wraps DataFusion's `avg`.
    pub fn new(inner: AggregateUDF) -> Self {
        PgAvg {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    fn of_interval(args: &AccumulatorArgs) -> bool {
        is_interval(args.return_field.data_type())
    }
}

impl PartialEq for PgAvg {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl Eq for PgAvg {}

impl std::hash::Hash for PgAvg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl AggregateUDFImpl for PgAvg {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if let [t] = arg_types
            && is_interval(t)
        {
            return Ok(vec![INTERVAL]);
        }
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .map(|t| Arc::new(Field::new("", t.clone(), true)))
            .collect();
        let coerced = datafusion::logical_expr::type_coercion::functions::fields_with_udf(
            &fields,
            &self.inner,
        )?;
        Ok(coerced.iter().map(|f| f.data_type().clone()).collect())
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [t] if is_interval(t) => Ok(INTERVAL),
            _ => self.inner.return_type(arg_types),
        }
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if !Self::of_interval(&args) {
            return self.inner.accumulator(args);
        }
        if args.is_distinct {
            return Err(sql_error(
                "0A000",
                "avg(DISTINCT interval) is not supported",
            ));
        }
        Ok(Box::<IntervalAvg>::default())
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if !is_interval(args.return_field.data_type()) {
            return self.inner.state_fields(args);
        }
        let field = |part: &str, t: DataType| {
            Arc::new(Field::new(format!("{}[{part}]", args.name), t, true))
        };
        Ok(vec![
            field("months", DataType::Int64),
            field("days", DataType::Int64),
            field("nanos", DataType::Decimal128(38, 0)),
            field("count", DataType::Int64),
        ])
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !Self::of_interval(&args) && self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if Self::of_interval(&args) {
            return self.accumulator(args);
        }
        self.inner.inner().create_sliding_accumulator(args)
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_udf()
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.inner().value_from_stats(args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}

/// The running sums of an interval average: PostgreSQL adds months, days and times
/// separately (`interval_pl`) and divides the sum by the count at the end.
#[derive(Debug, Default)]
struct IntervalAvg {
    months: i64,
    days: i64,
    nanos: i128,
    count: i64,
}

impl IntervalAvg {
    fn add(&mut self, values: &ArrayRef, sign: i64) {
        let a = values.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
        for v in a.iter().flatten() {
            self.months += sign * i64::from(v.months);
            self.days += sign * i64::from(v.days);
            self.nanos += i128::from(sign) * i128::from(v.nanoseconds);
            self.count += sign;
        }
    }
}

impl Accumulator for IntervalAvg {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], 1);
        Ok(())
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], -1);
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let [months, days, nanos, count] = states else {
            return Err(sql_error("XX000", "avg(interval) state has four parts"));
        };
        let months = months.as_primitive::<arrow::datatypes::Int64Type>();
        let days = days.as_primitive::<arrow::datatypes::Int64Type>();
        let nanos = nanos.as_primitive::<arrow::datatypes::Decimal128Type>();
        let count = count.as_primitive::<arrow::datatypes::Int64Type>();
        for i in 0..count.len() {
            if count.is_null(i) {
                continue;
            }
            self.months += months.value(i);
            self.days += days.value(i);
            self.nanos += nanos.value(i);
            self.count += count.value(i);
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Int64(Some(self.months)),
            ScalarValue::Int64(Some(self.days)),
            ScalarValue::Decimal128(Some(self.nanos), 38, 0),
            ScalarValue::Int64(Some(self.count)),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.count == 0 {
            return Ok(ScalarValue::IntervalMonthDayNano(None));
        }
        // The sum must be an interval, as PostgreSQL's interval_pl requires.
        let out_of_range = || sql_error("22008", "interval out of range");
        let months = i32::try_from(self.months).map_err(|_| out_of_range())?;
        let days = i32::try_from(self.days).map_err(|_| out_of_range())?;
        let micros = i64::try_from(self.nanos / 1000).map_err(|_| out_of_range())?;
        let avg = super::pgfuncs::scale_parts(months, days, micros, self.count as f64, true)?;
        Ok(ScalarValue::IntervalMonthDayNano(Some(avg)))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// Registers `avg` with intervals on a connection's context.
pub fn register(ctx: &datafusion::prelude::SessionContext) {
    if let Ok(avg) = datafusion::execution::FunctionRegistry::udaf(ctx, "avg") {
        ctx.register_udaf(AggregateUDF::new_from_impl(PgAvg::new(
            avg.as_ref().clone(),
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::IntervalMonthDayNano;

    fn interval(months: i32, days: i32, nanos: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, nanos)
    }

    #[test]
    fn averages_like_interval_div() -> Result<()> {
        let mut acc = IntervalAvg::default();
        let a: ArrayRef = Arc::new(arrow::array::IntervalMonthDayNanoArray::from(vec![
            Some(interval(1, 0, 0)),
            None,
            Some(interval(0, 1, 3_600_000_000_000)),
        ]));
        acc.update_batch(&[a])?;
        // (1 mon 1 day 01:00) / 2 = 15 days 12:30:00 (half a month is 15 days).
        assert_eq!(
            acc.evaluate()?,
            ScalarValue::IntervalMonthDayNano(Some(interval(0, 15, 45_000_000_000_000)))
        );
        Ok(())
    }
}
