//! PostgreSQL's `json` and `jsonb` in queries: the type names (`::jsonb`), the
//! operators (`-> ->> #> #>> @> <@ ? ?| ?&`, planned where the operand types are
//! known), the functions and aggregates that build and read JSON, and
//! `jsonb_each` / `jsonb_array_elements` as table functions. Values are
//! [`crate::json`]'s; a result of JSON type is text marked with its kind.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int32Array, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Expr, ExprSchemable, LogicalPlan,
    ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::BinaryOperator;

use super::{Settings, arrays_of, columnar, sql_error};
use crate::json::{Kind, Node, Value, quote, text_array};

fn df(e: crate::error::Error) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}

/// The session's time zone (timestamps with time zone are shown in it).
fn zone(settings: &Settings) -> String {
    settings
        .read()
        .get("timezone")
        .cloned()
        .unwrap_or_else(|| "UTC".into())
}

/// What each function computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    /// The cast of text (or the other JSON type) to this kind.
    In(Kind),
    /// `->` (`text`: `->>`).
    Get {
        text: bool,
    },
    /// `#>` (`text`: `#>>`), or `jsonb_extract_path(j, VARIADIC keys)`.
    Path {
        text: bool,
    },
    Contains,
    Contained,
    Exists,
    ExistsAny,
    ExistsAll,
    Typeof,
    Pretty,
    Set,
    ArrayLength,
    /// PostgreSQL's `jsonb` ordering as -1, 0 or 1 (the comparison operators).
    Compare,
    /// An array's elements as a list (`text`: as `->>` shows them): the
    /// set-returning `jsonb_array_elements` in a select list, unnested.
    Elements {
        text: bool,
    },
    /// An object's keys as a list (`jsonb_object_keys` in a select list).
    Keys,
    /// `jsonb || jsonb`.
    Concat,
    /// `jsonb - text`, `jsonb - integer`, `jsonb - text[]`.
    Delete,
    /// `jsonb #- text[]`.
    DeletePath,
    /// Bytes ordered as PostgreSQL orders `jsonb` (`ORDER BY` a `jsonb`).
    SortKey,
    /// `to_json` / `to_jsonb`.
    To(Kind),
    BuildObject(Kind),
    BuildArray(Kind),
}

/// One JSON function; see [`Op`].
#[derive(Debug)]
struct JsonFn {
    name: &'static str,
    op: Op,
    signature: Signature,
    settings: Settings,
}

impl PartialEq for JsonFn {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name && self.op == o.op
    }
}
impl Eq for JsonFn {}
impl std::hash::Hash for JsonFn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.op.hash(state);
    }
}

/// The kind of a JSON operand; plain text (a literal) counts as `jsonb`.
fn kind_of(f: &Field) -> Kind {
    Kind::of(f).unwrap_or(Kind::Jsonb)
}

