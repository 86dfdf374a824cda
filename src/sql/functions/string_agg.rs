//! `string_agg` without ORDER BY or DISTINCT, its string counted in the queries'
//! memory pool as it grows. DataFusion counts an accumulator only after each batch,
//! so a string doubling past the budget held the old and the new buffer at once
//! (728 MiB peak under a 512 MiB limit); here the new buffer is reserved before it
//! is allocated (53200 when the pool cannot hold it), and a value past PostgreSQL's
//! 1 GB is 54000 as there.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    Signature,
};
use datafusion::physical_expr::expressions::Literal;
use datafusion::prelude::SessionContext;

use super::sql_error;

/// PostgreSQL's `MaxAllocSize`: the longest string it builds.
const MAX_TEXT_BYTES: usize = 0x3fff_ffff;

/// DataFusion's `string_agg` with a counted accumulator for the plain case.
#[derive(Debug)]
struct StringAgg {
    inner: Arc<AggregateUDF>,
    pool: Arc<dyn MemoryPool>,
}

impl PartialEq for StringAgg {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name()
    }
}

impl Eq for StringAgg {}

impl std::hash::Hash for StringAgg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
    }
}

impl AggregateUDFImpl for StringAgg {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.inner().state_fields(args)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let delimiter = args
            .exprs
            .get(1)
            .and_then(|e| e.downcast_ref::<Literal>())
            .and_then(|l| match l.value() {
                v if v.is_null() => Some(String::new()),
                v => v.try_as_str().map(|s| s.unwrap_or("").to_string()),
            });
        match delimiter {
            Some(delimiter) if !args.is_distinct && args.order_bys.is_empty() => {
                Ok(Box::new(Counted {
                    delimiter,
                    text: String::new(),
                    has_value: false,
                    reservation: MemoryConsumer::new("string_agg").register(&self.pool),
                }))
            }
            _ => self.inner.inner().accumulator(args),
        }
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Reversed(Arc::new(AggregateUDF::new_from_impl(StringAgg {
            inner: self.inner.clone(),
            pool: self.pool.clone(),
        })))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.inner().groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.inner().create_groups_accumulator(args)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// The string so far, its buffer held in `reservation` (not in `size()`, so the
/// aggregate does not count it twice).
#[derive(Debug)]
struct Counted {
    delimiter: String,
    text: String,
    has_value: bool,
    reservation: MemoryReservation,
}

impl Counted {
    fn append<'a>(&mut self, values: impl Iterator<Item = Option<&'a str>>) -> Result<()> {
        for v in values.flatten() {
            let sep = if self.has_value {
                self.delimiter.len()
            } else {
                0
            };
            self.make_room(sep + v.len())?;
            if self.has_value {
                self.text.push_str(&self.delimiter);
            }
            self.text.push_str(v);
            self.has_value = true;
        }
        Ok(())
    }

    /// Room for `more` bytes: a larger buffer is reserved first, while the old one
    /// is still held, as both are while the string moves.
    fn make_room(&mut self, more: usize) -> Result<()> {
        let need = self.text.len().saturating_add(more);
        let old = self.text.capacity();
        if need <= old {
            return Ok(());
        }
        if need > MAX_TEXT_BYTES {
            return Err(sql_error(
                "54000",
                &format!(
                    "out of memory: cannot enlarge string buffer containing {} bytes by {more} more bytes",
                    self.text.len()
                ),
            ));
        }
        let cap = need.max(old.saturating_mul(2)).min(MAX_TEXT_BYTES);
        self.reservation.try_grow(cap)?;
        self.text.reserve_exact(cap - self.text.len());
        self.reservation.shrink(old.min(self.reservation.size()));
        Ok(())
    }

    fn value(&self) -> ScalarValue {
        ScalarValue::LargeUtf8(self.has_value.then(|| self.text.clone()))
    }
}

impl Accumulator for Counted {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(a) = values.first() else {
            return Ok(());
        };
        match a.data_type() {
            DataType::Utf8 => self.append(a.as_string::<i32>().iter()),
            DataType::LargeUtf8 => self.append(a.as_string::<i64>().iter()),
            DataType::Utf8View => self.append(a.as_string_view().iter()),
            other => Err(sql_error(
                "42883",
                &format!("function string_agg({other}, text) does not exist"),
            )),
        }
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        // the copy handed out is reserved while it is made
        let len = self.text.len();
        self.reservation.try_grow(len)?;
        let v = self.value();
        self.reservation.shrink(len);
        Ok(v)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        // the partial string moves on to the final aggregate, which counts it again
        let v = ScalarValue::LargeUtf8(self.has_value.then(|| std::mem::take(&mut self.text)));
        self.has_value = false;
        self.reservation.free();
        Ok(vec![v])
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.delimiter.capacity()
    }
}

/// Puts the counted `string_agg` in place of DataFusion's.
pub fn register(ctx: &SessionContext) {
    let pool = ctx.runtime_env().memory_pool.clone();
    if let Ok(inner) = datafusion::execution::FunctionRegistry::udaf(ctx, "string_agg") {
        ctx.register_udaf(AggregateUDF::new_from_impl(StringAgg { inner, pool }));
    }
}
