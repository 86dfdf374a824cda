//! Size checks for the functions whose result a client sizes with a number or a
//! pattern: `repeat`, `lpad`, `rpad`, `replace`, `regexp_replace`, `array_repeat`,
//! `range` and `generate_series` (the array form). Each is checked before it
//! allocates: a value over PostgreSQL's 1 GB limit is 54000 "requested length too
//! large", and a batch of results the statement's memory pool cannot hold is 53200.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, IntervalMonthDayNanoType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::execution::context::ExecutionProps;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::SessionContext;

use super::sql_error;

/// PostgreSQL's `MaxAllocSize`: the largest value it builds.
const MAX_VALUE_BYTES: i64 = 0x3fff_ffff;
/// Bytes a character may take (UTF-8), which PostgreSQL's padding check assumes.
const MAX_CHAR_BYTES: i64 = 4;
/// A row whose bound passes this is measured exactly (matches counted).
const MEASURE_ABOVE: i64 = 1 << 20;
/// Bytes an element of a built array takes at least (an int8, a timestamp).
const ELEMENT_BYTES: i64 = 8;
/// The largest result a constant call is folded into the plan as.
const FOLD_AT_MOST: i64 = 64 * 1024;

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sizing {
    /// `repeat(s, n)`: the bytes of `s` times `n`.
    Repeat,
    /// `lpad(s, n [, fill])` / `rpad`: `n` characters.
    Pad,
    /// `replace(s, from, to)`: `s` with each `from` grown to `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement [, flags])`.
    RegexpReplace,
    /// `array_repeat(element, n)`: `n` elements.
    ArrayRepeat,
    /// `range(start, stop [, step])` / `generate_series`: one element per step.
    Series,
}

/// A built-in function that checks the size of what it is asked to build.
#[derive(Debug)]
struct Guarded {
    inner: Arc<ScalarUDF>,
    sizing: Sizing,
    /// The statement's memory pool (the engine's query pool).
    pool: Arc<dyn MemoryPool>,
    /// The inner function's, marked volatile: DataFusion does not fold a call over
    /// constants into the plan, where a million-element series or a 100 MB `repeat`
    /// would be held outside the pool and printed whole by EXPLAIN (once per
    /// optimizer pass with VERBOSE: 1 GB of text for `generate_series(1, 1000000)`).
    /// [`ScalarUDFImpl::simplify`] folds the small ones; the rest run when the
    /// statement does, checked against the pool.
    signature: Signature,
}

impl PartialEq for Guarded {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name() && self.sizing == other.sizing
    }
}

impl Eq for Guarded {}

impl std::hash::Hash for Guarded {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.sizing.hash(state);
    }
}

/// Argument `i` as an array of `rows` values cast to `ty` (None when absent).
fn arg(args: &ScalarFunctionArgs, i: usize, ty: &DataType) -> Result<Option<ArrayRef>> {
    match args.args.get(i) {
        Some(a) => Ok(Some(arrow::compute::cast(
            &a.to_array(args.number_rows)?,
            ty,
        )?)),
        None => Ok(None),
    }
}

/// Byte lengths of a string argument (as int8).
fn lengths(args: &ScalarFunctionArgs, i: usize) -> Result<Option<ArrayRef>> {
    match args.args.get(i) {
        Some(a) => {
            let lens = arrow::compute::kernels::length::length(&a.to_array(args.number_rows)?)?;
            Ok(Some(arrow::compute::cast(&lens, &DataType::Int64)?))
        }
        None => Ok(None),
    }
}

/// Value `row` of an int8 array; None for NULL or a missing argument.
fn int(a: &Option<ArrayRef>, row: usize) -> Option<i64> {
    let a = a.as_ref()?.as_primitive_opt::<Int64Type>()?;
    (row < a.len() && a.is_valid(row)).then(|| a.value(row))
}

/// Value `row` of a string (Utf8View) array.
fn text(a: &Option<ArrayRef>, row: usize) -> Option<&str> {
    let a = a.as_ref()?.as_string_view_opt()?;
    (row < a.len() && a.is_valid(row)).then(|| a.value(row))
}

