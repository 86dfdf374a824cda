//! PostgreSQL's operand types where `numeric` meets a float: PostgreSQL has no
//! numeric-with-float8 operators, so the numeric side is cast to float8
//! (`float8_col > 633.5`, `val * 1.5`, `val BETWEEN 0.5 AND 1.5`, `val IN (1.5, 2)`),
//! and CASE branches, `coalesce`, `greatest`, `least`, `nullif` and `ARRAY[...]`
//! elements unify to float8.
//! DataFusion would instead cast the float to a decimal, which loses digits past
//! its scale and fails on large values. This rule runs before DataFusion's own
//! type coercion.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ExprSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Between, BinaryExpr, Cast, InList};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    Expr, ExprSchemable, LogicalPlan, Operator, WindowFunctionDefinition,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct NumericMeetsFloat;

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

fn is_numeric(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// Operators PostgreSQL resolves by the operand types (comparison and arithmetic;
/// not `%`, which PostgreSQL does not have for float8).
fn typed_by_operands(op: &Operator) -> bool {
    use Operator::*;
    matches!(
        op,
        Eq | NotEq
            | Lt
            | LtEq
            | Gt
            | GtEq
            | IsDistinctFrom
            | IsNotDistinctFrom
            | Plus
            | Minus
            | Multiply
            | Divide
    )
}

fn to_float8(e: Expr) -> Expr {
    Expr::Cast(Cast::new(Box::new(e), DataType::Float64))
}

/// `e` cast to float8 when it is numeric.
fn float_if_numeric(e: Box<Expr>, schema: &DFSchema) -> (Box<Expr>, bool) {
    match e.get_type(schema as &dyn ExprSchema) {
        Ok(t) if is_numeric(&t) => (Box::new(to_float8(*e)), true),
        _ => (e, false),
    }
}

fn type_of(e: &Expr, schema: &DFSchema) -> Option<DataType> {
    // Before type coercion a CASE reports its first branch's type: the common type
    // of all branches is what it will have (CASE WHEN … THEN 500 ELSE float8 is
    // float8, not an integer).
    if let Expr::Case(c) = e {
        let thens: Vec<DataType> = c
            .when_then_expr
            .iter()
            .map(|(_, t)| type_of(t, schema))
            .collect::<Option<_>>()?;
        let other = match &c.else_expr {
            Some(x) => Some(type_of(x, schema)?),
            None => None,
        };
        return datafusion::logical_expr::type_coercion::other::get_coerce_type_for_case_expression(
            &thens,
            other.as_ref(),
        );
    }
    e.get_type(schema as &dyn ExprSchema).ok()
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    Ok(match e {
        // numeric division with PostgreSQL's result scale (DataFusion keeps 4 more
        // digits than the dividend has: 16 / 144 gave 0.1111).
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Divide,
            right,
        }) if numeric_division(&left, &right, schema) => {
            let udf = Arc::new(datafusion::logical_expr::ScalarUDF::from(
                super::numeric::NumericDiv::default(),
            ));
            Transformed::yes(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(udf, vec![*left, *right]),
            ))
        }
        // A product with a 256-bit numeric (`numeric` without typmod): exact, at
        // most 38 fraction digits (DataFusion would ask for s1 + s2 = 76).
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Multiply,
            right,
        }) if wide_product(&left, &right, schema) => {
            let udf = Arc::new(datafusion::logical_expr::ScalarUDF::from(
                super::numeric::NumericMul::default(),
            ));
            Transformed::yes(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(udf, vec![*left, *right]),
            ))
        }
        // avg of integers and numerics: the exact sum over the count with PostgreSQL's
        // division scale (DataFusion's is float8 for integers and adds four fraction
        // digits for numerics); variance and stddev of them are numeric too.
        Expr::AggregateFunction(mut a)
            if pg_aggregate(
                a.func.name(),
                &a.params.args,
                a.params.distinct,
                false,
                schema,
            )
            .is_some() =>
        {
            if let Some(f) = pg_aggregate(
                a.func.name(),
                &a.params.args,
                a.params.distinct,
                false,
                schema,
            ) {
                a.func = f;
                if let Some(operands) = quotient_operands(&a.params.args) {
                    a.params.args = operands;
                }
            }
            Transformed::yes(Expr::AggregateFunction(a))
        }
        Expr::WindowFunction(mut w)
            if pg_aggregate(
                w.fun.name(),
                &w.params.args,
                w.params.distinct,
                !w.params.window_frame.is_ever_expanding(),
                schema,
            )
            .is_some() =>
        {
            if let Some(f) = pg_aggregate(
                w.fun.name(),
                &w.params.args,
                w.params.distinct,
                !w.params.window_frame.is_ever_expanding(),
                schema,
            ) {
                w.fun = WindowFunctionDefinition::AggregateUDF(f);
                if let Some(operands) = quotient_operands(&w.params.args) {
                    w.params.args = operands;
                }
            }
            Transformed::yes(Expr::WindowFunction(w))
        }
        // sum(int8) OVER (…) too.
        Expr::WindowFunction(mut w)
            if w.fun.name() == "sum"
                && w.params.args.len() == 1
                && matches!(
                    type_of(&w.params.args[0], schema),
                    Some(DataType::Int64 | DataType::UInt64)
                ) =>
        {
            let arg = w.params.args.remove(0);
            w.params.args.push(Expr::Cast(Cast::new(
                Box::new(arg),
                DataType::Decimal128(38, 0),
            )));
            Transformed::yes(Expr::WindowFunction(w))
        }
        // sum(int8) is numeric in PostgreSQL (it cannot overflow).
        Expr::AggregateFunction(mut a)
            if a.func.name() == "sum"
                && a.params.args.len() == 1
                && matches!(
                    type_of(&a.params.args[0], schema),
                    Some(DataType::Int64 | DataType::UInt64)
                ) =>
        {
            let arg = a.params.args.remove(0);
            a.params.args.push(Expr::Cast(Cast::new(
                Box::new(arg),
                DataType::Decimal128(38, 0),
            )));
            Transformed::yes(Expr::AggregateFunction(a))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if typed_by_operands(&op) => {
            let (lt, rt) = (type_of(&left, schema), type_of(&right, schema));
            match (lt, rt) {
                (Some(l), Some(r)) if is_float(&l) && is_numeric(&r) => Transformed::yes(
                    Expr::BinaryExpr(BinaryExpr::new(left, op, Box::new(to_float8(*right)))),
                ),
                (Some(l), Some(r)) if is_numeric(&l) && is_float(&r) => Transformed::yes(
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(to_float8(*left)), op, right)),
                ),
                _ => Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })),
            }
        }
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => {
            let types = [&expr, &low, &high].map(|e| type_of(e, schema));
            let any_float = types.iter().flatten().any(is_float);
            let any_numeric = types.iter().flatten().any(is_numeric);
            if any_float && any_numeric {
                let (expr, _) = float_if_numeric(expr, schema);
                let (low, _) = float_if_numeric(low, schema);
                let (high, _) = float_if_numeric(high, schema);
                Transformed::yes(Expr::Between(Between::new(expr, negated, low, high)))
            } else {
                Transformed::no(Expr::Between(Between::new(expr, negated, low, high)))
            }
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            let types: Vec<Option<DataType>> = std::iter::once(&*expr)
                .chain(list.iter())
                .map(|e| type_of(e, schema))
                .collect();
            let any_float = types.iter().flatten().any(is_float);
            let any_numeric = types.iter().flatten().any(is_numeric);
            if any_float && any_numeric {
                let (expr, _) = float_if_numeric(expr, schema);
                let list = list
                    .into_iter()
                    .map(|e| *float_if_numeric(Box::new(e), schema).0)
                    .collect();
                Transformed::yes(Expr::InList(InList::new(expr, list, negated)))
            } else {
                Transformed::no(Expr::InList(InList::new(expr, list, negated)))
            }
        }
        Expr::Case(mut c) => {
            let types: Vec<Option<DataType>> = c
                .when_then_expr
                .iter()
                .map(|(_, t)| &**t)
                .chain(c.else_expr.as_deref())
                .map(|e| type_of(e, schema))
                .collect();
            if mixes(&types) {
                c.when_then_expr = c
                    .when_then_expr
                    .into_iter()
                    .map(|(w, t)| (w, float_if_numeric(t, schema).0))
                    .collect();
                c.else_expr = c.else_expr.map(|e| float_if_numeric(e, schema).0);
                Transformed::yes(Expr::Case(c))
            } else {
                Transformed::no(Expr::Case(c))
            }
        }
        // floor / ceil of a numeric is a numeric without fraction digits, as
        // PostgreSQL prints it (`floor(10 / 4::numeric)` is `2`).
        Expr::ScalarFunction(f)
            if matches!(f.func.name(), "floor" | "ceil" | "ceiling")
                && f.args.len() == 1
                && type_of(&f.args[0], schema).is_some_and(|t| decimal_scale(&t) > 0) =>
        {
            let t = type_of(&f.args[0], schema)
                .map_or(DataType::Decimal128(38, 0), |t| with_scale(&t, 0));
            Transformed::yes(Expr::Cast(Cast::new(Box::new(Expr::ScalarFunction(f)), t)))
        }
        // trunc(numeric, n) has n fraction digits, as PostgreSQL prints it
        // (`trunc(2.567, 2)` is `2.56`, not `2.560`).
        Expr::ScalarFunction(f)
            if f.func.name() == "trunc"
                && f.args.len() == 2
                && matches!(
                    (type_of(&f.args[0], schema), &f.args[1]),
                    (Some(DataType::Decimal128(_, s) | DataType::Decimal256(_, s)), Expr::Literal(v, _))
                        if v.clone().cast_to(&DataType::Int64).ok().and_then(|v| match v {
                            ScalarValue::Int64(Some(n)) => Some(n),
                            _ => None,
                        }).is_some_and(|n| (0..i64::from(s)).contains(&n))
                ) =>
        {
            let n = match f.args[1].clone() {
                Expr::Literal(v, _) => match v.cast_to(&DataType::Int64) {
                    Ok(ScalarValue::Int64(Some(n))) => n as i8,
                    _ => 0,
                },
                _ => 0,
            };
            let t = type_of(&f.args[0], schema)
                .map_or(DataType::Decimal128(38, n), |t| with_scale(&t, n));
            Transformed::yes(Expr::Cast(Cast::new(Box::new(Expr::ScalarFunction(f)), t)))
        }
        // Functions whose arguments unify to one type, as CASE branches do.
        Expr::ScalarFunction(mut f)
            if matches!(
                f.func.name(),
                "coalesce" | "greatest" | "least" | "nullif" | "make_array"
            ) =>
        {
            let types: Vec<Option<DataType>> = f.args.iter().map(|e| type_of(e, schema)).collect();
            if mixes(&types) {
                f.args = f
                    .args
                    .into_iter()
                    .map(|e| *float_if_numeric(Box::new(e), schema).0)
                    .collect();
                Transformed::yes(Expr::ScalarFunction(f))
            } else {
                Transformed::no(Expr::ScalarFunction(f))
            }
        }
        other => Transformed::no(other),
    })
}