impl ScalarUDFImpl for JsonFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(match self.op {
            Op::Contains | Op::Contained | Op::Exists | Op::ExistsAny | Op::ExistsAll => {
                DataType::Boolean
            }
            Op::ArrayLength | Op::Compare => DataType::Int32,
            Op::SortKey => DataType::Binary,
            Op::Elements { .. } | Op::Keys => {
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
            }
            _ => DataType::Utf8,
        })
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let dt = self.return_type(&[])?;
        let kind = match self.op {
            Op::In(k) | Op::To(k) | Op::BuildObject(k) | Op::BuildArray(k) => Some(k),
            Op::Get { text: false } | Op::Path { text: false } => {
                Some(args.arg_fields.first().map_or(Kind::Jsonb, |f| kind_of(f)))
            }
            Op::Set | Op::Concat | Op::Delete | Op::DeletePath => Some(Kind::Jsonb),
            _ => None,
        };
        if let Op::Elements { text: false } = self.op {
            let kind = args.arg_fields.first().map_or(Kind::Jsonb, |f| kind_of(f));
            let item = Arc::new(kind.field("item", true));
            return Ok(Arc::new(Field::new(self.name, DataType::List(item), true)));
        }
        Ok(Arc::new(match kind {
            Some(k) => k.field(self.name, true),
            None => Field::new(self.name, dt, true),
        }))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (arrays, scalar) = arrays_of(&args)?;
        let fields = &args.arg_fields;
        let n = args.number_rows;
        let out: ArrayRef = match self.op {
            Op::In(kind) => {
                let src = operand_texts(&arrays[0], kind)?;
                Arc::new(
                    src.iter()
                        .map(|v| v.as_deref().map(|t| kind.input(t)).transpose())
                        .collect::<crate::error::Result<StringArray>>()
                        .map_err(df)?,
                )
            }
            Op::Get { text } | Op::Path { text } => {
                let kind = kind_of(&fields[0]);
                let docs = texts(&arrays[0])?;
                let path = self.paths(&arrays[1..], n)?;
                let mut out = Vec::with_capacity(n);
                for (doc, path) in docs.iter().zip(path) {
                    let (Some(doc), Some(path)) = (doc, path) else {
                        out.push(None);
                        continue;
                    };
                    let node = crate::json::parse(doc).map_err(df)?;
                    let found = match (&self.op, path.as_slice()) {
                        (Op::Get { .. }, [Step::Index(i)]) => node.index(*i),
                        (Op::Get { .. }, [Step::Key(k)]) => node.field(k),
                        (_, steps) => {
                            let keys: Vec<Option<String>> = steps
                                .iter()
                                .map(|s| match s {
                                    Step::Key(k) => Some(k.clone()),
                                    Step::Index(i) => Some(i.to_string()),
                                    Step::Null => None,
                                })
                                .collect();
                            node.path(&keys)
                        }
                    };
                    out.push(found.and_then(|f| {
                        if text {
                            f.unquoted(kind, doc)
                        } else {
                            Some(f.text(kind, doc))
                        }
                    }));
                }
                Arc::new(StringArray::from(out))
            }
            Op::Contains | Op::Contained => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let b = operand_nodes(&fields[1], &arrays[1])?;
                let out: BooleanArray = a
                    .iter()
                    .zip(&b)
                    .map(|(a, b)| match (a, b) {
                        (Some(a), Some(b)) if self.op == Op::Contains => Some(a.contains(b)),
                        (Some(a), Some(b)) => Some(b.contains(a)),
                        _ => None,
                    })
                    .collect();
                Arc::new(out)
            }
            Op::Exists | Op::ExistsAny | Op::ExistsAll => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let keys: Vec<Option<Vec<Option<String>>>> = if self.op == Op::Exists {
                    texts(&arrays[1])?
                        .into_iter()
                        .map(|k| k.map(|k| vec![Some(k)]))
                        .collect()
                } else {
                    string_lists(&arrays[1])?
                };
                let out: BooleanArray = a
                    .iter()
                    .zip(keys)
                    .map(|(a, keys)| {
                        let (a, keys) = (a.as_ref()?, keys?);
                        let mut hit = keys.iter().flatten().map(|k| a.has_key(k));
                        Some(match self.op {
                            Op::ExistsAll => hit.all(|h| h),
                            _ => hit.any(|h| h),
                        })
                    })
                    .collect();
                Arc::new(out)
            }
            Op::Typeof | Op::Pretty => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let out: StringArray = a
                    .iter()
                    .map(|a| {
                        a.as_ref().map(|a| match self.op {
                            Op::Typeof => a.type_name().to_string(),
                            _ => a.pretty(),
                        })
                    })
                    .collect();
                Arc::new(out)
            }
            Op::ArrayLength => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let out = a
                    .iter()
                    .map(|a| match a.as_ref().map(|a| &a.value) {
                        Some(Value::Arr(items)) => Ok(Some(items.len() as i32)),
                        Some(_) => {
                            Err(sql_error("22023", "cannot get array length of a non-array"))
                        }
                        None => Ok(None),
                    })
                    .collect::<Result<Int32Array>>()?;
                Arc::new(out)
            }
            Op::Compare => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let b = operand_nodes(&fields[1], &arrays[1])?;
                let out: Int32Array = a
                    .iter()
                    .zip(&b)
                    .map(|(a, b)| Some(crate::json::compare(a.as_ref()?, b.as_ref()?) as i32))
                    .collect();
                Arc::new(out)
            }
            Op::Elements { text } => {
                let kind = kind_of(&fields[0]);
                let docs = texts(&arrays[0])?;
                let mut b = arrow::array::ListBuilder::new(arrow::array::StringBuilder::new());
                if !text {
                    b = b.with_field(Arc::new(kind.field("item", true)));
                }
                for doc in docs {
                    let Some(doc) = doc else {
                        b.append_null();
                        continue;
                    };
                    let node = crate::json::parse(&doc).map_err(df)?;
                    let Value::Arr(items) = &node.value else {
                        return Err(sql_error("22023", "cannot extract elements from a scalar"));
                    };
                    for v in items {
                        let shown = if text {
                            v.unquoted(kind, &doc)
                        } else {
                            let v = match kind {
                                Kind::Jsonb => v.clone().normalized(),
                                Kind::Json => v.clone(),
                            };
                            Some(v.text(kind, &doc))
                        };
                        b.values().append_option(shown);
                    }
                    b.append(true);
                }
                Arc::new(b.finish())
            }
            Op::Keys => {
                let docs = operand_nodes(&fields[0], &arrays[0])?;
                let mut b = arrow::array::ListBuilder::new(arrow::array::StringBuilder::new());
                for doc in docs {
                    match doc.map(|d| d.value) {
                        None => b.append_null(),
                        Some(Value::Obj(pairs)) => {
                            for (k, _) in pairs {
                                b.values().append_value(k);
                            }
                            b.append(true);
                        }
                        Some(_) => {
                            return Err(sql_error(
                                "22023",
                                "cannot call jsonb_object_keys on a non-object",
                            ));
                        }
                    }
                }
                Arc::new(b.finish())
            }
            Op::SortKey => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let out: arrow::array::BinaryArray = a
                    .iter()
                    .map(|a| a.as_ref().map(crate::json::sort_key))
                    .collect();
                Arc::new(out)
            }
            Op::Concat => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let b = operand_nodes(&fields[1], &arrays[1])?;
                let out: StringArray = a
                    .iter()
                    .zip(&b)
                    .map(|(a, b)| Some(crate::json::concat(a.as_ref()?, b.as_ref()?).jsonb_text()))
                    .collect();
                Arc::new(out)
            }
            Op::Delete | Op::DeletePath => {
                let a = operand_nodes(&fields[0], &arrays[0])?;
                let by_index = arrays[1].data_type().is_integer();
                let list =
                    matches!(arrays[1].data_type(), DataType::List(_)) || self.op == Op::DeletePath;
                let paths = if list {
                    string_lists(&arrays[1])?
                } else {
                    vec![]
                };
                let keys = if list { vec![] } else { texts(&arrays[1])? };
                let mut out = Vec::with_capacity(n);
                for (i, a) in a.iter().enumerate() {
                    let Some(a) = a else {
                        out.push(None);
                        continue;
                    };
                    let r = if self.op == Op::DeletePath {
                        paths[i].as_ref().map(|p| crate::json::remove_path(a, p))
                    } else if list {
                        paths[i].as_ref().map(|p| {
                            p.iter()
                                .flatten()
                                .try_fold(a.clone(), |acc, k| crate::json::remove_key(&acc, k))
                        })
                    } else if by_index {
                        keys[i].as_ref().map(|k| match k.parse::<i64>() {
                            Ok(i) => crate::json::remove_index(a, i),
                            Err(_) => crate::json::remove_key(a, k),
                        })
                    } else {
                        keys[i].as_ref().map(|k| crate::json::remove_key(a, k))
                    };
                    out.push(r.transpose().map_err(df)?.map(|n| n.jsonb_text()));
                }
                Arc::new(StringArray::from(out))
            }
            Op::Set => {
                let targets = operand_nodes(&fields[0], &arrays[0])?;
                let paths = string_lists(&arrays[1])?;
                let new = operand_nodes(&fields[2], &arrays[2])?;
                let create = match arrays.get(3) {
                    Some(c) => cast_bools(c)?,
                    None => vec![Some(true); n],
                };
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    let (Some(t), Some(p), Some(v), Some(c)) =
                        (&targets[i], &paths[i], &new[i], create[i])
                    else {
                        out.push(None);
                        continue;
                    };
                    let mut t = t.clone();
                    t.set(p, v, c).map_err(df)?;
                    out.push(Some(t.jsonb_text()));
                }
                Arc::new(StringArray::from(out))
            }
            Op::To(kind) => {
                let vals = value_nodes(&fields[0], &arrays[0], &zone(&self.settings))?;
                let out: StringArray = vals
                    .iter()
                    .map(|v| v.as_ref().map(|v| render(v, kind)))
                    .collect();
                Arc::new(out)
            }
            Op::BuildObject(kind) | Op::BuildArray(kind) => {
                let tz = zone(&self.settings);
                let cols = arrays
                    .iter()
                    .zip(fields)
                    .map(|(a, f)| value_nodes(f, a, &tz))
                    .collect::<Result<Vec<_>>>()?;
                let object = matches!(self.op, Op::BuildObject(_));
                if object && cols.len() % 2 == 1 {
                    return Err(sql_error(
                        "22023",
                        "argument list must have even number of elements",
                    ));
                }
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    let value = if object {
                        let mut pairs = vec![];
                        for kv in cols.chunks(2) {
                            let key =
                                object_key(&kv[0][i], "null value not allowed for object key")?;
                            pairs.push((key, kv[1][i].clone().unwrap_or(Value::Null.into())));
                        }
                        Value::Obj(pairs)
                    } else {
                        Value::Arr(
                            cols.iter()
                                .map(|c| c[i].clone().unwrap_or(Value::Null.into()))
                                .collect(),
                        )
                    };
                    out.push(Some(render(&value.into(), kind)));
                }
                Arc::new(StringArray::from(out))
            }
        };
        columnar(out, scalar)
    }
}

