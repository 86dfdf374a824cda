//! `sundial_row_in(c1, …)`: whether a row's values are one of a fixed set of rows
//! (NULL equal to NULL). The deletion predicate of an UPDATE whose rows are not
//! found by a predicate on the table alone (FROM, subqueries, merged points).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::{Error, Result};

/// Tells sets apart (the UDF's identity for plan equality).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A set of rows of fixed column types, in Arrow's row format.
#[derive(Debug)]
pub struct RowIn {
    id: u64,
    types: Vec<DataType>,
    rows: Arc<HashSet<Box<[u8]>>>,
    signature: Signature,
}

impl PartialEq for RowIn {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for RowIn {}

impl std::hash::Hash for RowIn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

fn converter(types: &[DataType]) -> DfResult<RowConverter> {
    Ok(RowConverter::new(
        types.iter().map(|t| SortField::new(t.clone())).collect(),
    )?)
}

/// `columns` cast to `types` (scans may hand out other string or dictionary forms).
fn cast_all(columns: &[ArrayRef], types: &[DataType]) -> DfResult<Vec<ArrayRef>> {
    columns
        .iter()
        .zip(types)
        .map(|(c, t)| {
            if c.data_type() == t {
                Ok(c.clone())
            } else {
                Ok(arrow::compute::cast(c, t)?)
            }
        })
        .collect()
}

impl RowIn {
    /// The set of the rows of `columns` (equal lengths), compared as `types`.
    pub fn new(columns: &[ArrayRef], types: Vec<DataType>) -> Result<RowIn> {
        let conv = converter(&types)?;
        let rows = conv.convert_columns(&cast_all(columns, &types)?)?;
        let set: HashSet<Box<[u8]>> = rows.iter().map(|r| Box::from(r.as_ref())).collect();
        Ok(RowIn {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            types,
            rows: Arc::new(set),
            signature: Signature::variadic_any(Volatility::Immutable),
        })
    }

    /// How many distinct rows the set holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The predicate `(args…) ∈ set` (args in the order of the set's columns).
    pub fn call(self, args: Vec<Expr>) -> Expr {
        Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(ScalarUDF::new_from_impl(self)),
            args,
        ))
    }
}

impl ScalarUDFImpl for RowIn {
    fn name(&self) -> &str {
        "sundial_row_in"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if args.args.len() != self.types.len() {
            return Err(Error::Internal("sundial_row_in: wrong argument count".into()).into());
        }
        let n = args.number_rows;
        let columns = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<DfResult<Vec<_>>>()?;
        let rows = converter(&self.types)?.convert_columns(&cast_all(&columns, &self.types)?)?;
        let hits: BooleanArray = rows
            .iter()
            .map(|r| Some(self.rows.contains(r.as_ref())))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(hits)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    #[test]
    fn nulls_match_nulls_and_types_are_cast() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None]));
        let b: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), None]));
        let set = RowIn::new(&[a, b], vec![DataType::Int64, DataType::Utf8]).unwrap();
        assert_eq!(set.len(), 2);
        let probe_a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(1)]));
        let probe_b: ArrayRef = Arc::new(arrow::array::StringViewArray::from(vec![
            Some("x"),
            None,
            Some("y"),
        ]));
        let args = ScalarFunctionArgs {
            args: vec![ColumnarValue::Array(probe_a), ColumnarValue::Array(probe_b)],
            arg_fields: vec![],
            number_rows: 3,
            return_field: Arc::new(arrow::datatypes::Field::new("r", DataType::Boolean, true)),
            config_options: Arc::new(Default::default()),
        };
        let ColumnarValue::Array(out) = set.invoke_with_args(args).unwrap() else {
            panic!("an array");
        };
        let out = out.as_any().downcast_ref::<BooleanArray>().unwrap();
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![Some(true), Some(true), Some(false)]
        );
    }
}