/// PostgreSQL types an integer literal as int4 when it fits, int8 when it fits
/// that, and numeric beyond; DataFusion's SQL planner makes every one int8 (or
/// uint64). `count`'s argument is left alone: `count(*)` is `count(1::int8)`,
/// which DataFusion's statistics shortcuts recognise.
fn integer_literals(e: Expr) -> Result<Transformed<Expr>> {
    e.transform_down(|e| {
        Ok(match e {
            Expr::AggregateFunction(ref a) if a.func.name() == "count" => {
                Transformed::new(e, false, TreeNodeRecursion::Jump)
            }
            Expr::WindowFunction(ref w) if w.fun.name() == "count" => {
                Transformed::new(e, false, TreeNodeRecursion::Jump)
            }
            Expr::Literal(ScalarValue::Int64(Some(v)), meta) if i32::try_from(v).is_ok() => {
                Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v as i32)), meta))
            }
            Expr::Literal(ScalarValue::UInt64(Some(v)), meta) => Transformed::yes(Expr::Literal(
                ScalarValue::Decimal128(Some(i128::from(v)), 20, 0),
                meta,
            )),
            other => Transformed::no(other),
        })
    })
}

/// A VALUES column where a float meets a numeric is float8, as in PostgreSQL:
/// DataFusion's planner already cast every row to a decimal (`VALUES (0.1::float8),
/// (0.2)` became numeric(30,15)), so those casts are replaced by casts to float8.
fn values_float8(mut v: datafusion::logical_expr::Values) -> Result<LogicalPlan> {
    let empty = DFSchema::empty();
    let float_inside = |e: &Expr| match e {
        Expr::Cast(c) if is_numeric(c.field.data_type()) => {
            type_of(&c.expr, &empty).is_some_and(|t| is_float(&t))
        }
        _ => false,
    };
    let cols: Vec<usize> = (0..v.schema.fields().len())
        .filter(|&j| {
            is_numeric(v.schema.field(j).data_type())
                && v.values
                    .iter()
                    .any(|row| row.get(j).is_some_and(float_inside))
        })
        .collect();
    if cols.is_empty() {
        return Ok(LogicalPlan::Values(v));
    }
    for row in &mut v.values {
        for &j in &cols {
            if let Some(e) = row.get_mut(j) {
                let old = std::mem::replace(e, Expr::Literal(ScalarValue::Null, None));
                let inner = match old {
                    Expr::Cast(c) if is_numeric(c.field.data_type()) => *c.expr,
                    other => other,
                };
                *e = match type_of(&inner, &empty) {
                    Some(DataType::Float64) => inner,
                    _ => to_float8(inner),
                };
            }
        }
    }
    let fields: Vec<_> = v
        .schema
        .iter()
        .enumerate()
        .map(|(j, (q, f))| {
            let f = if cols.contains(&j) {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Float64))
            } else {
                f.clone()
            };
            (q.cloned(), f)
        })
        .collect();
    let schema = DFSchema::new_with_metadata(fields, v.schema.as_ref().metadata().clone())?;
    v.schema = Arc::new(schema);
    Ok(LogicalPlan::Values(v))
}