/// One step of a path: an object key or an array position.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(i64),
    Null,
}

impl JsonFn {
    /// The path of each row: `->`'s one key or position, `#>`'s `text[]`, or
    /// `jsonb_extract_path`'s further arguments.
    fn paths(&self, args: &[ArrayRef], n: usize) -> Result<Vec<Option<Vec<Step>>>> {
        let key = |a: &ArrayRef| -> Result<Vec<Option<Step>>> {
            Ok(match a.data_type() {
                DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32 => {
                    let c = arrow::compute::cast(a, &DataType::Int64)?;
                    c.as_primitive::<arrow::datatypes::Int64Type>()
                        .iter()
                        .map(|v| v.map(Step::Index))
                        .collect()
                }
                _ => texts(a)?.into_iter().map(|v| v.map(Step::Key)).collect(),
            })
        };
        match self.op {
            Op::Get { .. } => Ok(key(&args[0])?
                .into_iter()
                .map(|s| s.map(|s| vec![s]))
                .collect()),
            _ if self.name.ends_with("_op") => Ok(string_lists(&args[0])?
                .into_iter()
                .map(|p| {
                    p.map(|p| {
                        p.into_iter()
                            .map(|s| s.map_or(Step::Null, Step::Key))
                            .collect()
                    })
                })
                .collect()),
            _ => {
                let cols = args.iter().map(texts).collect::<Result<Vec<_>>>()?;
                Ok((0..n)
                    .map(|i| {
                        Some(
                            cols.iter()
                                .map(|c| c[i].clone().map_or(Step::Null, Step::Key))
                                .collect(),
                        )
                    })
                    .collect())
            }
        }
    }
}

/// The text of each value of a text column.
fn texts(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    let a = match a.data_type() {
        DataType::Utf8 => a.clone(),
        DataType::Null => return Ok(vec![None; a.len()]),
        _ => arrow::compute::cast(a, &DataType::Utf8)?,
    };
    Ok(a.as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect())
}

fn cast_bools(a: &ArrayRef) -> Result<Vec<Option<bool>>> {
    let a = arrow::compute::cast(a, &DataType::Boolean)?;
    Ok(a.as_boolean().iter().collect())
}

/// A `text[]` per row: an Arrow list, or PostgreSQL's array text (`'{a,b}'`).
fn string_lists(a: &ArrayRef) -> Result<Vec<Option<Vec<Option<String>>>>> {
    match a.data_type() {
        DataType::List(_) | DataType::LargeList(_) => {
            let a = arrow::compute::cast(
                a,
                &DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            )?;
            let l = a.as_list::<i32>();
            (0..l.len())
                .map(|i| {
                    if l.is_null(i) {
                        return Ok(None);
                    }
                    texts(&l.value(i)).map(Some)
                })
                .collect()
        }
        _ => texts(a)?
            .into_iter()
            .map(|v| v.map(|v| text_array(&v).map_err(df)).transpose())
            .collect(),
    }
}

/// The JSON text of an operand of a JSON type or text (a literal), converted to
/// `kind`'s text when it is the other JSON type.
fn operand_texts(a: &ArrayRef, kind: Kind) -> Result<Vec<Option<String>>> {
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {}
        other => {
            return Err(sql_error(
                "42846",
                &format!(
                    "cannot cast type {} to {}",
                    super::pgfuncs::pg_type_name(other),
                    kind.pg_name()
                ),
            ));
        }
    }
    texts(a)
}

/// Each value of a JSON operand parsed (text counts as JSON text).
fn operand_nodes(f: &Field, a: &ArrayRef) -> Result<Vec<Option<Node>>> {
    let kind = kind_of(f);
    operand_texts(a, kind)?
        .into_iter()
        .map(|v| {
            v.map(|t| crate::json::parse(&t).map(Node::normalized).map_err(df))
                .transpose()
        })
        .collect()
}

