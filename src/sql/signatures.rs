//! The signatures of TimescaleDB's management functions (parameter names in order,
//! what each returns) and the statement-level questions asked of them: which calls
//! a statement makes, which change something, arguments made positional.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field};
use datafusion::sql::sqlparser::ast::{self, FunctionArg, FunctionArgExpr, Visit, Visitor};

use crate::error::{Error, Result};

/// What a management function returns, as TimescaleDB declares it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Ret {
    /// `integer` (a job id).
    Int4,
    /// `boolean`.
    Bool,
    /// `void` (shown as an empty value).
    Void,
    /// `regclass` (a chunk's qualified name).
    Regclass,
    /// `SETOF text` / `SETOF regclass`: one row per chunk.
    Set,
}

impl Ret {
    pub(crate) fn data_type(self) -> DataType {
        match self {
            Ret::Int4 => DataType::Int32,
            Ret::Bool => DataType::Boolean,
            Ret::Void | Ret::Regclass => DataType::Utf8,
            Ret::Set => DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        }
    }

    /// The type of the table function's one column.
    pub(crate) fn column_type(self) -> DataType {
        match self {
            Ret::Set => DataType::Utf8,
            other => other.data_type(),
        }
    }
}

/// A management function: its name, its parameters in order, what it returns.
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) params: &'static [&'static str],
    pub(crate) ret: Ret,
}

const CHUNK_RANGE: &[&str] = &[
    "relation",
    "older_than",
    "newer_than",
    "verbose",
    "created_before",
    "created_after",
];

pub(crate) const SPECS: &[Spec] = &[
    Spec {
        name: "show_chunks",
        params: &[
            "relation",
            "older_than",
            "newer_than",
            "created_before",
            "created_after",
        ],
        ret: Ret::Set,
    },
    Spec {
        name: "drop_chunks",
        params: CHUNK_RANGE,
        ret: Ret::Set,
    },
    Spec {
        name: "add_retention_policy",
        params: &[
            "relation",
            "drop_after",
            "if_not_exists",
            "schedule_interval",
            "initial_start",
            "timezone",
            "drop_created_before",
        ],
        ret: Ret::Int4,
    },
    Spec {
        name: "remove_retention_policy",
        params: &["relation", "if_exists"],
        ret: Ret::Void,
    },
    Spec {
        name: "add_continuous_aggregate_policy",
        params: &[
            "continuous_aggregate",
            "start_offset",
            "end_offset",
            "schedule_interval",
            "if_not_exists",
            "initial_start",
            "timezone",
            "include_tiered_data",
            "buckets_per_batch",
            "max_batches_per_execution",
            "refresh_newest_first",
        ],
        ret: Ret::Int4,
    },
    Spec {
        name: "remove_continuous_aggregate_policy",
        params: &["continuous_aggregate", "if_not_exists", "if_exists"],
        ret: Ret::Void,
    },
    Spec {
        name: "add_compression_policy",
        params: &[
            "hypertable",
            "compress_after",
            "if_not_exists",
            "schedule_interval",
            "initial_start",
            "timezone",
            "compress_created_before",
        ],
        ret: Ret::Int4,
    },
    Spec {
        name: "remove_compression_policy",
        params: &["hypertable", "if_exists"],
        ret: Ret::Bool,
    },
    Spec {
        name: "compress_chunk",
        params: &["uncompressed_chunk", "if_not_compressed", "recompress"],
        ret: Ret::Regclass,
    },
    Spec {
        name: "decompress_chunk",
        params: &["uncompressed_chunk", "if_compressed"],
        ret: Ret::Regclass,
    },
];

/// The parameters of management function `name`, in order (empty for another name).
pub fn params(name: &str) -> &'static [&'static str] {
    spec(name).map_or(&[], |s| s.params)
}

fn spec(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// The function a call names, without a `public.` schema.
fn called(name: &ast::ObjectName) -> Option<&'static Spec> {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
        .collect();
    match parts.as_slice() {
        [n] => spec(n),
        [schema, n] if schema == "public" => spec(n),
        _ => None,
    }
}

/// Whether `name` is one of the management functions that change something.
fn writes(s: &Spec) -> bool {
    s.name != "show_chunks"
}