impl Guarded {
    /// The bytes each row's result takes (an upper bound; None for a NULL result),
    /// erroring when one passes [`MAX_VALUE_BYTES`].
    fn row_bytes(&self, args: &ScalarFunctionArgs) -> Result<Vec<Option<i64>>> {
        let rows = args.number_rows;
        let mut out = Vec::with_capacity(rows);
        match self.sizing {
            Sizing::Repeat => {
                let (lens, counts) = (lengths(args, 0)?, arg(args, 1, &DataType::Int64)?);
                for r in 0..rows {
                    out.push(
                        int(&lens, r)
                            .zip(int(&counts, r))
                            .map(|(l, n)| l.saturating_mul(n.max(0))),
                    );
                }
            }
            Sizing::Pad => {
                let counts = arg(args, 1, &DataType::Int64)?;
                for r in 0..rows {
                    let n = int(&counts, r);
                    // PostgreSQL refuses a padded length of over 1 GB / 4 characters.
                    if n.is_some_and(|n| n.saturating_mul(MAX_CHAR_BYTES) > MAX_VALUE_BYTES) {
                        return Err(too_large());
                    }
                    out.push(n.map(|n| n.max(0)));
                }
            }
            Sizing::Replace => {
                let [s, from, to] = [0, 1, 2].map(|i| lengths(args, i));
                let (s, from, to) = (s?, from?, to?);
                let mut texts = None;
                for r in 0..rows {
                    let (Some(l), Some(f), Some(t)) = (int(&s, r), int(&from, r), int(&to, r))
                    else {
                        out.push(None);
                        continue;
                    };
                    let mut bytes = match f {
                        // An empty `from` leaves the text as it is.
                        0 => l,
                        _ if t <= f => l,
                        _ => l.saturating_add((l / f).saturating_mul(t - f)),
                    };
                    if bytes > MEASURE_ABOVE.max(l) {
                        let texts = match &mut texts {
                            Some(t) => t,
                            None => texts.insert([
                                arg(args, 0, &DataType::Utf8View)?,
                                arg(args, 1, &DataType::Utf8View)?,
                            ]),
                        };
                        if let (Some(hay), Some(needle)) = (text(&texts[0], r), text(&texts[1], r))
                        {
                            let n = hay.matches(needle).count() as i64;
                            bytes = l.saturating_add(n.saturating_mul(t - f));
                        }
                    }
                    out.push(Some(bytes));
                }
            }
            Sizing::RegexpReplace => {
                let (s, repl) = (lengths(args, 0)?, lengths(args, 2)?);
                let flags = arg(args, 3, &DataType::Utf8View)?;
                let replacements = arg(args, 2, &DataType::Utf8View)?;
                // The texts and patterns are cast only when a row must be measured.
                let mut texts = None;
                for r in 0..rows {
                    let (Some(l), Some(t)) = (int(&s, r), int(&repl, r)) else {
                        out.push(None);
                        continue;
                    };
                    let global = text(&flags, r).is_some_and(|f| f.contains('g'));
                    // A back-reference (`\1`, `\&`) inserts at most the whole text.
                    let refs = text(&replacements, r).map_or(0, |x| x.matches('\\').count()) as i64;
                    let per_match = t.saturating_add(refs.saturating_mul(l));
                    let mut matches = if global { l + 1 } else { 1 };
                    if global
                        && l.saturating_add(matches.saturating_mul(per_match))
                            > MEASURE_ABOVE.max(l)
                    {
                        let texts = match &mut texts {
                            Some(t) => t,
                            None => texts.insert([
                                arg(args, 0, &DataType::Utf8View)?,
                                arg(args, 1, &DataType::Utf8View)?,
                            ]),
                        };
                        if let (Some(hay), Some(pattern)) = (text(&texts[0], r), text(&texts[1], r))
                            && let Ok(re) = regex::RegexBuilder::new(pattern)
                                .case_insensitive(text(&flags, r).is_some_and(|f| f.contains('i')))
                                .size_limit(1 << 20)
                                .build()
                        {
                            matches = re.find_iter(hay).count() as i64;
                        }
                    }
                    out.push(Some(l.saturating_add(matches.saturating_mul(per_match))));
                }
            }
            Sizing::ArrayRepeat => {
                let counts = arg(args, 1, &DataType::Int64)?;
                let element = match args.args.first() {
                    Some(a) => {
                        let a = a.to_array(rows)?;
                        (a.get_array_memory_size() / rows.max(1)) as i64
                    }
                    None => 0,
                }
                .max(ELEMENT_BYTES);
                for r in 0..rows {
                    out.push(int(&counts, r).map(|n| n.max(0).saturating_mul(element)));
                }
            }
            Sizing::Series => {
                // `range(n)` / `generate_series(n)`: from 0 to n
                let (start, stop) = match args.args.len() {
                    1 => (vec![Some(0); rows], series_arg(args, 0)?),
                    _ => (series_arg(args, 0)?, series_arg(args, 1)?),
                };
                let step = step(args)?;
                for r in 0..rows {
                    let (Some(a), Some(b)) = (
                        start.get(r).copied().flatten(),
                        stop.get(r).copied().flatten(),
                    ) else {
                        out.push(None);
                        continue;
                    };
                    let step = step
                        .as_ref()
                        .map_or(Some(1), |s| s.get(r).copied().flatten());
                    let n = match step {
                        Some(s) if s != 0 => (b as i128 - a as i128) / s as i128 + 1,
                        _ => 0,
                    };
                    let n = n.clamp(0, i64::MAX as i128) as i64;
                    out.push(Some(n.saturating_mul(ELEMENT_BYTES)));
                }
            }
        }
        if out.iter().flatten().any(|&b| b > MAX_VALUE_BYTES) {
            return Err(too_large());
        }
        Ok(out)
    }

