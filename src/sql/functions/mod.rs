//! SQL functions Sundial adds to DataFusion: `time_bucket`, `histogram` and the PostgreSQL
//! session functions clients call on connect (`version()`, `current_setting()`,
//! `current_database()`, `current_schema()`, `pg_backend_pid()`).

pub mod format;
pub mod histogram;
pub mod interval_avg;
pub mod json;
pub mod limits;
pub mod numeric;
pub mod ordered_set;
pub mod pgcast;
pub mod pgcoerce;
pub mod pgfuncs;
pub mod pgtext;
pub mod pgtypes;
pub mod regex;
pub mod series;
pub mod session_zone;
pub mod spread;
pub mod string_agg;
pub mod time_bucket;
pub mod to_char;
pub mod to_timestamp;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use parking_lot::RwLock;

/// The value of an expression that reads no column (a function argument folded at
/// planning), with `props` giving `now()`.
pub(crate) fn const_value(
    e: &datafusion::logical_expr::Expr,
    props: &datafusion::execution::context::ExecutionProps,
) -> Result<ScalarValue> {
    let phys = datafusion::physical_expr::create_physical_expr(
        e,
        &datafusion::common::DFSchema::empty(),
        props,
        &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default(),
    )?;
    let batch = arrow::array::RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let arr = phys.evaluate(&batch)?.into_array(1)?;
    ScalarValue::try_from_array(&arr, 0)
}

/// A PostgreSQL error with SQLSTATE `code`, as DataFusion carries it.
pub(crate) fn sql_error(code: &'static str, msg: &str) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(crate::error::Error::sql(code, msg)))
}

/// The `version()` string: PostgreSQL's shape first, so drivers accept it.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.6 (Sundial {}) on x86_64-pc-linux-gnu, compiled by rustc, 64-bit",
        env!("CARGO_PKG_VERSION")
    )
}

/// Returns `out` as a scalar when every argument was a scalar, else as an array.
pub fn columnar(out: arrow::array::ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    if scalar {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
    } else {
        Ok(ColumnarValue::Array(out))
    }
}

/// The arguments as arrays of the batch's length, and whether all were scalars
/// (the result is then a scalar too).
pub(crate) fn arrays_of(args: &ScalarFunctionArgs) -> Result<(Vec<arrow::array::ArrayRef>, bool)> {
    let scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let arrays = args
        .args
        .iter()
        .map(|a| a.to_array(args.number_rows))
        .collect::<Result<_>>()?;
    Ok((arrays, scalar))
}

/// Session settings shared between the session and `current_setting()`.
pub type Settings = Arc<RwLock<BTreeMap<String, String>>>;

/// A function returning a constant computed at registration.
#[derive(Debug)]
struct Constant {
    name: &'static str,
    value: ScalarValue,
    signature: Signature,
}

impl PartialEq for Constant {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name && self.value == o.value
    }
}
impl Eq for Constant {}
impl Hash for Constant {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.name.hash(h)
    }
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.value.data_type())
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

fn constant(name: &'static str, value: ScalarValue) -> ScalarUDF {
    ScalarUDF::from(Constant {
        name,
        value,
        signature: Signature::nullary(Volatility::Stable),
    })
}

/// `current_setting(name [, missing_ok])`.
#[derive(Debug)]
struct CurrentSetting {
    settings: Settings,
    signature: Signature,
}

impl PartialEq for CurrentSetting {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.settings, &o.settings)
    }
}
impl Eq for CurrentSetting {}
impl Hash for CurrentSetting {
    fn hash<H: Hasher>(&self, h: &mut H) {
        "current_setting".hash(h)
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let names = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let missing_ok = arrays
            .get(1)
            .and_then(|a| arrow::compute::cast(a, &DataType::Boolean).ok())
            .map(|a| a.as_boolean().value(0))
            .unwrap_or(false);
        let settings = self.settings.read();
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            let key = names.value(i).to_ascii_lowercase();
            match settings.get(&key) {
                Some(v) => out.push(Some(v.clone())),
                None if missing_ok => out.push(None),
                None => {
                    return Err(datafusion::error::DataFusionError::External(Box::new(
                        crate::Error::sql(
                            "42704",
                            format!(
                                "unrecognized configuration parameter \"{}\"",
                                names.value(i)
                            ),
                        ),
                    )));
                }
            }
        }
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        columnar(Arc::new(StringArray::from(out)), scalar)
    }
}