/// A UNION column where a float branch meets a numeric one is float8, as in
/// PostgreSQL (DataFusion would unify to a decimal): the numeric branches are cast.
fn union_float8(mut u: datafusion::logical_expr::Union) -> Result<LogicalPlan> {
    use datafusion::logical_expr::{Projection, col};
    let width = u.schema.fields().len();
    let cols: Vec<usize> = (0..width)
        .filter(|&j| {
            let types: Vec<Option<DataType>> = u
                .inputs
                .iter()
                .map(|i| {
                    (i.schema().fields().len() == width)
                        .then(|| i.schema().field(j).data_type().clone())
                })
                .collect();
            mixes(&types)
        })
        .collect();
    if cols.is_empty() {
        return Ok(LogicalPlan::Union(u));
    }
    for input in &mut u.inputs {
        let schema = input.schema().clone();
        if !cols
            .iter()
            .any(|&j| is_numeric(schema.field(j).data_type()))
        {
            continue;
        }
        let exprs = schema
            .iter()
            .enumerate()
            .map(|(j, (q, f))| {
                let c = col(datafusion::common::Column::new(q.cloned(), f.name()));
                if cols.contains(&j) && is_numeric(f.data_type()) {
                    to_float8(c).alias(f.name())
                } else {
                    c
                }
            })
            .collect();
        *input = Arc::new(LogicalPlan::Projection(Projection::try_new(
            exprs,
            input.clone(),
        )?));
    }
    let fields: Vec<_> = u
        .schema
        .iter()
        .enumerate()
        .map(|(j, (q, f))| {
            let f = if cols.contains(&j) {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Float64))
            } else {
                f.clone()
            };
            (q.cloned(), f)
        })
        .collect();
    u.schema = Arc::new(DFSchema::new_with_metadata(
        fields,
        u.schema.as_ref().metadata().clone(),
    )?);
    Ok(LogicalPlan::Union(u))
}