    /// Errors unless every row fits PostgreSQL's value limit and the whole batch
    /// fits what the statement's memory pool has left (checked by reserving it).
    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        if args.number_rows == 0 {
            return Ok(());
        }
        // A constant call is one value however many rows it is repeated for.
        let constant = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = match constant {
            true => std::borrow::Cow::Owned(ScalarFunctionArgs {
                number_rows: 1,
                ..args.clone()
            }),
            false => std::borrow::Cow::Borrowed(args),
        };
        let total = self
            .row_bytes(&rows)?
            .into_iter()
            .flatten()
            .fold(0i64, i64::saturating_add);
        if total < MEASURE_ABOVE {
            return Ok(());
        }
        let reservation = MemoryConsumer::new(self.inner.name()).register(&self.pool);
        reservation.try_grow(total as usize).map_err(|_| {
            sql_error(
                "53200",
                &format!(
                    "out of memory: {}() would build {total} bytes for {} rows, more than the \
                     statement's memory budget has left",
                    self.inner.name(),
                    rows.number_rows
                ),
            )
        })
    }
}

fn too_large() -> datafusion::error::DataFusionError {
    sql_error("54000", "requested length too large")
}

/// A series bound as int8: integers as they are, dates and timestamps in
/// nanoseconds.
fn series_arg(args: &ScalarFunctionArgs, i: usize) -> Result<Vec<Option<i64>>> {
    let Some(a) = args.args.get(i) else {
        return Ok(vec![]);
    };
    let a = a.to_array(args.number_rows)?;
    let a = match a.data_type() {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
            let ts = arrow::compute::cast(&a, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
            arrow::compute::cast(&ts, &DataType::Int64)?
        }
        _ => arrow::compute::cast(&a, &DataType::Int64)?,
    };
    let a = a.as_primitive::<Int64Type>();
    Ok(a.iter().collect())
}

/// The series step in the bounds' unit (an interval in nanoseconds, a month as 28
/// days so that the count is an upper bound); None when there is no third argument.
fn step(args: &ScalarFunctionArgs) -> Result<Option<Vec<Option<i64>>>> {
    let Some(a) = args.args.get(2) else {
        return Ok(None);
    };
    let a = a.to_array(args.number_rows)?;
    if let DataType::Interval(_) = a.data_type() {
        const DAY: i64 = 86_400_000_000_000;
        let iv = arrow::compute::cast(
            &a,
            &DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
        )?;
        let iv = iv.as_primitive::<IntervalMonthDayNanoType>();
        return Ok(Some(
            iv.iter()
                .map(|v| {
                    v.map(|v| {
                        (v.months as i64 * 28 * DAY)
                            .saturating_add(v.days as i64 * DAY)
                            .saturating_add(v.nanoseconds)
                    })
                })
                .collect(),
        ));
    }
    let a = arrow::compute::cast(&a, &DataType::Int64)?;
    Ok(Some(a.as_primitive::<Int64Type>().iter().collect()))
}

impl ScalarUDFImpl for Guarded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args)?;
        self.inner.invoke_with_args(args)
    }

    /// A call over constants whose result is small is folded here, as an immutable
    /// function's would be (a filter against the literal still reaches the scan and
    /// the plan cache); a larger one stays a call.
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let values: Option<Vec<ScalarValue>> = args
            .iter()
            .map(|a| match a {
                Expr::Literal(v, _) => Some(v.clone()),
                _ => None,
            })
            .collect();
        let Some(values) = values else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        let probe = ScalarFunctionArgs {
            arg_fields: values
                .iter()
                .map(|v| Arc::new(Field::new("arg", v.data_type(), true)))
                .collect(),
            args: values.into_iter().map(ColumnarValue::Scalar).collect(),
            number_rows: 1,
            return_field: Arc::new(Field::new("result", DataType::Null, true)),
            config_options: info.config_options().clone(),
        };
        let small = self
            .row_bytes(&probe)
            .is_ok_and(|rows| rows.into_iter().flatten().sum::<i64>() <= FOLD_AT_MOST);
        if !small {
            return Ok(ExprSimplifyResult::Original(args));
        }
        let call = Expr::ScalarFunction(ScalarFunction::new_udf(self.inner.clone(), args.clone()));
        Ok(match super::const_value(&call, &ExecutionProps::new()) {
            Ok(v) => ExprSimplifyResult::Simplified(Expr::Literal(v, None)),
            Err(_) => ExprSimplifyResult::Original(args),
        })
    }
}

/// Puts the checked versions in place of DataFusion's functions.
pub fn register(ctx: &SessionContext) {
    let pool = ctx.runtime_env().memory_pool.clone();
    for (name, sizing) in [
        ("repeat", Sizing::Repeat),
        ("lpad", Sizing::Pad),
        ("rpad", Sizing::Pad),
        ("replace", Sizing::Replace),
        ("regexp_replace", Sizing::RegexpReplace),
        ("array_repeat", Sizing::ArrayRepeat),
        ("range", Sizing::Series),
        ("generate_series", Sizing::Series),
    ] {
        if let Ok(inner) = datafusion::execution::FunctionRegistry::udf(ctx, name) {
            let mut signature = inner.signature().clone();
            signature.volatility = Volatility::Volatile;
            ctx.register_udf(ScalarUDF::new_from_impl(Guarded {
                inner,
                sizing,
                pool: pool.clone(),
                signature,
            }));
        }
    }
}