/// Registers Sundial's functions on a connection's context.
pub fn register(ctx: &SessionContext, db: &str, pid: i32, settings: Settings) {
    ctx.register_udf(ScalarUDF::from(time_bucket::TimeBucket::default()));
    ctx.register_udaf(datafusion::logical_expr::AggregateUDF::from(
        histogram::Histogram::default(),
    ));
    ctx.register_udf(ScalarUDF::from(pgtext::PgText::default()));
    ctx.register_udf(ScalarUDF::from(to_char::ToChar::new(settings.clone())));
    session_zone::register(ctx);
    to_timestamp::register(ctx);
    ctx.register_udf(ScalarUDF::from(format::Format::default()));
    ctx.register_udf(ScalarUDF::from(regex::RegexpMatchesAll::default()));
    for kind in [
        numeric::ScaleFn::Scale,
        numeric::ScaleFn::MinScale,
        numeric::ScaleFn::TrimScale,
    ] {
        ctx.register_udf(ScalarUDF::from(numeric::NumericScale::new(kind)));
    }
    if let Ok(round) = datafusion::execution::FunctionRegistry::udf(ctx, "round") {
        ctx.register_udf(ScalarUDF::new_from_impl(numeric::PgRound::new(
            round.as_ref().clone(),
        )));
    }
    if let Ok(ntile) = datafusion::execution::FunctionRegistry::udwf(ctx, "ntile") {
        ctx.register_udwf(datafusion::logical_expr::WindowUDF::new_from_impl(
            pgfuncs::Int4Window(ntile.inner().clone()),
        ));
    }
    pgfuncs::register(ctx);
    interval_avg::register(ctx);
    limits::register(ctx);
    string_agg::register(ctx);
    json::register(ctx, settings.clone());
    ctx.register_udtf(
        "generate_series",
        Arc::new(series::Series::generate_series()),
    );
    ctx.register_udtf("range", Arc::new(series::Series::range()));
    // PostgreSQL's names for functions DataFusion has under another.
    for (df, pg) in [("ceil", "ceiling"), ("signum", "sign")] {
        if let Ok(f) = datafusion::execution::FunctionRegistry::udf(ctx, df) {
            ctx.register_udf(f.as_ref().clone().with_aliases([pg]));
        }
    }
    if let Ok(f) = datafusion::execution::FunctionRegistry::udaf(ctx, "bool_and") {
        ctx.register_udaf(f.as_ref().clone().with_aliases(["every"]));
    }
    ctx.add_analyzer_rule(Arc::new(pgcast::RoundingCasts::default()));
    ctx.register_udf(constant(
        "version",
        ScalarValue::Utf8(Some(version_string())),
    ));
    ctx.register_udf(constant(
        "current_database",
        ScalarValue::Utf8(Some(db.to_string())),
    ));
    ctx.register_udf(constant(
        "current_schema",
        ScalarValue::Utf8(Some("public".to_string())),
    ));
    ctx.register_udf(constant("pg_backend_pid", ScalarValue::Int32(Some(pid))));
    ctx.register_udf(ScalarUDF::from(CurrentSetting {
        settings,
        signature: Signature::one_of(
            vec![
                datafusion::logical_expr::TypeSignature::Exact(vec![DataType::Utf8]),
                datafusion::logical_expr::TypeSignature::Exact(vec![
                    DataType::Utf8,
                    DataType::Boolean,
                ]),
            ],
            Volatility::Stable,
        ),
    }));
}
