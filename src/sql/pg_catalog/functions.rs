//! PostgreSQL's catalog functions that psql, pgjdbc, Grafana and SQLAlchemy call
//! (`format_type`, `pg_get_userbyid`, `pg_table_is_visible`, `quote_ident`, ...),
//! plus the helpers the SQL normalizer turns `::regclass`/`::regtype` casts into.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int32Array, Int64Array, ListBuilder, StringArray,
    StringBuilder,
};
use arrow::datatypes::{DataType, Field};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

use super::{self as pgc, CatalogCtx, PROCS, Rel, relations};
use crate::sql::functions::columnar;

/// How an argument is coerced before the function sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum K {
    /// An oid or integer: `Int64`.
    O,
    /// Text: `Utf8`.
    S,
    /// `Boolean`.
    B,
    /// Left as it is.
    A,
}

type Body = dyn Fn(&[ArrayRef], usize) -> Result<ArrayRef> + Send + Sync;

/// A catalog function: argument kinds, arity range, result type and body.
struct Meta {
    name: &'static str,
    kinds: &'static [K],
    min_args: usize,
    ret: DataType,
    body: Arc<Body>,
    signature: Signature,
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta").field("name", &self.name).finish()
    }
}

impl PartialEq for Meta {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name && Arc::ptr_eq(&self.body, &o.body)
    }
}
impl Eq for Meta {}
impl Hash for Meta {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.name.hash(h)
    }
}

fn sql_err(code: &'static str, msg: String) -> DataFusionError {
    crate::Error::sql(code, msg).into()
}

impl ScalarUDFImpl for Meta {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.ret.clone())
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() < self.min_args || arg_types.len() > self.kinds.len() {
            return Err(sql_err(
                "42883",
                format!(
                    "function {}() with {} arguments does not exist",
                    self.name,
                    arg_types.len()
                ),
            ));
        }
        Ok(arg_types
            .iter()
            .zip(self.kinds)
            .map(|(t, k)| match k {
                K::O => DataType::Int64,
                K::S => DataType::Utf8,
                K::B => DataType::Boolean,
                K::A => match t {
                    DataType::Null => DataType::Utf8,
                    other => other.clone(),
                },
            })
            .collect())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if scalar { 1 } else { args.number_rows };
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let out = (self.body)(&arrays, n)?;
        columnar(out, scalar)
    }
}

fn udf(
    name: &'static str,
    kinds: &'static [K],
    min_args: usize,
    ret: DataType,
    volatility: Volatility,
    body: impl Fn(&[ArrayRef], usize) -> Result<ArrayRef> + Send + Sync + 'static,
) -> ScalarUDF {
    ScalarUDF::from(Meta {
        name,
        kinds,
        min_args,
        ret,
        body: Arc::new(body),
        signature: Signature::user_defined(volatility),
    })
}