/// The JSON form of SQL values (`to_jsonb`): text is a string, numbers and
/// booleans are themselves, JSON values are nested, timestamps are ISO 8601
/// strings, arrays and rows become arrays and objects. NULL stays NULL.
fn value_nodes(f: &Field, a: &ArrayRef, tz: &str) -> Result<Vec<Option<Node>>> {
    if Kind::of(f).is_some() {
        return texts(a)?
            .into_iter()
            .map(|v| {
                // Spliced in as its text: `json` as written, `jsonb` as stored
                // (normalized); `jsonb` results normalize it again.
                v.map(|t| {
                    crate::json::parse(&t)
                        .map(|_| Node::from(Value::Raw(t)))
                        .map_err(df)
                })
                .transpose()
            })
            .collect();
    }
    let nulls = |a: &ArrayRef, vals: Vec<Option<Node>>| -> Vec<Option<Node>> {
        vals.into_iter()
            .enumerate()
            .map(|(i, v)| if a.is_null(i) { None } else { v })
            .collect()
    };
    Ok(match a.data_type() {
        DataType::Null => vec![None; a.len()],
        DataType::Boolean => a
            .as_boolean()
            .iter()
            .map(|v| v.map(|b| Value::Bool(b).into()))
            .collect(),
        dt if dt.is_numeric() => {
            let text = super::pgtext::text_column(f, a, tz)?;
            text.as_string::<i32>()
                .iter()
                .map(|v| {
                    v.map(|t| match t {
                        "NaN" | "Infinity" | "-Infinity" => Value::Str(t.to_string()).into(),
                        t => Value::Num(t.to_string()).into(),
                    })
                })
                .collect()
        }
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
            let text = super::pgtext::text_column(f, a, tz)?;
            text.as_string::<i32>()
                .iter()
                .map(|v| v.map(|t| Value::Str(iso_time(t)).into()))
                .collect()
        }
        DataType::List(inner) | DataType::LargeList(inner) => {
            let l = arrow::compute::cast(a, &DataType::List(inner.clone()))?;
            let l = l.as_list::<i32>();
            let mut out = Vec::with_capacity(l.len());
            for i in 0..l.len() {
                if l.is_null(i) {
                    out.push(None);
                    continue;
                }
                let items = value_nodes(inner, &l.value(i), tz)?;
                out.push(Some(
                    Value::Arr(
                        items
                            .into_iter()
                            .map(|v| v.unwrap_or(Value::Null.into()))
                            .collect(),
                    )
                    .into(),
                ));
            }
            out
        }
        DataType::Struct(fields) => {
            let s: &StructArray = a.as_struct();
            let cols = fields
                .iter()
                .zip(s.columns())
                .map(|(f, c)| value_nodes(f, c, tz))
                .collect::<Result<Vec<_>>>()?;
            let vals = (0..s.len())
                .map(|i| {
                    Some(
                        Value::Obj(
                            fields
                                .iter()
                                .zip(&cols)
                                .map(|(f, c)| {
                                    (f.name().clone(), c[i].clone().unwrap_or(Value::Null.into()))
                                })
                                .collect(),
                        )
                        .into(),
                    )
                })
                .collect();
            nulls(a, vals)
        }
        _ => {
            let text = super::pgtext::text_column(f, a, tz)?;
            text.as_string::<i32>()
                .iter()
                .map(|v| v.map(|t| Value::Str(t.to_string()).into()))
                .collect()
        }
    })
}

/// A timestamp's or date's text as JSON shows it: `T` between date and time, the
/// offset as `+hh:mm`.
fn iso_time(t: &str) -> String {
    let mut s = t.replacen(' ', "T", 1);
    if let Some(i) = s.rfind(['+', '-'])
        && i > 10
        && s.len() - i == 3
    {
        s.push_str(":00");
    }
    s
}

/// An object key from a SQL value: a string's or number's text, else its JSON
/// text; NULL is 22004 with PostgreSQL's message `null`.
fn object_key(v: &Option<Node>, null: &str) -> Result<String> {
    match v {
        Some(Node {
            value: Value::Str(s) | Value::Num(s),
            ..
        }) => Ok(s.clone()),
        Some(other) => Ok(other.jsonb_text()),
        None => Err(sql_error("22004", null)),
    }
}

/// The text of a built value: `jsonb` normalized, `json` as PostgreSQL's builders
/// write it (`{"a" : 1}` for json_build_object, rows and arrays compact).
fn render(v: &Node, kind: Kind) -> String {
    match kind {
        Kind::Jsonb => v.clone().normalized().jsonb_text(),
        Kind::Json => json_text(v, true),
    }
}

fn json_text(v: &Node, top: bool) -> String {
    match &v.value {
        Value::Raw(r) => r.clone(),
        Value::Obj(pairs) => {
            let (sep, colon) = if top { (", ", " : ") } else { (",", ":") };
            let parts: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}{colon}{}", quote(k), json_text(v, false)))
                .collect();
            format!("{{{}}}", parts.join(sep))
        }
        Value::Arr(items) => {
            let sep = if top { ", " } else { "," };
            let parts: Vec<String> = items.iter().map(|v| json_text(v, false)).collect();
            format!("[{}]", parts.join(sep))
        }
        _ => v.jsonb_text(),
    }
}

/// `json_agg` / `jsonb_agg` (`object`: `json_object_agg` / `jsonb_object_agg`).
#[derive(Debug)]
struct JsonAgg {
    name: &'static str,
    kind: Kind,
    object: bool,
    signature: Signature,
    settings: Settings,
}

impl PartialEq for JsonAgg {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name
    }
}
impl Eq for JsonAgg {}
impl std::hash::Hash for JsonAgg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl AggregateUDFImpl for JsonAgg {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field(&self, _: &[FieldRef]) -> Result<FieldRef> {
        Ok(Arc::new(self.kind.field(self.name, true)))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}_items", args.name),
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ))])
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(JsonAccumulator {
            kind: self.kind,
            object: self.object,
            fields: args.expr_fields.to_vec(),
            items: vec![],
            tz: zone(&self.settings),
        }))
    }
}