/// A VALUES column of integer literals that all fit int4 (or are NULL) is int4,
/// as PostgreSQL types `VALUES (1), (2)`; a column of only NULLs is text.
fn values_int4(mut v: datafusion::logical_expr::Values) -> Result<LogicalPlan> {
    let fits = |e: &Expr| match e {
        Expr::Literal(ScalarValue::Int64(Some(x)), _) => i32::try_from(*x).is_ok(),
        Expr::Literal(ScalarValue::Int64(None) | ScalarValue::Null, _) => true,
        _ => false,
    };
    let width = v.schema.fields().len();
    let cols: Vec<usize> = (0..width)
        .filter(|&j| {
            v.schema.field(j).data_type() == &DataType::Int64
                && v.values.iter().all(|row| row.get(j).is_some_and(fits))
                && v.values.iter().any(|row| {
                    matches!(
                        row.get(j),
                        Some(Expr::Literal(ScalarValue::Int64(Some(_)), _))
                    )
                })
        })
        .collect();
    // A column of only NULLs is text, as PostgreSQL resolves an unknown-typed
    // VALUES column (DataFusion leaves it Null, which clients see as "unknown").
    let nulls: Vec<usize> = (0..width)
        .filter(|&j| v.schema.field(j).data_type() == &DataType::Null)
        .filter(|&j| {
            v.values
                .iter()
                .all(|row| matches!(row.get(j), Some(Expr::Literal(ScalarValue::Null, _))))
        })
        .collect();
    if cols.is_empty() && nulls.is_empty() {
        return Ok(LogicalPlan::Values(v));
    }
    for row in &mut v.values {
        for &j in &cols {
            if let Expr::Literal(ScalarValue::Int64(x), meta) = &row[j] {
                row[j] = Expr::Literal(ScalarValue::Int32(x.map(|x| x as i32)), meta.clone());
            }
        }
        for &j in &nulls {
            if let Expr::Literal(_, meta) = &row[j] {
                row[j] = Expr::Literal(ScalarValue::Utf8(None), meta.clone());
            }
        }
    }
    let fields: Vec<(
        Option<datafusion::common::TableReference>,
        Arc<arrow::datatypes::Field>,
    )> = v
        .schema
        .iter()
        .enumerate()
        .map(|(j, (q, f))| {
            let f = if cols.contains(&j) {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Int32))
            } else if nulls.contains(&j) {
                Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8))
            } else {
                f.clone()
            };
            (q.cloned(), f)
        })
        .collect();
    let schema = DFSchema::new_with_metadata(fields, v.schema.as_ref().metadata().clone())?;
    v.schema = Arc::new(schema);
    Ok(LogicalPlan::Values(v))
}