/// Makes the arguments of a management call positional in its parameter order: a
/// parameter not given is a NULL of no type, a NULL the caller wrote is a NULL of
/// type text (so the call still tells the two apart). `None` when the call is not a
/// management function's; an error for a parameter name it does not have.
pub fn positional(name: &ast::ObjectName, args: &mut Vec<FunctionArg>) -> Result<()> {
    let Some(spec) = called(name) else {
        return Ok(());
    };
    let (pos, named) = super::args::split_args(args);
    if pos.len() + named.len() != args.len() || pos.len() > spec.params.len() {
        return Err(signature_error(spec));
    }
    let mut out: Vec<Option<ast::Expr>> = pos.into_iter().map(Some).collect();
    out.resize(spec.params.len(), None);
    for (n, e) in named {
        let i = spec.params.iter().position(|p| *p == n).ok_or_else(|| {
            Error::sql(
                "42883",
                format!("function {} has no parameter named \"{n}\"", spec.name),
            )
        })?;
        out[i] = Some(e);
    }
    // Trailing parameters not given are left out.
    while out.last().is_some_and(|e| e.is_none()) {
        out.pop();
    }
    *args = out
        .into_iter()
        .map(|e| {
            let e = match e {
                Some(ast::Expr::Value(v)) if matches!(v.value, ast::Value::Null) => {
                    ast::Expr::Cast {
                        kind: ast::CastKind::Cast,
                        expr: Box::new(ast::Expr::Value(v)),
                        data_type: ast::DataType::Text,
                        array: false,
                        format: None,
                    }
                }
                Some(e) => e,
                None => ast::Expr::value(ast::Value::Null),
            };
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
        })
        .collect();
    Ok(())
}

fn signature_error(spec: &Spec) -> Error {
    Error::sql(
        "42883",
        format!(
            "function {}({}) does not exist",
            spec.name,
            spec.params.join(", ")
        ),
    )
}

/// The select items that are set-returning management calls (`SELECT
/// drop_chunks(…)`): one row per chunk, as `unnest` of the call's list.
pub fn is_set_returning(name: &ast::ObjectName) -> bool {
    called(name).is_some_and(|s| s.ret == Ret::Set)
}

/// Functions that read a hypertable's chunks or sizes (registered elsewhere).
const READERS: [&str; 8] = [
    "hypertable_size",
    "approximate_row_count",
    "hypertable_detailed_size",
    "chunks_detailed_size",
    "hypertable_compression_stats",
    "hypertable_columnstore_stats",
    "chunk_compression_stats",
    "chunk_columnstore_stats",
];

/// Every management call in `stmt` that changes something: its name and its first
/// argument when that is a literal (the table it changes).
pub fn writing_calls(stmt: &ast::Statement) -> Vec<(&'static str, Option<String>)> {
    management_calls(stmt)
        .into_iter()
        .filter(|(n, _)| spec(n).is_some_and(writes))
        .collect()
}

/// Every management call in `stmt` (in any expression or FROM): its name and its
/// first argument when that is a literal (the table it reads or changes).
pub fn management_calls(stmt: &ast::Statement) -> Vec<(&'static str, Option<String>)> {
    struct Calls(Vec<(&'static str, Option<String>)>);
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> std::ops::ControlFlow<()> {
            if let ast::Expr::Function(f) = e
                && let ast::FunctionArguments::List(l) = &f.args
            {
                self.note(&f.name, &l.args);
            }
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, tf: &ast::TableFactor) -> std::ops::ControlFlow<()> {
            if let ast::TableFactor::Table {
                name,
                args: Some(a),
                ..
            } = tf
            {
                self.note(name, &a.args);
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    impl Calls {
        fn note(&mut self, name: &ast::ObjectName, args: &[FunctionArg]) {
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
                .collect();
            let reader = match parts.as_slice() {
                [n] => READERS.iter().find(|r| *r == n),
                [schema, n] if schema == "public" => READERS.iter().find(|r| *r == n),
                _ => None,
            };
            if let Some(name) = called(name).map(|s| s.name).or(reader.copied()) {
                let first = args.first().and_then(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                    | FunctionArg::Named {
                        arg: FunctionArgExpr::Expr(e),
                        ..
                    }
                    | FunctionArg::ExprNamed {
                        arg: FunctionArgExpr::Expr(e),
                        ..
                    } => super::args::literal_text(e),
                    _ => None,
                });
                self.0.push((name, first));
            }
        }
    }
    let mut c = Calls(vec![]);
    let _ = stmt.visit(&mut c);
    c.0
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The names of the management functions that change something.
pub fn writing_names() -> impl Iterator<Item = &'static str> {
    SPECS.iter().filter(|s| writes(s)).map(|s| s.name)
}