/// The elements so far, each as JSON text (objects: key and value in turn).
#[derive(Debug)]
struct JsonAccumulator {
    kind: Kind,
    object: bool,
    fields: Vec<FieldRef>,
    items: Vec<String>,
    tz: String,
}

impl Accumulator for JsonAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let cols = values
            .iter()
            .zip(&self.fields)
            .map(|(a, f)| value_nodes(f, a, &self.tz))
            .collect::<Result<Vec<_>>>()?;
        let rows = values.first().map_or(0, |a| a.len());
        for i in 0..rows {
            if self.object {
                let key = object_key(&cols[0][i], "field name must not be null")?;
                self.items.push(key);
            }
            let v = cols
                .get(usize::from(self.object))
                .and_then(|c| c[i].clone())
                .unwrap_or(Value::Null.into());
            self.items.push(match self.kind {
                Kind::Jsonb => v.normalized().jsonb_text(),
                Kind::Json => json_text(&v, false),
            });
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.items.is_empty() {
            return Ok(ScalarValue::Utf8(None));
        }
        let parse = |t: &String| -> Node {
            crate::json::parse(t)
                .map(Node::normalized)
                .unwrap_or_else(|_| Value::Str(t.clone()).into())
        };
        let text = match (self.kind, self.object) {
            (Kind::Jsonb, false) => {
                Node::from(Value::Arr(self.items.iter().map(parse).collect())).jsonb_text()
            }
            (Kind::Jsonb, true) => Node::from(Value::Obj(
                self.items
                    .chunks(2)
                    .map(|kv| (kv[0].clone(), parse(&kv[1])))
                    .collect(),
            ))
            .normalized()
            .jsonb_text(),
            (Kind::Json, false) => {
                let nested = self.fields.first().is_some_and(|f| {
                    matches!(f.data_type(), DataType::Struct(_) | DataType::List(_))
                });
                let sep = if nested { ", \n " } else { ", " };
                format!("[{}]", self.items.join(sep))
            }
            (Kind::Json, true) => {
                let parts: Vec<String> = self
                    .items
                    .chunks(2)
                    .map(|kv| format!("{} : {}", quote(&kv[0]), kv[1]))
                    .collect();
                format!("{{ {} }}", parts.join(", "))
            }
        };
        Ok(ScalarValue::Utf8(Some(text)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.items.iter().map(|s| s.capacity() + 24).sum::<usize>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let items: Vec<ScalarValue> = self
            .items
            .iter()
            .map(|t| ScalarValue::Utf8(Some(t.clone())))
            .collect();
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &items,
            &DataType::Utf8,
        ))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let l = states[0].as_list::<i32>();
        for i in 0..l.len() {
            if l.is_null(i) {
                continue;
            }
            for v in texts(&l.value(i))? {
                self.items.push(v.unwrap_or_default());
            }
        }
        Ok(())
    }
}

/// The list functions the select-list forms of `json(b)_array_elements`,
/// `json(b)_array_elements_text` and `json(b)_object_keys` are unnested from.
pub const SRF_ELEMENTS: &str = "sundial_json_elements";
pub const SRF_ELEMENTS_TEXT: &str = "sundial_json_elements_text";
pub const SRF_KEYS: &str = "sundial_json_keys";

/// The list function a set-returning JSON function in a select list unnests.
pub fn select_list_form(name: &str) -> Option<&'static str> {
    Some(match name {
        "jsonb_array_elements" | "json_array_elements" => SRF_ELEMENTS,
        "jsonb_array_elements_text" | "json_array_elements_text" => SRF_ELEMENTS_TEXT,
        "jsonb_object_keys" | "json_object_keys" => SRF_KEYS,
        _ => return None,
    })
}

/// The table functions over a JSON value (planned in FROM with a constant
/// argument).
pub const TABLE_FUNCTIONS: [&str; 8] = [
    "jsonb_each",
    "jsonb_each_text",
    "json_each",
    "json_each_text",
    "jsonb_array_elements",
    "jsonb_array_elements_text",
    "json_array_elements",
    "json_array_elements_text",
];

/// `jsonb_each`, `jsonb_each_text`, `jsonb_array_elements(_text)` and their
/// `json_` forms, in FROM: a row per member.
#[derive(Debug)]
struct Members {
    kind: Kind,
    object: bool,
    text: bool,
}

impl TableFunctionImpl for Members {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let [arg] = args else {
            return Err(sql_error(
                "42883",
                "function takes exactly one JSON argument",
            ));
        };
        let value =
            super::const_value(arg, &datafusion::execution::context::ExecutionProps::new())?;
        let doc = match &value {
            ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
                v.clone()
            }
            ScalarValue::Null => None,
            _ => {
                return Err(sql_error(
                    "42883",
                    "function takes a json or jsonb argument",
                ));
            }
        };
        let value_field = if self.text {
            Field::new("value", DataType::Utf8, true)
        } else {
            self.kind.field("value", true)
        };
        let mut keys = vec![];
        let mut vals = vec![];
        if let Some(doc) = doc {
            let node = crate::json::parse(&doc).map_err(df)?;
            let node = match self.kind {
                Kind::Jsonb => node.normalized(),
                Kind::Json => node,
            };
            let show = |v: &Node| {
                if self.text {
                    v.unquoted(self.kind, &doc)
                } else {
                    Some(v.text(self.kind, &doc))
                }
            };
            match (&node.value, self.object) {
                (Value::Obj(pairs), true) => {
                    for (k, v) in pairs {
                        keys.push(Some(k.clone()));
                        vals.push(show(v));
                    }
                }
                (Value::Arr(items), false) => vals.extend(items.iter().map(show)),
                (_, true) => {
                    return Err(sql_error("22023", "cannot call jsonb_each on a non-object"));
                }
                (_, false) => {
                    return Err(sql_error("22023", "cannot extract elements from a scalar"));
                }
            }
        }
        let mut fields = vec![];
        let mut cols: Vec<ArrayRef> = vec![];
        if self.object {
            fields.push(Field::new("key", DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from(keys)));
        }
        fields.push(value_field);
        cols.push(Arc::new(StringArray::from(vals)));
        let schema = Arc::new(Schema::new(fields));
        let batch = arrow::record_batch::RecordBatch::try_new(schema.clone(), cols)?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

