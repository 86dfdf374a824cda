//! PostgreSQL's limit on one value (1 GB) for the string functions whose result a
//! client sizes with a number: `repeat`, `lpad`, `rpad`. Past it the answer is 54000
//! "requested length too large", as in PostgreSQL, before anything is allocated
//! (`length(repeat('x', 1500000000))` used to take 8 GB).

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

use super::sql_error;

/// PostgreSQL's `MaxAllocSize`: the largest value it builds.
const MAX_VALUE_BYTES: i64 = 0x3fff_ffff;
/// Bytes a character may take (UTF-8), which PostgreSQL's padding check assumes.
const MAX_CHAR_BYTES: i64 = 4;

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sizing {
    /// `repeat(s, n)`: the bytes of `s` times `n`.
    Repeat,
    /// `lpad(s, n [, fill])` / `rpad`: `n` characters.
    Pad,
}

/// A built-in string function that checks the size of what it is asked to build.
#[derive(Debug)]
struct Guarded {
    inner: Arc<ScalarUDF>,
    sizing: Sizing,
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

impl Guarded {
    /// Errors when a row's result would pass [`MAX_VALUE_BYTES`].
    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        let (Some(text), Some(count)) = (args.args.first(), args.args.get(1)) else {
            return Ok(());
        };
        if args.number_rows == 0 {
            return Ok(());
        }
        let rows = args.number_rows;
        let counts = count.to_array(rows)?;
        let counts = arrow::compute::cast(&counts, &DataType::Int64)?;
        let counts = counts.as_primitive::<Int64Type>();
        let lengths = match self.sizing {
            Sizing::Repeat => {
                let lens = arrow::compute::kernels::length::length(&text.to_array(rows)?)?;
                Some(arrow::compute::cast(&lens, &DataType::Int64)?)
            }
            Sizing::Pad => None,
        };
        let n_rows = lengths
            .as_ref()
            .map_or(counts.len(), |l| l.len().min(counts.len()));
        for i in 0..n_rows {
            if counts.is_null(i) {
                continue;
            }
            let n = counts.value(i).max(0);
            let bytes = match &lengths {
                Some(l) => {
                    let l = l.as_primitive::<Int64Type>();
                    if l.is_null(i) {
                        continue;
                    }
                    l.value(i).saturating_mul(n)
                }
                None => n.saturating_mul(MAX_CHAR_BYTES),
            };
            if bytes > MAX_VALUE_BYTES {
                return Err(sql_error("54000", "requested length too large"));
            }
        }
        Ok(())
    }
}

impl ScalarUDFImpl for Guarded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
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
}

/// Puts the checked versions in place of DataFusion's `repeat`, `lpad` and `rpad`.
pub fn register(ctx: &SessionContext) {
    for (name, sizing) in [
        ("repeat", Sizing::Repeat),
        ("lpad", Sizing::Pad),
        ("rpad", Sizing::Pad),
    ] {
        if let Ok(inner) = datafusion::execution::FunctionRegistry::udf(ctx, name) {
            ctx.register_udf(ScalarUDF::new_from_impl(Guarded { inner, sizing }));
        }
    }
}
