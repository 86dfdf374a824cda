//! PostgreSQL semantics DataFusion lacks, applied by one analyzer rule:
//! float/numeric → integer casts round (`pg_rint`: half to even for floats, half
//! away from zero for numeric), float → numeric casts go through the float's
//! significant digits, `round(float8)` is `rint` (half to even), and integer
//! `+ - *` raise 22003 on overflow.

use std::sync::Arc;

use datafusion::common::ScalarValue;

use arrow::array::{ArrayRef, AsArray, Decimal128Array, Float32Array, Float64Array};
use arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ExprSchema};
use datafusion::error::Result;
use datafusion::logical_expr::Operator;
use datafusion::logical_expr::expr::{BinaryExpr, Cast, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// `pg_rint(x)`: rounds to an integral value of the same type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgRint {
    signature: Signature,
}

impl Default for PgRint {
    fn default() -> Self {
        PgRint {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for PgRint {
    fn name(&self) -> &str {
        "pg_rint"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let out: ArrayRef = match a.data_type() {
            DataType::Float64 => Arc::new(
                a.as_primitive::<Float64Type>()
                    .iter()
                    .map(|v| v.map(f64::round_ties_even))
                    .collect::<Float64Array>(),
            ),
            DataType::Float32 => Arc::new(
                a.as_primitive::<Float32Type>()
                    .iter()
                    .map(|v| v.map(f32::round_ties_even))
                    .collect::<Float32Array>(),
            ),
            DataType::Decimal128(p, s) if *s > 0 => {
                let f = 10i128.pow(*s as u32);
                let arr = a.as_primitive::<Decimal128Type>();
                let rounded: Decimal128Array = arr
                    .iter()
                    .map(|v| {
                        v.map(|v| {
                            let q = v / f;
                            let r = v % f;
                            let q = if r.abs() * 2 >= f { q + v.signum() } else { q };
                            q * f
                        })
                    })
                    .collect();
                Arc::new(rounded.with_precision_and_scale(*p, *s)?)
            }
            DataType::Decimal256(p, s) if *s > 0 => {
                let ten = arrow::datatypes::i256::from_i128(10);
                let f = ten.wrapping_pow(*s as u32);
                let two = arrow::datatypes::i256::from_i128(2);
                let arr = a.as_primitive::<arrow::datatypes::Decimal256Type>();
                let rounded: arrow::array::Decimal256Array = arr
                    .iter()
                    .map(|v| {
                        v.map(|v| {
                            let q = v.wrapping_div(f);
                            let r = v.wrapping_rem(f);
                            let q = if r.wrapping_abs().wrapping_mul(two) >= f {
                                q.wrapping_add(arrow::datatypes::i256::from_i128(
                                    if v.is_negative() { -1 } else { 1 },
                                ))
                            } else {
                                q
                            };
                            q.wrapping_mul(f)
                        })
                    })
                    .collect();
                Arc::new(rounded.with_precision_and_scale(*p, *s)?)
            }
            _ => a,
        };
        super::columnar(out, scalar)
    }
}

/// Integer `+`, `-`, `*` that fail on overflow instead of wrapping. A chain of one
/// operator (`a + b + c`) is one call over all its operands, applied left to right
/// as PostgreSQL does (the first overflow is the error): a call per operator made
/// planning a long chain take seconds.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedArith {
    op: Operator,
    signature: Signature,
}

impl CheckedArith {
    fn new(op: Operator) -> Self {
        CheckedArith {
            op,
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedArith {
    fn name(&self) -> &str {
        match self.op {
            Operator::Plus => "pg_checked_add",
            Operator::Minus => "pg_checked_sub",
            _ => "pg_checked_mul",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    /// DataFusion's default names a call after its arguments' names, each built as a
    /// string of its own: a chain of n operators (`1+1+…+1`) took n³ steps to plan
    /// (491 terms: 15 s). Past a few levels the name is the operator with a hash of
    /// its arguments, so that equal calls still get equal names.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        use std::fmt::Write;
        use std::hash::{Hash, Hasher};
        const SPELLED_OUT: usize = 32;
        // Asked for every node again and again while a long chain is planned: the
        // place where a canceled statement's planning stops.
        if crate::query::runtime::canceled() {
            return Err(datafusion::error::DataFusionError::External(Box::new(
                crate::Error::sql("57014", "canceling statement due to user request"),
            )));
        }
        let mut nodes = 0;
        for a in args {
            a.apply(|_| {
                nodes += 1;
                Ok(match nodes > SPELLED_OUT {
                    true => TreeNodeRecursion::Stop,
                    false => TreeNodeRecursion::Continue,
                })
            })?;
        }
        let mut name = format!("{}(", self.name());
        if nodes > SPELLED_OUT {
            let mut h = std::hash::DefaultHasher::new();
            args.hash(&mut h);
            let _ = write!(name, "#{:016x}", h.finish());
        } else {
            for (i, a) in args.iter().enumerate() {
                let sep = if i > 0 { "," } else { "" };
                let _ = write!(name, "{sep}{}", a.schema_name());
            }
        }
        name.push(')');
        Ok(name)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::compute::kernels::numeric;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some((first, rest)) = arrays.split_first() else {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "{} without operands",
                self.name()
            )));
        };
        let mut out = first.clone();
        for next in rest {
            out = match self.op {
                Operator::Plus => numeric::add(&out, next),
                Operator::Minus => numeric::sub(&out, next),
                _ => numeric::mul(&out, next),
            }
            .map_err(|e| {
                datafusion::error::DataFusionError::External(Box::new(crate::Error::sql(
                    "22003",
                    match first.data_type() {
                        DataType::Int16 => "smallint out of range".to_string(),
                        DataType::Int32 => "integer out of range".to_string(),
                        DataType::Int64 => "bigint out of range".to_string(),
                        _ => e.to_string(),
                    },
                )))
            })?;
        }
        super::columnar(out, scalar)
    }
}

/// For `EXTRACT(epoch FROM date)`: numeric of scale 0, as PostgreSQL's extract_date
/// gives it (a date's epoch has no fraction; timestamps keep 6 digits). `None` for
/// other units and arguments.
fn extract_of_date(f: &ScalarFunction, schema: &DFSchema) -> Option<DataType> {
    let [Expr::Literal(ScalarValue::Utf8(Some(unit)), _), arg] = f.args.as_slice() else {
        return None;
    };
    let is_date = |e: &Expr| {
        matches!(
            e.get_type(schema as &dyn ExprSchema),
            Ok(DataType::Date32 | DataType::Date64)
        )
    };
    // Type coercion may have cast the date to a timestamp for date_part.
    let date = is_date(arg) || matches!(arg, Expr::Cast(c) if is_date(&c.expr));
    (date && unit.eq_ignore_ascii_case("epoch")).then_some(DataType::Decimal128(38, 0))
}

/// The analyzer rule that applies these rewrites.
#[derive(Debug)]
pub struct RoundingCasts {
    rint: Arc<ScalarUDF>,
    float_numeric: Arc<ScalarUDF>,
    numeric_float: Arc<ScalarUDF>,
    add: Arc<ScalarUDF>,
    sub: Arc<ScalarUDF>,
    mul: Arc<ScalarUDF>,
}

impl Default for RoundingCasts {
    fn default() -> Self {
        RoundingCasts {
            rint: Arc::new(ScalarUDF::from(PgRint::default())),
            float_numeric: Arc::new(ScalarUDF::from(super::numeric::FloatNumeric::default())),
            numeric_float: Arc::new(ScalarUDF::from(super::numeric::NumericFloat::default())),
            add: Arc::new(ScalarUDF::from(CheckedArith::new(Operator::Plus))),
            sub: Arc::new(ScalarUDF::from(CheckedArith::new(Operator::Minus))),
            mul: Arc::new(ScalarUDF::from(CheckedArith::new(Operator::Multiply))),
        }
    }
}

fn is_int(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn is_fractional(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(_, _)
            | DataType::Decimal256(_, _)
    )
}

impl AnalyzerRule for RoundingCasts {
    fn name(&self) -> &str {
        "sundial_rounding_casts"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let rint = self.rint.clone();
        let float_numeric = self.float_numeric.clone();
        let numeric_float = self.numeric_float.clone();
        let session_tz: Option<Arc<str>> = config.execution.time_zone.as_deref().map(Arc::from);
        let (add, sub, mul) = (self.add.clone(), self.sub.clone(), self.mul.clone());
        let out = plan.transform_up_with_subqueries(|node| {
            let mut merged = DFSchema::empty();
            for input in node.inputs() {
                merged.merge(input.schema());
            }
            let schema = merged;
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let rewritten = e.transform_up(|e| {
                    if let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e {
                        let udf = match op {
                            Operator::Plus => Some(&add),
                            Operator::Minus => Some(&sub),
                            Operator::Multiply => Some(&mul),
                            _ => None,
                        };
                        let lt = left.get_type(&schema as &dyn ExprSchema).ok();
                        let rt = right.get_type(&schema as &dyn ExprSchema).ok();
                        return Ok(match (udf, lt, rt) {
                            (Some(udf), Some(lt), Some(rt)) if is_int(&lt) && lt == rt => {
                                // The chain so far, of the same operator and type, takes
                                // one more operand.
                                let args = match *left {
                                    Expr::ScalarFunction(f) if f.func.name() == udf.name() => {
                                        let mut args = f.args;
                                        args.push(*right);
                                        args
                                    }
                                    left => vec![left, *right],
                                };
                                Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                                    udf.clone(),
                                    args,
                                )))
                            }
                            _ => Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })),
                        });
                    }
                    // round(float8) is rint in PostgreSQL: halves go to the even
                    // neighbour (DataFusion's round goes away from zero).
                    if let Expr::ScalarFunction(f) = &e
                        && f.func.name() == "round"
                        && let [arg] = f.args.as_slice()
                        && let Ok(DataType::Float32 | DataType::Float64) =
                            arg.get_type(&schema as &dyn ExprSchema)
                    {
                        return Ok(Transformed::yes(Expr::ScalarFunction(
                            ScalarFunction::new_udf(rint.clone(), vec![arg.clone()]),
                        )));
                    }
                    let Expr::Cast(Cast { expr, field }) = e else {
                        return Ok(Transformed::no(e));
                    };
                    if matches!(field.data_type(), DataType::Timestamp(..))
                        && let Expr::Literal(ScalarValue::Utf8(Some(text)), meta) = *expr
                    {
                        let mut text = text;
                        crate::interval::complete_seconds(&mut text);
                        let lit = Expr::Literal(ScalarValue::Utf8(Some(text)), meta);
                        // Text without an offset names a time in the session's time
                        // zone, also where it is compared with a column of another
                        // zone (`time >= '2024-01-01 12:00'`), as in PostgreSQL.
                        let lit = match (field.data_type(), &session_tz) {
                            (DataType::Timestamp(unit, Some(tz)), Some(session))
                                if tz != session =>
                            {
                                Expr::Cast(Cast {
                                    expr: Box::new(lit),
                                    field: Arc::new(arrow::datatypes::Field::new(
                                        "",
                                        DataType::Timestamp(*unit, Some(session.clone())),
                                        true,
                                    )),
                                })
                            }
                            _ => lit,
                        };
                        return Ok(Transformed::yes(Expr::Cast(Cast {
                            expr: Box::new(lit),
                            field,
                        })));
                    }
                    // EXTRACT (date_part as numeric(38, 6)): microseconds kept, and a
                    // date's epoch without fraction digits.
                    if let Expr::ScalarFunction(f) = expr.as_ref()
                        && f.func.name() == "date_part"
                    {
                        let field = extract_of_date(f, &schema)
                            .filter(|_| *field.data_type() == DataType::Decimal128(38, 6))
                            .map(|t| Arc::new(field.as_ref().clone().with_data_type(t)))
                            .unwrap_or(field);
                        return Ok(Transformed::yes(Expr::Cast(Cast { expr, field })));
                    }
                    let from = (*expr).get_type(&schema as &dyn ExprSchema).ok();
                    // numeric → float: the nearest float to the exact value.
                    if matches!(
                        from,
                        Some(DataType::Decimal128(..) | DataType::Decimal256(..))
                    ) && matches!(field.data_type(), DataType::Float32 | DataType::Float64)
                    {
                        let target = ScalarValue::try_from(field.data_type())?;
                        return Ok(Transformed::yes(Expr::ScalarFunction(
                            ScalarFunction::new_udf(
                                numeric_float.clone(),
                                vec![*expr, Expr::Literal(target, None)],
                            ),
                        )));
                    }
                    match from {
                        // float → numeric through the float's 15 significant digits
                        // (0.1::float8::numeric is 0.1, not the binary fraction's digits).
                        Some(DataType::Float32 | DataType::Float64)
                            if matches!(
                                field.data_type(),
                                DataType::Decimal128(..) | DataType::Decimal256(..)
                            ) =>
                        {
                            let target = ScalarValue::try_from(field.data_type())?;
                            Ok(Transformed::yes(Expr::ScalarFunction(
                                ScalarFunction::new_udf(
                                    float_numeric.clone(),
                                    vec![*expr, Expr::Literal(target, None)],
                                ),
                            )))
                        }
                        Some(from) if is_int(field.data_type()) && is_fractional(&from) => {
                            let rounded = Expr::ScalarFunction(ScalarFunction::new_udf(
                                rint.clone(),
                                vec![*expr],
                            ));
                            Ok(Transformed::yes(Expr::Cast(Cast {
                                expr: Box::new(rounded),
                                field,
                            })))
                        }
                        _ => Ok(Transformed::no(Expr::Cast(Cast { expr, field }))),
                    }
                })?;
                Ok(rewritten.update_data(|e| saved.restore(e)))
            })
        })?;
        Ok(out.data)
    }
}