/// Plans the JSON operators where the left operand's type is known, and casts
/// of literals beside a `jsonb` (`j = '{"a": 1}'` compares values).
#[derive(Debug)]
pub struct JsonOperators;

fn udf_call(ctx_fns: &[Arc<ScalarUDF>], name: &str, args: Vec<Expr>) -> Option<Expr> {
    ctx_fns
        .iter()
        .find(|f| f.name() == name)
        .map(|f| Expr::ScalarFunction(ScalarFunction::new_udf(f.clone(), args)))
}

impl ExprPlanner for JsonOperators {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if let Some(op) = comparison(&expr.op) {
            return compare_json(expr, op, schema);
        }
        if matches!(
            expr.op,
            BinaryOperator::StringConcat | BinaryOperator::Minus | BinaryOperator::HashMinus
        ) {
            return edit_jsonb(expr, schema);
        }
        let name = match expr.op {
            BinaryOperator::Arrow => "json_object_field",
            BinaryOperator::LongArrow => "json_object_field_text",
            BinaryOperator::HashArrow => "json_extract_path_op",
            BinaryOperator::HashLongArrow => "json_extract_path_text_op",
            BinaryOperator::AtArrow => "jsonb_contains",
            BinaryOperator::ArrowAt => "jsonb_contained",
            BinaryOperator::Question => "jsonb_exists",
            BinaryOperator::QuestionPipe => "jsonb_exists_any",
            BinaryOperator::QuestionAnd => "jsonb_exists_all",
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let field = |e: &Expr| json_field(e, schema);
        let (lf, rf) = (field(&expr.left), field(&expr.right));
        let lk = lf.as_ref().and_then(|f| Kind::of(f));
        let rk = rf.as_ref().and_then(|f| Kind::of(f));
        let json = match expr.op {
            BinaryOperator::AtArrow | BinaryOperator::ArrowAt => {
                lk.is_some() && rk.is_some()
                    || lk.is_some() && is_text_or_parameter(&expr.right)
                    || rk.is_some() && is_text_or_parameter(&expr.left)
            }
            _ => lk.is_some(),
        };
        // A parameter beside a JSON operand is `jsonb` (described so, read so).
        let mut expr = expr;
        if matches!(expr.op, BinaryOperator::AtArrow | BinaryOperator::ArrowAt) && json {
            for side in [&mut expr.left, &mut expr.right] {
                if let Expr::Placeholder(p) = side
                    && p.field.is_none()
                {
                    p.field = Some(Arc::new(Kind::Jsonb.field("", true)));
                }
            }
        }
        if !json {
            // Arrays keep DataFusion's `@>` and `<@`.
            if matches!(expr.op, BinaryOperator::AtArrow | BinaryOperator::ArrowAt) {
                return Ok(PlannerResult::Original(expr));
            }
            let ty = |f: &Option<FieldRef>| {
                f.as_ref().map_or("unknown".to_string(), |f| {
                    super::pgfuncs::pg_type_name(f.data_type()).to_string()
                })
            };
            return Err(sql_error(
                "42883",
                &format!(
                    "operator does not exist: {} {} {}",
                    ty(&lf),
                    expr.op,
                    ty(&rf)
                ),
            ));
        }
        if matches!(
            expr.op,
            BinaryOperator::AtArrow
                | BinaryOperator::ArrowAt
                | BinaryOperator::Question
                | BinaryOperator::QuestionPipe
                | BinaryOperator::QuestionAnd
        ) && lk == Some(Kind::Json)
        {
            return Err(sql_error(
                "42883",
                &format!("operator does not exist: json {} unknown", expr.op),
            ));
        }
        match udf_call(&JSON_FNS, name, vec![expr.left.clone(), expr.right.clone()]) {
            Some(e) => Ok(PlannerResult::Planned(e)),
            None => Ok(PlannerResult::Original(expr)),
        }
    }
}

/// `jsonb || jsonb` (with a `jsonb` or an untyped literal on the other side; a
/// typed text beside it is text concatenation, as in PostgreSQL), `jsonb - key`,
/// `jsonb #- path`.
fn edit_jsonb(expr: RawBinaryExpr, schema: &DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
    let field = |e: &Expr| json_field(e, schema);
    let lk = field(&expr.left).and_then(|f| Kind::of(&f));
    let rk = field(&expr.right).and_then(|f| Kind::of(&f));
    let name = match expr.op {
        BinaryOperator::StringConcat
            if lk == Some(Kind::Jsonb)
                && (rk == Some(Kind::Jsonb) || is_text_or_parameter(&expr.right))
                || rk == Some(Kind::Jsonb) && is_text_or_parameter(&expr.left) =>
        {
            "jsonb_concat"
        }
        BinaryOperator::Minus if lk == Some(Kind::Jsonb) => "jsonb_delete",
        BinaryOperator::HashMinus if lk == Some(Kind::Jsonb) => "jsonb_delete_path",
        BinaryOperator::Minus | BinaryOperator::HashMinus if lk == Some(Kind::Json) => {
            return Err(sql_error(
                "42883",
                &format!("operator does not exist: json {} unknown", expr.op),
            ));
        }
        _ => return Ok(PlannerResult::Original(expr)),
    };
    match udf_call(&JSON_FNS, name, vec![expr.left.clone(), expr.right.clone()]) {
        Some(e) => Ok(PlannerResult::Planned(e)),
        None => Ok(PlannerResult::Original(expr)),
    }
}

/// The comparison an operator is, if it is one.
fn comparison(op: &BinaryOperator) -> Option<datafusion::logical_expr::Operator> {
    use datafusion::logical_expr::Operator as O;
    Some(match op {
        BinaryOperator::Eq => O::Eq,
        BinaryOperator::NotEq => O::NotEq,
        BinaryOperator::Lt => O::Lt,
        BinaryOperator::LtEq => O::LtEq,
        BinaryOperator::Gt => O::Gt,
        BinaryOperator::GtEq => O::GtEq,
        _ => return None,
    })
}