/// PostgreSQL's `avg`, `variance` and `stddev` family of one integer or numeric
/// argument, where DataFusion's differ (float8 results, fewer digits).
fn pg_aggregate(
    name: &str,
    args: &[Expr],
    distinct: bool,
    sliding: bool,
    schema: &DFSchema,
) -> Option<Arc<datafusion::logical_expr::AggregateUDF>> {
    use datafusion::logical_expr::AggregateUDF;
    let [arg] = args else {
        return None;
    };
    if distinct {
        return None;
    }
    let t = type_of(arg, schema)?;
    let f = if name == "avg" {
        if quotient_operands(args).is_some() {
            // Each quotient keeps its own division scale, which sets the sum's.
            return Some(Arc::new(AggregateUDF::from(
                super::numeric::NumericAvg::of_quotient(),
            )));
        }
        if t.is_integer() {
            AggregateUDF::from(super::pgfuncs::IntAvg::of(&t))
        } else {
            AggregateUDF::from(super::numeric::NumericAvg::of(&t)?)
        }
    } else {
        let kind = super::spread::Spread::of_name(name)?;
        match super::spread::NumericSpread::of(kind, &t) {
            Some(f) => AggregateUDF::from(f),
            // Sliding window frames need DataFusion's retractable version.
            None if !sliding => AggregateUDF::from(super::spread::FloatSpread::of(kind, &t)?),
            None => return None,
        }
    };
    Some(Arc::new(f))
}

/// The operands of an aggregate's one argument when it is a numeric division
/// (`avg(reqs / 2.0)`): PostgreSQL gives each quotient its own display scale.
fn quotient_operands(args: &[Expr]) -> Option<Vec<Expr>> {
    match args {
        [Expr::ScalarFunction(div)] if div.func.name() == "numeric_div" => Some(div.args.clone()),
        _ => None,
    }
}