/// Values of an Int64 (coerced) argument.
fn ints(a: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let a = arrow::compute::cast(a, &DataType::Int64)?;
    let a = a.as_primitive::<arrow::datatypes::Int64Type>();
    Ok((0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect())
}

/// Values of a text (coerced) argument.
fn strs(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    let a = arrow::compute::cast(a, &DataType::Utf8)?;
    let a = a.as_string::<i32>();
    Ok((0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
        .collect())
}

fn text_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

/// A function of one oid argument returning text.
fn oid_to_text(
    name: &'static str,
    kinds: &'static [K],
    f: impl Fn(i64) -> Option<String> + Send + Sync + 'static,
) -> ScalarUDF {
    udf(
        name,
        kinds,
        1,
        DataType::Utf8,
        Volatility::Stable,
        move |a, _| {
            let out: StringArray = ints(&a[0])?.into_iter().map(|o| o.and_then(&f)).collect();
            Ok(Arc::new(out))
        },
    )
}

/// A function that is NULL for every input (no such objects in Sundial).
/// The database's `COMMENT ON` texts and its relations (for their oids).
fn comments_and_relations(
    c: &CatalogCtx,
) -> (std::collections::BTreeMap<String, String>, Vec<Rel>) {
    let m = c.engine.catalog().snapshot();
    let comments = m
        .database(&c.db)
        .map(|d| d.comments.clone())
        .unwrap_or_default();
    (comments, relations(c))
}

fn always_null(name: &'static str, kinds: &'static [K], min: usize, ret: DataType) -> ScalarUDF {
    udf(
        name,
        kinds,
        min,
        ret.clone(),
        Volatility::Stable,
        move |_, n| Ok(arrow::array::new_null_array(&ret, n)),
    )
}

/// A function that is a constant boolean for every non-NULL first argument.
fn always_bool(name: &'static str, kinds: &'static [K], min: usize, value: bool) -> ScalarUDF {
    udf(
        name,
        kinds,
        min,
        DataType::Boolean,
        Volatility::Stable,
        move |a, n| {
            let out: BooleanArray = (0..n)
                .map(|i| a.first().is_none_or(|x| x.is_valid(i)).then_some(value))
                .collect();
            Ok(Arc::new(out))
        },
    )
}

pub use crate::pgident::quote_ident;

/// PostgreSQL 15's `pg_size_pretty(bigint)`.
pub fn size_pretty(bytes: i64) -> String {
    // (name, limit, half-rounded, bits) as in PostgreSQL's dbsize.c
    const UNITS: [(&str, i64, bool, u32); 6] = [
        ("bytes", 10 * 1024, false, 0),
        ("kB", 20 * 1024 - 1, true, 10),
        ("MB", 20 * 1024 - 1, true, 20),
        ("GB", 20 * 1024 - 1, true, 30),
        ("TB", 20 * 1024 - 1, true, 40),
        ("PB", 20 * 1024 - 1, true, 50),
    ];
    let mut size = bytes;
    for (i, (name, limit, round, bits)) in UNITS.iter().enumerate() {
        let next = UNITS.get(i + 1);
        if next.is_none() || size.unsigned_abs() < limit.unsigned_abs() {
            if *round {
                size = (size + if size < 0 { -1 } else { 1 }) / 2;
            }
            return format!("{size} {name}");
        }
        if let Some((_, _, next_round, next_bits)) = next {
            let shift = next_bits - bits - u32::from(*next_round) + u32::from(*round);
            size /= 1i64 << shift;
        }
    }
    format!("{size} PB")
}

/// The relation name `::regclass` prints: qualified unless visible.
fn regclass_name(rels: &[Rel], oid: i64) -> String {
    match rels.iter().find(|r| i64::from(r.oid) == oid) {
        Some(r) => {
            let visible = pgc::is_visible(rels, oid);
            if visible {
                quote_ident(&r.name)
            } else {
                format!(
                    "{}.{}",
                    quote_ident(pgc::namespace_name(i64::from(r.ns)).unwrap_or("")),
                    quote_ident(&r.name)
                )
            }
        }
        None => oid.to_string(),
    }
}

/// Registers the catalog functions on a connection's context.
pub fn register(ctx: &SessionContext, cat: Arc<CatalogCtx>) {
    use DataType::{Boolean, Int32, Int64, Utf8};
    use K::*;
    ctx.register_udtf("pg_partition_ancestors", Arc::new(PartitionAncestors));
    let mut fns: Vec<ScalarUDF> = vec![];

    let c = cat.clone();
    fns.push(udf(
        "pg_table_is_visible",
        &[O],
        1,
        Boolean,
        Volatility::Stable,
        move |a, _| {
            let rels = relations(&c);
            let out: BooleanArray = ints(&a[0])?
                .into_iter()
                .map(|o| o.map(|o| pgc::is_visible(&rels, o)))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    for name in [
        "pg_function_is_visible",
        "pg_type_is_visible",
        "pg_collation_is_visible",
        "pg_conversion_is_visible",
        "pg_opclass_is_visible",
        "pg_operator_is_visible",
        "pg_opfamily_is_visible",
        "pg_statistics_obj_is_visible",
        "pg_ts_config_is_visible",
    ] {
        fns.push(always_bool(name, &[O], 1, true));
    }
    fns.push(udf(
        "format_type",
        &[O, O],
        2,
        Utf8,
        Volatility::Stable,
        |a, _| {
            let oids = ints(&a[0])?;
            let mods = ints(&a[1])?;
            let out: StringArray = oids
                .into_iter()
                .zip(mods)
                .map(|(o, m)| o.map(|o| pgc::format_type(o, m).unwrap_or_else(|| "???".into())))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    let c = cat.clone();
    fns.push(oid_to_text("pg_get_userbyid", &[O], move |o| {
        Some(c.role_name(o))
    }));
    fns.push(oid_to_text("pg_encoding_to_char", &[O], |o| {
        Some(
            match o {
                0 => "SQL_ASCII",
                6 => "UTF8",
                _ => "",
            }
            .to_string(),
        )
    }));
    fns.push(udf(
        "pg_get_expr",
        &[S, O, B],
        2,
        Utf8,
        Volatility::Stable,
        |a, _| {
            let out: StringArray = strs(&a[0])?.into_iter().collect();
            Ok(Arc::new(out))
        },
    ));
    // COMMENT ON, by relation oid (and column number).
    let c = cat.clone();
    fns.push(udf(
        "obj_description",
        &[O, S],
        1,
        Utf8,
        Volatility::Stable,
        move |a, n| {
            let oids = ints(&a[0])?;
            let kinds = match a.get(1) {
                Some(k) => strs(k)?,
                None => vec![Some("pg_class".to_string()); n],
            };
            let (comments, rels) = comments_and_relations(&c);
            let out: StringArray = oids
                .iter()
                .zip(kinds)
                .map(|(o, k)| {
                    let o = (*o)?;
                    if k.as_deref() != Some("pg_class") {
                        return None;
                    }
                    let r = rels.iter().find(|r| i64::from(r.oid) == o)?;
                    comments
                        .get(&crate::catalog::comment_key(&r.name, None))
                        .cloned()
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    let c = cat.clone();
    fns.push(udf(
        "col_description",
        &[O, O],
        2,
        Utf8,
        Volatility::Stable,
        move |a, _| {
            let oids = ints(&a[0])?;
            let nums = ints(&a[1])?;
            let (comments, rels) = comments_and_relations(&c);
            let out: StringArray = oids
                .iter()
                .zip(&nums)
                .map(|(o, num)| {
                    let (o, num) = ((*o)?, (*num)?);
                    let r = rels.iter().find(|r| i64::from(r.oid) == o)?;
                    let att = r.atts.get(usize::try_from(num).ok()?.checked_sub(1)?)?;
                    comments
                        .get(&crate::catalog::comment_key(&r.name, Some(&att.name)))
                        .cloned()
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(always_null("shobj_description", &[O, S], 2, Utf8));
    // In a select list (psql's "Referenced by"): the one ancestor, the table itself.
    fns.push(udf(
        "pg_partition_ancestors",
        &[O],
        1,
        Int32,
        Volatility::Stable,
        move |a, _| Ok(arrow::compute::cast(&a[0], &Int32)?),
    ));
    let c = cat.clone();
    fns.push(udf(
        "pg_get_constraintdef",
        &[O, A],
        1,
        Utf8,
        Volatility::Stable,
        move |a, _| {
            let oids = ints(&a[0])?;
            let pretty = match a.get(1) {
                Some(p) => strs(p)?,
                None => vec![None; oids.len()],
            };
            let all = super::constraints(&c);
            let out: StringArray = oids
                .iter()
                .zip(pretty)
                .map(|(o, p)| {
                    let k = all.iter().find(|k| Some(i64::from(k.oid)) == *o)?;
                    let pretty = p.is_some_and(|p| p == "true" || p == "t");
                    Some(if pretty {
                        k.pretty.clone()
                    } else {
                        k.def.clone()
                    })
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    for name in ["pg_get_indexdef", "pg_get_triggerdef", "pg_get_ruledef"] {
        fns.push(always_null(name, &[A, A, A], 1, Utf8));
    }
    for name in [
        "pg_get_statisticsobjdef_columns",
        "pg_get_partkeydef",
        "pg_get_function_sqlbody",
    ] {
        fns.push(always_null(name, &[O], 1, Utf8));
    }
    fns.push(always_bool("pg_relation_is_publishable", &[A], 1, false));
    for name in [
        "has_table_privilege",
        "has_schema_privilege",
        "has_database_privilege",
        "has_column_privilege",
        "has_function_privilege",
        "has_sequence_privilege",
        "has_type_privilege",
        "has_any_column_privilege",
    ] {
        fns.push(always_bool(name, &[A, A, A, A], 2, true));
    }
    fns.push(always_bool("pg_is_other_temp_schema", &[O], 1, false));
    // pg_get_viewdef(view oid [, pretty]): the stored definition, as psql's \d+ shows it.
    let c = cat.clone();
    fns.push(udf(
        "pg_get_viewdef",
        &[O, A],
        1,
        Utf8,
        Volatility::Stable,
        move |a, _| {
            let m = c.engine.catalog().snapshot();
            let views: Vec<(i64, String)> = m
                .database(&c.db)
                .map(|d| {
                    d.views
                        .values()
                        .map(|v| (i64::from(super::table_oid(v.id)), format!(" {};", v.sql)))
                        .collect()
                })
                .unwrap_or_default();
            let out: StringArray = ints(&a[0])?
                .into_iter()
                .map(|o| {
                    let o = o?;
                    views
                        .iter()
                        .find(|(oid, _)| *oid == o)
                        .map(|(_, d)| d.clone())
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    let c = cat.clone();
    let size = move |a: &[ArrayRef], _: usize| -> Result<ArrayRef> {
        let rels = relations(&c);
        let out: Int64Array = ints(&a[0])?
            .into_iter()
            .map(|o| {
                let o = o?;
                c.table_size(o)
                    .or_else(|| rels.iter().any(|r| i64::from(r.oid) == o).then_some(0))
            })
            .collect();
        Ok(Arc::new(out))
    };
    let size = Arc::new(size);
    for name in [
        "pg_table_size",
        "pg_total_relation_size",
        "pg_relation_size",
    ] {
        let size = size.clone();
        fns.push(udf(
            name,
            &[O, S],
            1,
            Int64,
            Volatility::Stable,
            move |a, n| size(a, n),
        ));
    }
    let c = cat.clone();
    fns.push(udf(
        "pg_database_size",
        &[S],
        1,
        Int64,
        Volatility::Stable,
        move |a, _| {
            let m = c.engine.catalog().snapshot();
            let out: Int64Array = strs(&a[0])?
                .into_iter()
                .map(|name| {
                    let name = name?;
                    let db = m.databases.iter().find(|(n, d)| {
                        **n == name || pgc::database_oid(d.id).to_string() == name
                    })?;
                    Some(
                        db.1.tables
                            .values()
                            .flat_map(|t| t.files.iter())
                            .map(|f| i64::try_from(f.bytes).unwrap_or(i64::MAX))
                            .sum(),
                    )
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(udf(
        "pg_char_to_encoding",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        |a, _| {
            let out: Int32Array = strs(&a[0])?
                .into_iter()
                .map(|e| {
                    e.map(
                        |e| match e.to_ascii_uppercase().replace(['-', '_'], "").as_str() {
                            "UTF8" | "UNICODE" => 6,
                            "SQLASCII" => 0,
                            _ => -1,
                        },
                    )
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(udf(
        "pg_size_pretty",
        &[O],
        1,
        Utf8,
        Volatility::Immutable,
        |a, _| {
            let out: StringArray = ints(&a[0])?
                .into_iter()
                .map(|b| b.map(size_pretty))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(oid_to_text("pg_get_function_result", &[O], |o| {
        pgc::proc_by_oid(o).map(|p| p.result.to_string())
    }));
    for name in [
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
    ] {
        fns.push(oid_to_text(name, &[O], |o| {
            pgc::proc_by_oid(o).map(|p| p.args.to_string())
        }));
    }
    fns.push(udf(
        "current_schemas",
        &[B],
        1,
        text_list(),
        Volatility::Stable,
        |a, n| {
            let implicit = a[0].as_boolean();
            let mut b = ListBuilder::new(StringBuilder::new());
            for i in 0..n {
                if implicit.is_null(i) {
                    b.append_null();
                    continue;
                }
                if implicit.value(i) {
                    b.values().append_value("pg_catalog");
                }
                b.values().append_value("public");
                b.append(true);
            }
            Ok(Arc::new(b.finish()))
        },
    ));
    fns.push(udf(
        "quote_ident",
        &[S],
        1,
        Utf8,
        Volatility::Immutable,
        |a, _| {
            let out: StringArray = strs(&a[0])?
                .into_iter()
                .map(|s| s.map(|s| quote_ident(&s)))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(udf(
        "quote_literal",
        &[S],
        1,
        Utf8,
        Volatility::Immutable,
        |a, _| {
            let out: StringArray = strs(&a[0])?
                .into_iter()
                .map(|s| {
                    s.map(|s| {
                        let q = s.replace('\'', "''");
                        if s.contains('\\') {
                            format!("E'{}'", q.replace('\\', "\\\\"))
                        } else {
                            format!("'{q}'")
                        }
                    })
                })
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(udf(
        "parse_ident",
        &[S, B],
        1,
        text_list(),
        Volatility::Immutable,
        |a, _| {
            let mut b = ListBuilder::new(StringBuilder::new());
            for s in strs(&a[0])? {
                match s {
                    None => b.append_null(),
                    Some(s) => {
                        let parts = pgc::parse_ident(&s).ok_or_else(|| {
                            sql_err(
                                "22023",
                                format!("string is not a valid identifier: \"{s}\""),
                            )
                        })?;
                        for p in parts {
                            b.values().append_value(p);
                        }
                        b.append(true);
                    }
                }
            }
            Ok(Arc::new(b.finish()))
        },
    ));
    for (name, upper) in [("array_lower", false), ("array_upper", true)] {
        fns.push(udf(
            name,
            &[A, O],
            2,
            Int32,
            Volatility::Immutable,
            move |a, n| {
                let dims = ints(&a[1])?;
                let lens: Vec<Option<usize>> = match a[0].data_type() {
                    DataType::List(_) => {
                        let l = a[0].as_list::<i32>();
                        (0..n)
                            .map(|i| l.is_valid(i).then(|| l.value(i).len()))
                            .collect()
                    }
                    DataType::LargeList(_) => {
                        let l = a[0].as_list::<i64>();
                        (0..n)
                            .map(|i| l.is_valid(i).then(|| l.value(i).len()))
                            .collect()
                    }
                    DataType::Null => vec![None; n],
                    other => {
                        return Err(sql_err(
                            "42883",
                            format!("function {name}({other}, integer) does not exist"),
                        ));
                    }
                };
                let out: Int32Array = lens
                    .into_iter()
                    .zip(dims)
                    .map(|(len, d)| match (len, d) {
                        (Some(len), Some(1)) if len > 0 => Some(if upper {
                            i32::try_from(len).unwrap_or(i32::MAX)
                        } else {
                            1
                        }),
                        _ => None,
                    })
                    .collect();
                Ok(Arc::new(out))
            },
        ));
    }
    fns.push(udf(
        "to_regtype",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        |a, _| {
            let out: Int32Array = strs(&a[0])?
                .into_iter()
                .map(|s| s.and_then(|s| pgc::type_by_name(&s)).map(|t| t.oid))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    let c = cat.clone();
    fns.push(udf(
        "to_regclass",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        move |a, _| {
            let out: Int32Array = strs(&a[0])?
                .into_iter()
                .map(|s| s.and_then(|s| c.relation_by_name(&s)).map(|r| r.oid))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(udf(
        "to_regnamespace",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        |a, _| {
            let out: Int32Array = strs(&a[0])?
                .into_iter()
                .map(|s| s.and_then(|s| namespace_oid(&s)))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    // `'name'::regclass` and friends (the normalizer rewrites casts of literals).
    let c = cat.clone();
    fns.push(udf(
        "sundial_regclass_in",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        move |a, _| {
            let mut out = Vec::new();
            for s in strs(&a[0])? {
                out.push(match s {
                    None => None,
                    Some(s) => Some(match s.trim().parse::<i32>() {
                        Ok(o) => o,
                        Err(_) => c.relation_by_name(&s).map(|r| r.oid).ok_or_else(|| {
                            sql_err("42P01", format!("relation \"{s}\" does not exist"))
                        })?,
                    }),
                });
            }
            Ok(Arc::new(Int32Array::from(out)))
        },
    ));
    fns.push(udf(
        "sundial_regtype_in",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        |a, _| {
            let mut out = Vec::new();
            for s in strs(&a[0])? {
                out.push(match s {
                    None => None,
                    Some(s) => Some(match s.trim().parse::<i32>() {
                        Ok(o) => o,
                        Err(_) => pgc::type_by_name(&s).map(|t| t.oid).ok_or_else(|| {
                            sql_err("42704", format!("type \"{s}\" does not exist"))
                        })?,
                    }),
                });
            }
            Ok(Arc::new(Int32Array::from(out)))
        },
    ));
    fns.push(udf(
        "sundial_regnamespace_in",
        &[S],
        1,
        Int32,
        Volatility::Stable,
        |a, _| {
            let mut out = Vec::new();
            for s in strs(&a[0])? {
                out.push(match s {
                    None => None,
                    Some(s) => Some(match s.trim().parse::<i32>() {
                        Ok(o) => o,
                        Err(_) => namespace_oid(&s).ok_or_else(|| {
                            sql_err("3F000", format!("schema \"{s}\" does not exist"))
                        })?,
                    }),
                });
            }
            Ok(Arc::new(Int32Array::from(out)))
        },
    ));
    let c = cat.clone();
    fns.push(udf(
        "sundial_regclass_out",
        &[O],
        1,
        Utf8,
        Volatility::Stable,
        move |a, _| {
            let rels = relations(&c);
            let out: StringArray = ints(&a[0])?
                .into_iter()
                .map(|o| o.map(|o| regclass_name(&rels, o)))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(oid_to_text("sundial_regtype_out", &[O], |o| {
        Some(pgc::format_type(o, None).unwrap_or_else(|| o.to_string()))
    }));
    fns.push(oid_to_text("sundial_regnamespace_out", &[O], |o| {
        Some(
            pgc::namespace_name(o)
                .map(quote_ident)
                .unwrap_or_else(|| o.to_string()),
        )
    }));
    fns.push(oid_to_text("sundial_regproc_out", &[O], |o| {
        Some(
            PROCS
                .iter()
                .find(|p| i64::from(p.oid) == o)
                .map(|p| p.name.to_string())
                .unwrap_or_else(|| if o == 0 { "-".into() } else { o.to_string() }),
        )
    }));
    let c = cat.clone();
    fns.push(oid_to_text("sundial_regrole_out", &[O], move |o| {
        Some(c.role_name(o))
    }));
    let user = cat.user();
    for name in ["current_user", "session_user", "user", "current_role"] {
        let u = user.clone();
        fns.push(udf(name, &[], 0, Utf8, Volatility::Stable, move |_, n| {
            Ok(Arc::new(StringArray::from(vec![Some(u.clone()); n])))
        }));
    }
    fns.push(udf(
        "sundial_like_escape",
        &[S, S],
        2,
        Utf8,
        Volatility::Immutable,
        |a, _| {
            let pats = strs(&a[0])?;
            let escs = strs(&a[1])?;
            let out: StringArray = pats
                .into_iter()
                .zip(escs)
                .map(|(p, e)| Some(like_pattern(&p?, e?.chars().next())))
                .collect();
            Ok(Arc::new(out))
        },
    ));
    fns.push(always_bool("pg_is_in_recovery", &[], 0, false));
    fns.push(udf(
        "getdatabaseencoding",
        &[],
        0,
        Utf8,
        Volatility::Stable,
        |_, n| Ok(Arc::new(StringArray::from(vec![Some("UTF8"); n]))),
    ));
    fns.push(udf(
        "pg_my_temp_schema",
        &[],
        0,
        Int32,
        Volatility::Stable,
        |_, n| Ok(Arc::new(Int32Array::from(vec![0; n]))),
    ));
    fns.push(udf(
        "pg_tablespace_location",
        &[O],
        1,
        Utf8,
        Volatility::Stable,
        |a, n| {
            Ok(Arc::new(StringArray::from(vec![
                (!a.is_empty())
                    .then_some("");
                n
            ])))
        },
    ));
    for f in fns {
        ctx.register_udf(f);
    }
}

/// A LIKE pattern with escape character `esc` (none: `None`) rewritten for the
/// backslash escape DataFusion knows.
fn like_pattern(p: &str, esc: Option<char>) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if Some(c) == esc {
            match chars.next() {
                Some(n @ ('%' | '_' | '\\')) => {
                    out.push('\\');
                    out.push(n);
                }
                Some(n) => out.push(n),
                None => {}
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

fn namespace_oid(name: &str) -> Option<i32> {
    let parts = pgc::parse_ident(name)?;
    let [n] = parts.as_slice() else {
        return None;
    };
    pgc::NAMESPACES
        .iter()
        .find(|(_, nm, _)| nm == n)
        .map(|(o, _, _)| *o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_identifiers_like_postgres() {
        assert_eq!(quote_ident("time"), "\"time\"");
        assert_eq!(quote_ident("user"), "\"user\"");
        assert_eq!(quote_ident("value"), "value");
        assert_eq!(quote_ident("name"), "name");
        assert_eq!(quote_ident("hostname"), "hostname");
        assert_eq!(quote_ident("Cpu"), "\"Cpu\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_ident("1x"), "\"1x\"");
    }

    #[test]
    fn rewrites_like_escapes_for_backslash() {
        assert_eq!(like_pattern("pg/_%", Some('/')), "pg\\_%");
        assert_eq!(like_pattern("a\\b//c", Some('/')), "a\\\\b/c");
        assert_eq!(like_pattern("a\\b", None), "a\\\\b");
    }

    #[test]
    fn pretty_sizes_like_postgres() {
        assert_eq!(size_pretty(8192), "8192 bytes");
        assert_eq!(size_pretty(16384), "16 kB");
        assert_eq!(size_pretty(10_485_760), "10 MB");
        assert_eq!(size_pretty(-20_000), "-20 kB");
    }
}

/// `pg_partition_ancestors(rel)`: a table that is no partition is its own only
/// ancestor (psql's `\d` lists foreign keys through it).
#[derive(Debug)]
struct PartitionAncestors;

impl datafusion::catalog::TableFunctionImpl for PartitionAncestors {
    fn call(
        &self,
        args: &[datafusion::prelude::Expr],
    ) -> Result<Arc<dyn datafusion::datasource::TableProvider>> {
        let mut arg = args.first();
        while let Some(datafusion::prelude::Expr::Cast(c)) = arg {
            arg = Some(c.expr.as_ref());
        }
        let oid = match arg {
            Some(datafusion::prelude::Expr::Literal(v, _)) => v
                .to_string()
                .trim_matches('\'')
                .parse::<i32>()
                .map_err(|_| DataFusionError::Plan("pg_partition_ancestors takes an oid".into()))?,
            _ => {
                return Err(DataFusionError::Plan(
                    "pg_partition_ancestors takes a constant oid".into(),
                ));
            }
        };
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![Field::new(
            "relid",
            DataType::Int32,
            true,
        )]));
        let batch = arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::Int32Array::from(vec![oid]))],
        )?;
        Ok(Arc::new(datafusion::datasource::MemTable::try_new(
            schema,
            vec![vec![batch]],
        )?))
    }
}