/// `jsonb` compared by PostgreSQL's `jsonb` ordering (`'{"b":1,"a":2}'` equals the
/// stored `{"a": 2, "b": 1}`, `1.0` equals `1`); `json` has no comparison (42883).
fn compare_json(
    mut expr: RawBinaryExpr,
    op: datafusion::logical_expr::Operator,
    schema: &DFSchema,
) -> Result<PlannerResult<RawBinaryExpr>> {
    let field = |e: &Expr| json_field(e, schema);
    let (lf, rf) = (field(&expr.left), field(&expr.right));
    let lk = lf.as_ref().and_then(|f| Kind::of(f));
    let rk = rf.as_ref().and_then(|f| Kind::of(f));
    if lk.is_none() && rk.is_none() {
        return Ok(PlannerResult::Original(expr));
    }
    let name = |k: Option<Kind>, f: &Option<FieldRef>| match (k, f) {
        (Some(k), _) => k.pg_name().to_string(),
        (None, Some(f)) if !matches!(f.data_type(), DataType::Null) => {
            super::pgfuncs::pg_type_name(f.data_type()).to_string()
        }
        _ => "unknown".to_string(),
    };
    let other_ok = |k: Option<Kind>, e: &Expr| {
        k == Some(Kind::Jsonb) || k.is_none() && is_text_or_parameter(e)
    };
    let ok = lk != Some(Kind::Json)
        && rk != Some(Kind::Json)
        && other_ok(lk, &expr.left)
        && other_ok(rk, &expr.right);
    if !ok {
        return Err(sql_error(
            "42883",
            &format!(
                "operator does not exist: {} {} {}",
                name(lk, &lf),
                expr.op,
                name(rk, &rf)
            ),
        ));
    }
    for side in [&mut expr.left, &mut expr.right] {
        if let Expr::Placeholder(p) = side
            && p.field.is_none()
        {
            p.field = Some(Arc::new(Kind::Jsonb.field("", true)));
        }
    }
    let Some(cmp) = udf_call(
        &JSON_FNS,
        "jsonb_cmp",
        vec![expr.left.clone(), expr.right.clone()],
    ) else {
        return Ok(PlannerResult::Original(expr));
    };
    Ok(PlannerResult::Planned(Expr::BinaryExpr(
        datafusion::logical_expr::BinaryExpr::new(
            Box::new(cmp),
            op,
            Box::new(Expr::Literal(ScalarValue::Int32(Some(0)), None)),
        ),
    )))
}

/// The field of an operand that can be of a JSON type: arithmetic and literals
/// never are, so long operator chains (`7 - 7 - … - 7`) are not typed again at
/// every level.
fn json_field(e: &Expr, schema: &DFSchema) -> Option<FieldRef> {
    if matches!(e, Expr::BinaryExpr(_) | Expr::Literal(..)) {
        return None;
    }
    e.to_field(schema).ok().map(|(_, f)| f)
}

fn is_text_or_parameter(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Literal(
            ScalarValue::Utf8(_) | ScalarValue::Utf8View(_) | ScalarValue::LargeUtf8(_),
            _
        ) | Expr::Placeholder(_)
    )
}

/// The operator functions (they read no session setting).
static JSON_FNS: std::sync::LazyLock<Vec<Arc<ScalarUDF>>> = std::sync::LazyLock::new(operator_fns);

fn operator_fns() -> Vec<Arc<ScalarUDF>> {
    let settings: Settings = Default::default();
    [
        ("json_object_field", Op::Get { text: false }),
        ("json_object_field_text", Op::Get { text: true }),
        ("json_extract_path_op", Op::Path { text: false }),
        ("json_extract_path_text_op", Op::Path { text: true }),
        ("jsonb_contains", Op::Contains),
        ("jsonb_contained", Op::Contained),
        ("jsonb_exists", Op::Exists),
        ("jsonb_exists_any", Op::ExistsAny),
        ("jsonb_exists_all", Op::ExistsAll),
        ("jsonb_cmp", Op::Compare),
        ("jsonb_concat", Op::Concat),
        ("jsonb_sort_key", Op::SortKey),
        ("jsonb_delete", Op::Delete),
        ("jsonb_delete_path", Op::DeletePath),
    ]
    .into_iter()
    .map(|(name, op)| {
        Arc::new(ScalarUDF::new_from_impl(JsonFn {
            name,
            op,
            signature: Signature::any(if op == Op::SortKey { 1 } else { 2 }, Volatility::Immutable),
            settings: settings.clone(),
        }))
    })
    .collect()
}

/// Casts to `json` / `jsonb` (which DataFusion would make a text-to-text cast)
/// become `json_in` / `jsonb_in`, which parse and normalize.
#[derive(Debug)]
pub struct JsonCasts {
    json_in: Arc<ScalarUDF>,
    jsonb_in: Arc<ScalarUDF>,
}

/// `ORDER BY` a `jsonb` sorts by [`crate::json::sort_key`], PostgreSQL's `jsonb`
/// order (not the text's).
#[derive(Debug)]
pub struct JsonOrder;

impl AnalyzerRule for JsonOrder {
    fn name(&self) -> &str {
        "sundial_json_order"
    }

    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        let Some(key) = JSON_FNS
            .iter()
            .find(|f| f.name() == "jsonb_sort_key")
            .cloned()
        else {
            return Ok(plan);
        };
        let out = plan.transform_up_with_subqueries(|node| {
            let LogicalPlan::Sort(mut sort) = node else {
                return Ok(Transformed::no(node));
            };
            let schema = sort.input.schema().clone();
            let mut changed = false;
            for s in sort.expr.iter_mut() {
                let jsonb = s
                    .expr
                    .to_field(&schema)
                    .is_ok_and(|(_, f)| Kind::of(&f) == Some(Kind::Jsonb));
                if jsonb {
                    s.expr = Expr::ScalarFunction(ScalarFunction::new_udf(
                        key.clone(),
                        vec![s.expr.clone()],
                    ));
                    changed = true;
                }
            }
            Ok(if changed {
                Transformed::yes(LogicalPlan::Sort(sort))
            } else {
                Transformed::no(LogicalPlan::Sort(sort))
            })
        })?;
        Ok(out.data)
    }
}