/// `l / r` where one side is numeric and the other numeric or an integer.
fn numeric_division(l: &Expr, r: &Expr, schema: &DFSchema) -> bool {
    let (lt, rt) = (type_of(l, schema), type_of(r, schema));
    let num_or_int =
        |t: &Option<DataType>| t.as_ref().is_some_and(|t| is_numeric(t) || t.is_integer());
    let numeric = |t: &Option<DataType>| t.as_ref().is_some_and(is_numeric);
    (numeric(&lt) || numeric(&rt)) && num_or_int(&lt) && num_or_int(&rt)
}

/// `l * r` where one side is a 256-bit numeric and the other numeric or an integer.
fn wide_product(l: &Expr, r: &Expr, schema: &DFSchema) -> bool {
    let (lt, rt) = (type_of(l, schema), type_of(r, schema));
    let num_or_int =
        |t: &Option<DataType>| t.as_ref().is_some_and(|t| is_numeric(t) || t.is_integer());
    let wide = |t: &Option<DataType>| matches!(t, Some(DataType::Decimal256(..)));
    (wide(&lt) || wide(&rt)) && num_or_int(&lt) && num_or_int(&rt)
}

fn decimal_scale(t: &DataType) -> i8 {
    match t {
        DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => *s,
        _ => 0,
    }
}

/// The widest decimal of `t`'s width with `scale` fraction digits.
fn with_scale(t: &DataType, scale: i8) -> DataType {
    match t {
        DataType::Decimal256(..) => {
            DataType::Decimal256(crate::catalog::ANY_NUMERIC_PRECISION, scale)
        }
        _ => DataType::Decimal128(38, scale),
    }
}

/// Whether some of `types` are floats and some numeric (PostgreSQL unifies to float8).
fn mixes(types: &[Option<DataType>]) -> bool {
    types.iter().flatten().any(is_float) && types.iter().flatten().any(is_numeric)
}

impl AnalyzerRule for NumericMeetsFloat {
    fn name(&self) -> &str {
        "sundial_numeric_meets_float"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // An INSERT's VALUES were typed for the table's columns: left as they are.
        let dml = matches!(plan, LogicalPlan::Dml(_));
        let out = plan.transform_up_with_subqueries(|node| {
            let node = match node {
                LogicalPlan::Values(v) if !dml => match values_float8(v)? {
                    LogicalPlan::Values(v) => values_int4(v)?,
                    other => other,
                },
                LogicalPlan::Union(u) => union_float8(u)?,
                LogicalPlan::RecursiveQuery(q) => retype_work_table(q)?,
                LogicalPlan::Projection(p) => exists_in_select_list(p)?,
                other => other,
            };
            let mut schema = DFSchema::empty();
            for input in node.inputs() {
                schema.merge(input.schema());
            }
            let names = NamePreserver::new(&node);
            // LIMIT/OFFSET must stay int8 literals, and VALUES keeps the schema it
            // was planned with.
            let retype = !matches!(node, LogicalPlan::Limit(_) | LogicalPlan::Values(_));
            let node = node.map_expressions(|e| {
                let saved = names.save(&e);
                let e = if retype {
                    integer_literals(e)?
                } else {
                    Transformed::no(e)
                };
                let rewritten = e.transform_data(|e| e.transform_up(|e| rewrite(e, &schema)))?;
                Ok(rewritten.update_data(|e| saved.restore(e)))
            })?;
            // Recomputed everywhere: a rewritten child (sum(int8) now numeric) changes
            // the types its parents see.
            let changed = node.transformed;
            let out = node.map_data(|p| p.recompute_schema())?;
            Ok(if changed {
                out
            } else {
                Transformed::no(out.data)
            })
        })?;
        Ok(out.data)
    }
}