impl AnalyzerRule for JsonCasts {
    fn name(&self) -> &str {
        "sundial_json_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        let out = plan.transform_up_with_subqueries(|node| {
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let rewritten = e.transform_up(|e| {
                    let (inner, field) = match &e {
                        Expr::Cast(Cast { expr, field })
                        | Expr::TryCast(TryCast { expr, field }) => (expr, field),
                        _ => return Ok(Transformed::no(e)),
                    };
                    let Some(kind) = Kind::of(field) else {
                        return Ok(Transformed::no(e));
                    };
                    let f = match kind {
                        Kind::Json => &self.json_in,
                        Kind::Jsonb => &self.jsonb_in,
                    };
                    Ok(Transformed::yes(Expr::ScalarFunction(
                        ScalarFunction::new_udf(f.clone(), vec![inner.as_ref().clone()]),
                    )))
                })?;
                Ok(rewritten.update_data(|e| saved.restore(e)))
            })
        })?;
        Ok(out.data)
    }
}

/// The `json` or `jsonb` field of a type name (the type planner's).
pub fn type_field(t: &datafusion::sql::sqlparser::ast::DataType) -> Option<FieldRef> {
    use datafusion::sql::sqlparser::ast::DataType as T;
    match t {
        T::JSON => Some(Arc::new(Kind::Json.field("", true))),
        T::JSONB => Some(Arc::new(Kind::Jsonb.field("", true))),
        T::Custom(name, mods) if mods.is_empty() => {
            match name.to_string().to_ascii_lowercase().as_str() {
                "json" => Some(Arc::new(Kind::Json.field("", true))),
                "jsonb" => Some(Arc::new(Kind::Jsonb.field("", true))),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Registers the functions, aggregates, table functions, the operator planner and
/// the cast rule.
pub fn register(ctx: &SessionContext, settings: Settings) {
    let mk = |name: &'static str, op: Op, signature: Signature| {
        Arc::new(ScalarUDF::new_from_impl(JsonFn {
            name,
            op,
            signature,
            settings: settings.clone(),
        }))
    };
    let any = |n| Signature::any(n, Volatility::Immutable);
    let variadic = || {
        Signature::one_of(
            vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
            Volatility::Stable,
        )
    };
    let json_in = mk("json_in", Op::In(Kind::Json), any(1));
    let jsonb_in = mk("jsonb_in", Op::In(Kind::Jsonb), any(1));
    let mut fns = vec![json_in.clone(), jsonb_in.clone()];
    fns.extend(JSON_FNS.iter().cloned());
    for (name, op, sig) in [
        ("jsonb_typeof", Op::Typeof, any(1)),
        ("json_typeof", Op::Typeof, any(1)),
        ("jsonb_pretty", Op::Pretty, any(1)),
        (SRF_ELEMENTS, Op::Elements { text: false }, any(1)),
        (SRF_ELEMENTS_TEXT, Op::Elements { text: true }, any(1)),
        (SRF_KEYS, Op::Keys, any(1)),
        ("jsonb_array_length", Op::ArrayLength, any(1)),
        ("json_array_length", Op::ArrayLength, any(1)),
        (
            "jsonb_set",
            Op::Set,
            Signature::one_of(
                vec![TypeSignature::Any(3), TypeSignature::Any(4)],
                Volatility::Immutable,
            ),
        ),
        (
            "to_jsonb",
            Op::To(Kind::Jsonb),
            Signature::any(1, Volatility::Stable),
        ),
        (
            "to_json",
            Op::To(Kind::Json),
            Signature::any(1, Volatility::Stable),
        ),
        (
            "jsonb_build_object",
            Op::BuildObject(Kind::Jsonb),
            variadic(),
        ),
        ("json_build_object", Op::BuildObject(Kind::Json), variadic()),
        ("jsonb_build_array", Op::BuildArray(Kind::Jsonb), variadic()),
        ("json_build_array", Op::BuildArray(Kind::Json), variadic()),
        (
            "jsonb_extract_path",
            Op::Path { text: false },
            Signature::variadic_any(Volatility::Immutable),
        ),
        (
            "jsonb_extract_path_text",
            Op::Path { text: true },
            Signature::variadic_any(Volatility::Immutable),
        ),
        (
            "json_extract_path",
            Op::Path { text: false },
            Signature::variadic_any(Volatility::Immutable),
        ),
        (
            "json_extract_path_text",
            Op::Path { text: true },
            Signature::variadic_any(Volatility::Immutable),
        ),
    ] {
        fns.push(mk(name, op, sig));
    }
    for f in fns {
        ctx.register_udf(f.as_ref().clone());
    }
    for (name, kind, object, n) in [
        ("json_agg", Kind::Json, false, 1),
        ("jsonb_agg", Kind::Jsonb, false, 1),
        ("json_object_agg", Kind::Json, true, 2),
        ("jsonb_object_agg", Kind::Jsonb, true, 2),
    ] {
        ctx.register_udaf(AggregateUDF::new_from_impl(JsonAgg {
            name,
            kind,
            object,
            signature: Signature::any(n, Volatility::Stable),
            settings: settings.clone(),
        }));
    }
    for name in TABLE_FUNCTIONS {
        let kind = if name.starts_with("jsonb") {
            Kind::Jsonb
        } else {
            Kind::Json
        };
        let members = Members {
            kind,
            object: name.contains("_each"),
            text: name.ends_with("_text"),
        };
        ctx.register_udtf(name, Arc::new(members));
    }
    ctx.add_analyzer_rule(Arc::new(JsonCasts { json_in, jsonb_in }));
    ctx.add_analyzer_rule(Arc::new(JsonOrder));
}