/// A recursive CTE's self-references were typed from its non-recursive term as
/// DataFusion's planner made it (`WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT
/// n + 1 FROM t ...)` saw `1` as int8). Once that term's literals are int4, the work
/// table the recursive term reads takes its types, and the recursive term's schemas
/// are recomputed: `n + 1` is int4 again, as in PostgreSQL, instead of an int8 column
/// the int4 CTE cannot hold.
fn retype_work_table(q: datafusion::logical_expr::RecursiveQuery) -> Result<LogicalPlan> {
    use datafusion::catalog::cte_worktable::CteWorkTable;
    use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
    let want = q.static_term.schema().clone();
    let name = q.name.clone();
    let mut changed = false;
    let term = Arc::unwrap_or_clone(q.recursive_term.clone()).transform_up(|node| {
        let LogicalPlan::TableScan(scan) = node else {
            return Ok(Transformed::no(node));
        };
        let is_work_table = source_as_provider(&scan.source)
            .ok()
            .is_some_and(|p| (p.as_ref() as &dyn std::any::Any).is::<CteWorkTable>());
        let have = scan.source.schema();
        let nothing_to_retype = have.fields().len() != want.fields().len()
            || have
                .fields()
                .iter()
                .zip(want.fields())
                .all(|(h, w)| h.data_type() == w.data_type());
        if !is_work_table || scan.table_name.table() != name || nothing_to_retype {
            return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
        }
        let fields: Vec<_> = have
            .fields()
            .iter()
            .zip(want.fields())
            .map(|(h, w)| {
                Arc::new(
                    h.as_ref()
                        .clone()
                        .with_data_type(w.data_type().clone())
                        .with_nullable(h.is_nullable() || w.is_nullable()),
                )
            })
            .collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        let source = provider_as_source(Arc::new(CteWorkTable::new(&name, schema)));
        changed = true;
        Ok(Transformed::yes(LogicalPlan::TableScan(
            datafusion::logical_expr::logical_plan::TableScanBuilder::new(scan.table_name, source)
                .with_projection(scan.projection)
                .with_filters(scan.filters)
                .with_fetch(scan.fetch)
                .build()?,
        )))
    })?;
    if !changed {
        return Ok(LogicalPlan::RecursiveQuery(q));
    }
    let term = term
        .data
        .transform_up(|p| p.recompute_schema().map(Transformed::yes))?
        .data;
    Ok(LogicalPlan::RecursiveQuery(
        datafusion::logical_expr::RecursiveQuery {
            recursive_term: Arc::new(term),
            ..q
        },
    ))
}

/// `EXISTS (subquery)` in a select list: DataFusion turns EXISTS into a semi join
/// only under a filter, and a projection of one failed to plan ("Physical plan does
/// not support logical expression Exists"). It becomes `(SELECT count(*) FROM
/// subquery) > 0` (`= 0` for NOT EXISTS), a scalar subquery DataFusion decorrelates;
/// the column keeps its name.
fn exists_in_select_list(p: datafusion::logical_expr::Projection) -> Result<LogicalPlan> {
    use datafusion::logical_expr::{Subquery, expr::Exists, lit};
    if !p.expr.iter().any(|e| {
        e.exists(|e| Ok(matches!(e, Expr::Exists(_))))
            .unwrap_or(false)
    }) {
        return Ok(LogicalPlan::Projection(p));
    }
    let exprs = p
        .expr
        .into_iter()
        .map(|e| {
            let name = e.schema_name().to_string();
            let aliased = matches!(e, Expr::Alias(_));
            let t = e.transform_up(|e| {
                let Expr::Exists(Exists { subquery, negated }) = e else {
                    return Ok(Transformed::no(e));
                };
                let counted = datafusion::logical_expr::LogicalPlanBuilder::from(
                    Arc::unwrap_or_clone(subquery.subquery),
                )
                .aggregate(
                    Vec::<Expr>::new(),
                    vec![datafusion::functions_aggregate::count::count_all()],
                )?
                .build()?;
                let count = Expr::ScalarSubquery(Subquery {
                    subquery: Arc::new(counted),
                    outer_ref_columns: subquery.outer_ref_columns,
                    spans: subquery.spans,
                });
                let test = match negated {
                    true => count.eq(lit(0i64)),
                    false => count.gt(lit(0i64)),
                };
                Ok(Transformed::yes(test))
            })?;
            Ok(match (t.transformed, aliased) {
                (true, false) => t.data.alias(name),
                _ => t.data,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LogicalPlan::Projection(
        datafusion::logical_expr::Projection::try_new(exprs, p.input)?,
    ))
}

/// Rules that must run before DataFusion's analyzer rules.
pub fn first_rules() -> Vec<Arc<dyn AnalyzerRule + Send + Sync>> {
    vec![Arc::new(NumericMeetsFloat)]
}
