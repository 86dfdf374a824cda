//! PostgreSQL's system catalogs (`pg_catalog`) and `information_schema`, computed from
//! Sundial's catalog when scanned. OIDs are stable across restarts: 16384 + the persisted
//! catalog id for tables and databases, PostgreSQL's own numbers for everything built in.
//! This module is the whole PostgreSQL catalog emulation: these views, the static
//! rows of PostgreSQL 15 (`defs`), the catalog functions (`functions`) and the AST
//! rewrites for the SQL clients send to read them (`rewrite`).

pub mod defs;
pub mod functions;
pub mod rewrite;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Float32Builder, Int16Builder, Int32Builder,
    Int64Builder, IntervalMonthDayNanoBuilder, ListBuilder, RecordBatch, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, IntervalUnit, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::SchemaProvider;
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DfResult;

use crate::catalog::{SqlType, TableDef};
use crate::engine::Engine;
use crate::sql::functions::Settings;

pub use defs::{INFO_SCHEMA_RELS, PG_CATALOG_RELS, TYPES};

/// Namespace oids (PostgreSQL's for the built-in ones).
pub const NS_PG_CATALOG: i32 = 11;
pub const NS_PG_TOAST: i32 = 99;
pub const NS_PUBLIC: i32 = 2200;
pub const NS_INFORMATION_SCHEMA: i32 = 13207;
pub const NS_TIMESCALEDB_INFORMATION: i32 = 13600;
/// Where TimescaleDB keeps internal tables: continuous aggregates' materializations.
pub const NS_TIMESCALEDB_INTERNAL: i32 = 13601;

/// The role every object belongs to; it is shown as the session user.
pub const ROLE_OWNER: i32 = 10;
/// Owner of `public` in PostgreSQL 15.
pub const ROLE_DATABASE_OWNER: i32 = 6171;

/// First oid of user objects (PostgreSQL's `FirstNormalObjectId`).
pub const FIRST_USER_OID: i64 = 16384;

/// The TimescaleDB release whose SQL interface Sundial follows, as `pg_extension`
/// reports it (catalog ids start at 1, so oid 16384 is free for the extension row).
pub const TIMESCALEDB_VERSION: &str = "2.28.0";

/// `pg_class` oid of `pg_class` itself, used by `obj_description(oid, 'pg_class')`.
pub const PG_CLASS_OID: i32 = 1259;

/// Field metadata that makes arrow-pg report an `Int32` column as `oid` (26).
const OID_KEY: &str = "pg.oid_alias";
/// Field metadata that makes arrow-pg report a text column as `"char"` (18).
const CHAR_KEY: &str = "pg.char";

/// (oid, name, owner) of every schema.
pub const NAMESPACES: [(i32, &str, i32); 6] = [
    (NS_PG_CATALOG, "pg_catalog", ROLE_OWNER),
    (NS_PG_TOAST, "pg_toast", ROLE_OWNER),
    (NS_PUBLIC, "public", ROLE_DATABASE_OWNER),
    (NS_INFORMATION_SCHEMA, "information_schema", ROLE_OWNER),
    (
        NS_TIMESCALEDB_INFORMATION,
        "timescaledb_information",
        ROLE_OWNER,
    ),
    (NS_TIMESCALEDB_INTERNAL, "_timescaledb_internal", ROLE_OWNER),
];

/// The oid of the table with catalog id `id`.
pub fn table_oid(id: u64) -> i32 {
    user_oid(id)
}

/// The oid of the database with catalog id `id`.
pub fn database_oid(id: u64) -> i32 {
    user_oid(id)
}

fn user_oid(id: u64) -> i32 {
    i32::try_from(FIRST_USER_OID.saturating_add(i64::try_from(id).unwrap_or(i64::MAX)))
        .unwrap_or(i32::MAX)
}

/// Name of the namespace with oid `ns`.
pub fn namespace_name(ns: i64) -> Option<&'static str> {
    NAMESPACES
        .iter()
        .find(|(o, _, _)| i64::from(*o) == ns)
        .map(|(_, n, _)| *n)
}

/// Column kinds of the catalog relations, with the Arrow type that stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum T {
    /// `oid` (and `regproc`, `xid`): `Int32` reported as oid.
    Oid,
    Name,
    Text,
    Varchar,
    /// `"char"`: one-character text reported as type 18.
    Char,
    Bool,
    I16,
    I32,
    I64,
    F32,
    Tstz,
    Interval,
    TextArr,
    OidArr,
    I16Arr,
}

impl T {
    fn arrow(self) -> DataType {
        let list = |dt: DataType| DataType::List(Arc::new(Field::new("item", dt, true)));
        match self {
            T::Oid | T::I32 => DataType::Int32,
            T::Name | T::Text | T::Varchar | T::Char => DataType::Utf8,
            T::Bool => DataType::Boolean,
            T::I16 => DataType::Int16,
            T::I64 => DataType::Int64,
            T::F32 => DataType::Float32,
            T::Tstz => DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
            T::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            T::TextArr => list(DataType::Utf8),
            T::OidArr => list(DataType::Int32),
            T::I16Arr => list(DataType::Int16),
        }
    }

    fn field(self, name: &str) -> Field {
        let f = Field::new(name, self.arrow(), true);
        match self {
            T::Oid => f.with_metadata(HashMap::from([(OID_KEY.into(), "oid".into())])),
            T::Char => f.with_metadata(HashMap::from([(CHAR_KEY.into(), "char".into())])),
            _ => f,
        }
    }

    /// The PostgreSQL type oid of a column of this kind.
    pub fn type_oid(self) -> i32 {
        match self {
            T::Oid => 26,
            T::Name => 19,
            T::Text => 25,
            T::Varchar => 1043,
            T::Char => 18,
            T::Bool => 16,
            T::I16 => 21,
            T::I32 => 23,
            T::I64 => 20,
            T::F32 => 700,
            T::Tstz => 1184,
            T::Interval => 1186,
            T::TextArr => 1009,
            T::OidArr => 1028,
            T::I16Arr => 1005,
        }
    }
}

/// A catalog relation: its PostgreSQL oid, kind (`r` table, `v` view) and columns.
#[derive(Debug)]
pub struct RelDef {
    pub name: &'static str,
    pub oid: i32,
    pub kind: u8,
    pub cols: &'static [(&'static str, T)],
}

impl RelDef {
    fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.cols
                .iter()
                .map(|(n, t)| t.field(n))
                .collect::<Vec<_>>(),
        ))
    }
}

/// A built-in type: one row of `pg_type`.
#[derive(Debug)]
pub struct Ty {
    pub oid: i32,
    pub name: &'static str,
    pub len: i16,
    pub byval: bool,
    pub kind: u8,
    pub category: u8,
    pub preferred: bool,
    pub elem: i32,
    pub array: i32,
    pub align: u8,
    pub storage: u8,
    pub collation: i32,
    /// What `format_type(oid, NULL)` prints.
    pub display: &'static str,
}

/// The built-in type with oid `oid`.
pub fn type_by_oid(oid: i64) -> Option<&'static Ty> {
    TYPES.iter().find(|t| i64::from(t.oid) == oid)
}

/// The type a name denotes (`int4`, `integer`, `timestamptz`, `pg_catalog.text`,
/// `character varying`, `text[]`, ...), as `to_regtype` resolves it.
pub fn type_by_name(name: &str) -> Option<&'static Ty> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.strip_prefix("pg_catalog.").unwrap_or(&n);
    let n = n.split_whitespace().collect::<Vec<_>>().join(" ");
    // a type modifier does not change the type: numeric(10,2), varchar(20)
    let n = match (n.find('('), n.rfind(')')) {
        (Some(a), Some(b)) if b > a => format!("{}{}", n[..a].trim_end(), &n[b + 1..]),
        _ => n,
    };
    if let Some(elem) = n.strip_suffix("[]") {
        let e = type_by_name(elem)?;
        return type_by_oid(i64::from(e.array));
    }
    let canonical = match n.as_str() {
        "int" | "integer" => "int4",
        "smallint" => "int2",
        "bigint" => "int8",
        "real" => "float4",
        "double precision" | "float" => "float8",
        "boolean" => "bool",
        "decimal" => "numeric",
        "character varying" => "varchar",
        "character" | "char" => "bpchar",
        "\"char\"" => "char",
        "timestamp with time zone" => "timestamptz",
        "timestamp without time zone" => "timestamp",
        "time without time zone" => "time",
        "time with time zone" => "timetz",
        "\"any\"" => "any",
        other => other,
    };
    TYPES.iter().find(|t| t.name == canonical)
}

/// PostgreSQL's `format_type(oid, typmod)`; `None` for an unknown oid.
pub fn format_type(oid: i64, typmod: Option<i64>) -> Option<String> {
    let t = type_by_oid(oid)?;
    let m = typmod.unwrap_or(-1);
    Some(match (t.name, m) {
        ("numeric", m) if m >= 4 => {
            let v = m - 4;
            format!("numeric({},{})", (v >> 16) & 0xffff, v & 0xffff)
        }
        ("varchar", m) if m >= 4 => format!("character varying({})", m - 4),
        ("bpchar", m) if m >= 4 => format!("character({})", m - 4),
        ("timestamp", m) if m >= 0 => format!("timestamp({m}) without time zone"),
        ("timestamptz", m) if m >= 0 => format!("timestamp({m}) with time zone"),
        ("time", m) if m >= 0 => format!("time({m}) without time zone"),
        _ => t.display.to_string(),
    })
}

/// The type oid and type modifier of a column type.
pub fn sql_type_oid(t: &SqlType) -> (i32, i32) {
    match t {
        SqlType::Bool => (16, -1),
        SqlType::Int2 => (21, -1),
        SqlType::Int4 => (23, -1),
        SqlType::Int8 => (20, -1),
        SqlType::Float4 => (700, -1),
        SqlType::Float8 => (701, -1),
        SqlType::Numeric(p, s) => (1700, ((i32::from(*p) << 16) | (i32::from(*s) & 0xffff)) + 4),
        SqlType::NumericAny => (1700, -1),
        SqlType::Text => (25, -1),
        SqlType::Varchar(n) => (
            1043,
            n.map(|n| i32::try_from(n).unwrap_or(i32::MAX - 4) + 4)
                .unwrap_or(-1),
        ),
        SqlType::Bytea => (17, -1),
        SqlType::Json => (114, -1),
        SqlType::Jsonb => (3802, -1),
        SqlType::Date => (1082, -1),
        SqlType::Timestamp => (1114, -1),
        SqlType::Timestamptz => (1184, -1),
    }
}

/// The PostgreSQL type oid of a column of a view or query: `json` and `jsonb` by
/// the field's kind, else by its Arrow type.
pub fn field_type_oid(f: &arrow::datatypes::Field) -> i32 {
    match crate::json::Kind::of(f) {
        Some(crate::json::Kind::Json) => 114,
        Some(crate::json::Kind::Jsonb) => 3802,
        None => arrow_type_oid(f.data_type()),
    }
}

/// The PostgreSQL type oid of an Arrow type (for the columns of system views).
pub fn arrow_type_oid(dt: &DataType) -> i32 {
    match dt {
        DataType::Boolean => 16,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => 21,
        DataType::Int32 | DataType::UInt16 => 23,
        DataType::Int64 | DataType::UInt32 => 20,
        DataType::UInt64 | DataType::Decimal128(..) | DataType::Decimal256(..) => 1700,
        DataType::Float16 | DataType::Float32 => 700,
        DataType::Float64 => 701,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => 17,
        DataType::Date32 | DataType::Date64 => 1082,
        DataType::Timestamp(_, Some(_)) => 1184,
        DataType::Timestamp(_, None) => 1114,
        DataType::Interval(_) | DataType::Duration(_) => 1186,
        DataType::List(f) | DataType::LargeList(f) => type_by_oid(i64::from(field_type_oid(f)))
            .map(|t| t.array)
            .filter(|a| *a != 0)
            .unwrap_or(1009),
        _ => 25,
    }
}

/// What catalog functions and tables need to know about the connection.
#[derive(Debug)]
pub struct CatalogCtx {
    pub engine: Arc<Engine>,
    pub db: String,
    pub settings: Settings,
}

impl CatalogCtx {
    /// The session user: shown as the owner of every object.
    pub fn user(&self) -> String {
        self.settings
            .read()
            .get("session_authorization")
            .cloned()
            .unwrap_or_else(|| "sundial".into())
    }

    fn tables(&self) -> Vec<Arc<TableDef>> {
        self.engine
            .catalog()
            .snapshot()
            .database(&self.db)
            .map(|d| d.tables.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Name of role `oid` (`pg_get_userbyid`).
    pub fn role_name(&self, oid: i64) -> String {
        match oid {
            10 => self.user(),
            6171 => "pg_database_owner".into(),
            o => format!("unknown (OID={o})"),
        }
    }

    /// The relation a (possibly schema-qualified, possibly quoted) name denotes, as
    /// `'name'::regclass` resolves it.
    pub fn relation_by_name(&self, name: &str) -> Option<Rel> {
        let parts = parse_ident(name)?;
        let rels = relations(self);
        match parts.as_slice() {
            [schema, rel] => rels
                .into_iter()
                .find(|r| &r.name == rel && namespace_name(i64::from(r.ns)) == Some(schema)),
            [rel] => {
                // pg_catalog first, then public (PostgreSQL's implicit search path)
                let mut found: Vec<Rel> = rels
                    .into_iter()
                    .filter(|r| &r.name == rel && (r.ns == NS_PG_CATALOG || r.ns == NS_PUBLIC))
                    .collect();
                found.sort_by_key(|r| r.ns != NS_PG_CATALOG);
                found.into_iter().next()
            }
            _ => None,
        }
    }

    /// Size in bytes of a table's Parquet files (`pg_table_size`).
    pub fn table_size(&self, oid: i64) -> Option<i64> {
        self.tables()
            .iter()
            .find(|t| i64::from(table_oid(t.id)) == oid)
            .map(|t| t.files.iter().map(|f| f.bytes as i64).sum())
    }
}

/// Whether an unqualified reference to relation `oid` finds it (`pg_table_is_visible`):
/// it is in `pg_catalog`, or in `public` and no catalog relation has its name.
pub fn is_visible(rels: &[Rel], oid: i64) -> bool {
    let Some(r) = rels.iter().find(|r| i64::from(r.oid) == oid) else {
        return false;
    };
    match r.ns {
        NS_PG_CATALOG => true,
        NS_PUBLIC => !rels
            .iter()
            .any(|o| o.ns == NS_PG_CATALOG && o.name == r.name),
        _ => false,
    }
}

/// Splits a qualified identifier like PostgreSQL's `parse_ident`: unquoted parts are
/// folded to lower case, `"quoted"` parts kept; `None` if it is malformed.
pub fn parse_ident(s: &str) -> Option<Vec<String>> {
    let mut parts = vec![];
    let mut chars = s.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    '"' => break,
                    c => part.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' || c.is_whitespace() {
                    break;
                }
                part.extend(c.to_lowercase());
                chars.next();
            }
            if part.is_empty() {
                return None;
            }
        }
        parts.push(part);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            None => return Some(parts),
            Some('.') => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            }
            Some(_) => return None,
        }
    }
}

/// One column as `pg_attribute` shows it.
#[derive(Debug, Clone)]
pub struct Att {
    pub name: String,
    pub type_oid: i32,
    pub typmod: i32,
    pub notnull: bool,
    /// The default as `pg_get_expr` prints it.
    pub default: Option<String>,
    /// `attidentity`: `a` (ALWAYS) or `d` (BY DEFAULT) for an identity column.
    pub identity: Option<char>,
}

/// One relation as `pg_class` shows it.
#[derive(Debug, Clone)]
pub struct Rel {
    pub oid: i32,
    pub name: String,
    pub ns: i32,
    pub kind: u8,
    pub atts: Vec<Att>,
}

/// A PRIMARY KEY, UNIQUE or CHECK constraint as `pg_constraint` shows it.
pub struct Constraint {
    pub oid: i32,
    pub name: String,
    /// `p`, `u` or `c`.
    pub kind: char,
    /// Oid of the table.
    pub rel: i32,
    /// Column numbers it covers (a CHECK: the columns it reads).
    pub key: Vec<i16>,
    pub validated: bool,
    /// `pg_get_constraintdef(oid)` and `pg_get_constraintdef(oid, true)`.
    pub def: String,
    pub pretty: String,
    /// A foreign key's referenced table oid, its columns and ON DELETE code.
    pub foreign: Option<(i32, Vec<i16>, char)>,
}

/// Constraint oids: above every catalog id, 1000 per table.
fn constraint_oid(table_id: u64, n: usize) -> i32 {
    let id = i64::try_from(table_id).unwrap_or(i64::MAX);
    i32::try_from(
        1_000_000_000i64
            .saturating_add(id.saturating_mul(1000))
            .saturating_add(n as i64),
    )
    .unwrap_or(i32::MAX)
}

/// The constraints of the database's tables: keys (primary first), then CHECKs.
pub fn constraints(ctx: &CatalogCtx) -> Vec<Constraint> {
    let mut out = vec![];
    let tables = ctx.tables();
    for t in tables.iter() {
        if t.cagg.is_some() {
            continue;
        }
        let attnum = |c: &str| {
            t.columns
                .iter()
                .position(|x| x.name == c)
                .and_then(|i| i16::try_from(i + 1).ok())
        };
        let rel = table_oid(t.id);
        for (n, k) in t.keys.iter().enumerate() {
            let cols: Vec<String> = k
                .columns
                .iter()
                .map(|c| crate::pgident::quote_ident(c))
                .collect();
            let def = format!(
                "{} ({})",
                if k.primary { "PRIMARY KEY" } else { "UNIQUE" },
                cols.join(", ")
            );
            out.push(Constraint {
                oid: constraint_oid(t.id, n),
                name: k.name.clone(),
                kind: if k.primary { 'p' } else { 'u' },
                rel,
                key: k.columns.iter().filter_map(|c| attnum(c)).collect(),
                validated: true,
                pretty: def.clone(),
                def,
                foreign: None,
            });
        }
        for (n, c) in t.checks.iter().enumerate() {
            let not_valid = if c.validated { "" } else { " NOT VALID" };
            out.push(Constraint {
                oid: constraint_oid(t.id, t.keys.len() + n),
                name: c.name.clone(),
                kind: 'c',
                rel,
                key: columns_read(&c.expr)
                    .iter()
                    .filter_map(|x| attnum(x))
                    .collect(),
                validated: c.validated,
                def: format!("CHECK (({})){not_valid}", c.expr),
                pretty: format!("CHECK ({}){not_valid}", c.expr),
                foreign: None,
            });
        }
        let base = t.keys.len() + t.checks.len();
        for (n, f) in t.foreign_keys.iter().enumerate() {
            let q = |v: &[String]| {
                v.iter()
                    .map(|c| crate::pgident::quote_ident(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let not_valid = if f.validated { "" } else { " NOT VALID" };
            let def = format!(
                "FOREIGN KEY ({}) REFERENCES {}({}){}{not_valid}",
                q(&f.columns),
                crate::pgident::quote_ident(&f.ref_table),
                q(&f.ref_columns),
                f.on_delete.clause()
            );
            let parent = tables.iter().find(|p| p.name == f.ref_table);
            let ref_key = parent
                .map(|p| {
                    f.ref_columns
                        .iter()
                        .filter_map(|c| {
                            p.columns
                                .iter()
                                .position(|x| &x.name == c)
                                .and_then(|i| i16::try_from(i + 1).ok())
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push(Constraint {
                oid: constraint_oid(t.id, base + n),
                name: f.name.clone(),
                kind: 'f',
                rel,
                key: f.columns.iter().filter_map(|c| attnum(c)).collect(),
                validated: f.validated,
                pretty: def.clone(),
                def,
                foreign: Some((
                    parent.map(|p| table_oid(p.id)).unwrap_or(0),
                    ref_key,
                    f.on_delete.code(),
                )),
            });
        }
    }
    out
}

/// The names a stored condition reads (identifiers, folded as PostgreSQL folds them).
fn columns_read(expr: &str) -> Vec<String> {
    use datafusion::sql::sqlparser::ast;
    let Ok(e) = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(expr)
    .and_then(|mut p| p.parse_expr()) else {
        return vec![];
    };
    let mut out: Vec<String> = vec![];
    let _ = ast::visit_expressions(&e, |x| {
        let name = match x {
            ast::Expr::Identifier(i) => Some(i),
            ast::Expr::CompoundIdentifier(p) => p.last(),
            _ => None,
        };
        if let Some(i) = name {
            let n = if i.quote_style.is_some() {
                i.value.clone()
            } else {
                i.value.to_lowercase()
            };
            if !out.contains(&n) {
                out.push(n);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    out
}

/// A user table's default, as PostgreSQL deparses it (`'x'::text`, `now()`).
fn deparse_default(default: &str, ty: &SqlType) -> String {
    let d = default.trim();
    if d.starts_with('\'') && d.ends_with('\'') && d.len() >= 2 && !d.contains("::") {
        let (oid, typmod) = sql_type_oid(ty);
        let t = format_type(i64::from(oid), Some(i64::from(typmod))).unwrap_or_default();
        return format!("{d}::{t}");
    }
    match d.to_ascii_lowercase().as_str() {
        "current_timestamp" => "CURRENT_TIMESTAMP".into(),
        "now()" => "now()".into(),
        "true" => "true".into(),
        "false" => "false".into(),
        _ => d.to_string(),
    }
}

fn rel_of_def(def: &RelDef, ns: i32) -> Rel {
    Rel {
        oid: def.oid,
        name: def.name.to_string(),
        ns,
        kind: def.kind,
        atts: def
            .cols
            .iter()
            .map(|(n, t)| Att {
                name: n.to_string(),
                type_oid: t.type_oid(),
                typmod: -1,
                notnull: false,
                identity: None,
                default: None,
            })
            .collect(),
    }
}

fn rel_of_schema(oid: i32, name: &str, ns: i32, schema: &Schema) -> Rel {
    Rel {
        oid,
        name: name.to_string(),
        ns,
        kind: b'v',
        atts: schema
            .fields()
            .iter()
            .map(|f| Att {
                name: f.name().clone(),
                type_oid: field_type_oid(f),
                typmod: -1,
                notnull: false,
                identity: None,
                default: None,
            })
            .collect(),
    }
}

/// Oids of Sundial's own system views.
const TSDB_VIEW_OIDS: [(&str, i32); 3] = [
    ("hypertables", 13700),
    ("chunks", 13701),
    ("dimensions", 13702),
];
const CHUNK_FILES_OID: i32 = 13703;

/// Every relation of the connection's database: user tables, Sundial's views and the
/// catalogs themselves.
pub fn relations(ctx: &CatalogCtx) -> Vec<Rel> {
    let mut out = vec![];
    for t in ctx.tables() {
        out.push(Rel {
            oid: table_oid(t.id),
            name: t.name.clone(),
            ns: if t.cagg.is_some() {
                NS_TIMESCALEDB_INTERNAL
            } else {
                NS_PUBLIC
            },
            kind: b'r',
            atts: t
                .columns
                .iter()
                .map(|c| {
                    let (type_oid, typmod) = sql_type_oid(&c.sql_type);
                    Att {
                        name: c.name.clone(),
                        type_oid,
                        typmod,
                        notnull: !c.nullable,
                        identity: c
                            .identity
                            .as_ref()
                            .map(|i| if i.always { 'a' } else { 'd' }),
                        default: c
                            .default
                            .as_deref()
                            .map(|d| deparse_default(d, &c.sql_type)),
                    }
                })
                .collect(),
        });
    }
    let snapshot = ctx.engine.catalog().snapshot();
    if let Ok(d) = snapshot.database(&ctx.db) {
        for v in d.views.values() {
            out.push(Rel {
                oid: table_oid(v.id),
                name: v.name.clone(),
                ns: NS_PUBLIC,
                // A continuous aggregate lists as a materialized view (psql's \dm).
                kind: if v.cagg.is_some() { b'm' } else { b'v' },
                atts: v
                    .columns
                    .iter()
                    .zip(&v.column_types)
                    .map(|(name, &type_oid)| Att {
                        name: name.clone(),
                        type_oid,
                        typmod: -1,
                        notnull: false,
                        identity: None,
                        default: None,
                    })
                    .collect(),
            });
        }
    }
    if let Ok(d) = snapshot.database(&ctx.db) {
        let att = |name: &str, type_oid: i32| Att {
            name: name.to_string(),
            type_oid,
            typmod: -1,
            notnull: true,
            identity: None,
            default: None,
        };
        for q in d.sequences.values() {
            out.push(Rel {
                oid: table_oid(q.id),
                name: q.name.clone(),
                ns: NS_PUBLIC,
                kind: b'S',
                atts: vec![
                    att("last_value", 20),
                    att("log_cnt", 20),
                    att("is_called", 16),
                ],
            });
        }
    }
    let chunk_files = crate::query::system::chunk_files(ctx.engine.clone(), ctx.db.clone());
    out.push(rel_of_schema(
        CHUNK_FILES_OID,
        crate::query::system::CHUNK_FILES,
        NS_PUBLIC,
        &chunk_files.schema(),
    ));
    for (name, oid) in TSDB_VIEW_OIDS {
        if let Some(schema) = crate::query::system::info_schema_of(name) {
            out.push(rel_of_schema(
                oid,
                name,
                NS_TIMESCALEDB_INFORMATION,
                &schema,
            ));
        }
    }
    out.extend(PG_CATALOG_RELS.iter().map(|d| rel_of_def(d, NS_PG_CATALOG)));
    out.extend(
        INFO_SCHEMA_RELS
            .iter()
            .map(|d| rel_of_def(d, NS_INFORMATION_SCHEMA)),
    );
    out
}

/// A value of one catalog cell.
#[derive(Debug, Clone)]
enum V {
    N,
    I(i64),
    F(f64),
    B(bool),
    S(String),
    L(Vec<V>),
}

fn s(v: impl Into<String>) -> V {
    V::S(v.into())
}

fn i(v: impl Into<i64>) -> V {
    V::I(v.into())
}

type Row = Vec<(&'static str, V)>;

/// A catalog relation as a DataFusion table: rows are computed when it is scanned.
/// Default of a column nobody set: catalog tables are NOT NULL for fixed-width columns.
fn default_value(t: T, table: bool) -> V {
    if !table {
        return V::N;
    }
    match t {
        T::Oid | T::I16 | T::I32 | T::I64 => V::I(0),
        T::F32 => V::F(0.0),
        T::Bool => V::B(false),
        T::Char => s(""),
        _ => V::N,
    }
}

fn to_batch(def: &RelDef, schema: &SchemaRef, rows: Vec<Row>) -> DfResult<RecordBatch> {
    let table = def.kind == b'r';
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(def.cols.len());
    for (name, t) in def.cols {
        let values = rows.iter().map(|r| {
            r.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| default_value(*t, table))
        });
        cols.push(column(*t, values));
    }
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

fn as_i64(v: &V) -> Option<i64> {
    match v {
        V::I(x) => Some(*x),
        V::F(x) => Some(*x as i64),
        V::B(b) => Some(i64::from(*b)),
        V::S(x) => x.parse().ok(),
        _ => None,
    }
}

fn as_str(v: &V) -> Option<String> {
    match v {
        V::S(x) => Some(x.clone()),
        V::I(x) => Some(x.to_string()),
        V::F(x) => Some(x.to_string()),
        V::B(b) => Some(if *b { "t" } else { "f" }.into()),
        _ => None,
    }
}

fn column(t: T, values: impl Iterator<Item = V>) -> ArrayRef {
    fn fin(mut b: impl ArrayBuilder) -> ArrayRef {
        b.finish()
    }
    match t {
        T::Oid | T::I32 => {
            let mut b = Int32Builder::new();
            for v in values {
                b.append_option(as_i64(&v).and_then(|x| i32::try_from(x).ok()));
            }
            fin(b)
        }
        T::I16 => {
            let mut b = Int16Builder::new();
            for v in values {
                b.append_option(as_i64(&v).and_then(|x| i16::try_from(x).ok()));
            }
            fin(b)
        }
        T::I64 => {
            let mut b = Int64Builder::new();
            for v in values {
                b.append_option(as_i64(&v));
            }
            fin(b)
        }
        T::F32 => {
            let mut b = Float32Builder::new();
            for v in values {
                b.append_option(match v {
                    V::F(x) => Some(x as f32),
                    V::I(x) => Some(x as f32),
                    _ => None,
                });
            }
            fin(b)
        }
        T::Bool => {
            let mut b = BooleanBuilder::new();
            for v in values {
                b.append_option(match v {
                    V::B(x) => Some(x),
                    _ => None,
                });
            }
            fin(b)
        }
        T::Name | T::Text | T::Varchar | T::Char => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_option(as_str(&v));
            }
            fin(b)
        }
        T::Tstz => {
            let mut b = TimestampMicrosecondBuilder::new().with_timezone("UTC");
            for v in values {
                b.append_option(as_i64(&v));
            }
            fin(b)
        }
        T::Interval => {
            let mut b = IntervalMonthDayNanoBuilder::new();
            for _ in values {
                b.append_null();
            }
            fin(b)
        }
        T::TextArr => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for v in values {
                match v {
                    V::L(items) => {
                        for x in items {
                            b.values().append_option(as_str(&x));
                        }
                        b.append(true);
                    }
                    _ => b.append_null(),
                }
            }
            fin(b)
        }
        T::OidArr => {
            let mut b = ListBuilder::new(Int32Builder::new());
            for v in values {
                match v {
                    V::L(items) => {
                        for x in items {
                            b.values()
                                .append_option(as_i64(&x).and_then(|x| i32::try_from(x).ok()));
                        }
                        b.append(true);
                    }
                    _ => b.append_null(),
                }
            }
            fin(b)
        }
        T::I16Arr => {
            let mut b = ListBuilder::new(Int16Builder::new());
            for v in values {
                match v {
                    V::L(items) => {
                        for x in items {
                            b.values()
                                .append_option(as_i64(&x).and_then(|x| i16::try_from(x).ok()));
                        }
                        b.append(true);
                    }
                    _ => b.append_null(),
                }
            }
            fin(b)
        }
    }
}

/// A function Sundial provides, as `pg_proc` and `\df` show it.
#[derive(Debug)]
pub struct Proc {
    pub oid: i32,
    pub name: &'static str,
    /// `f` function, `a` aggregate.
    pub kind: u8,
    /// What `pg_get_function_arguments` prints.
    pub args: &'static str,
    /// What `pg_get_function_result` prints.
    pub result: &'static str,
    pub arg_types: &'static [i32],
    pub arg_names: &'static [&'static str],
    pub ret: i32,
    pub defaults: i16,
}

const TSTZ: i32 = 1184;
const TS: i32 = 1114;
const DATE: i32 = 1082;
const IV: i32 = 1186;

/// Sundial's own functions (TimescaleDB's signatures), in `public` like TimescaleDB's.
pub const PROCS: &[Proc] = &[
    Proc {
        oid: 15000,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp with time zone",
        result: "timestamp with time zone",
        arg_types: &[IV, TSTZ],
        arg_names: &["bucket_width", "ts"],
        ret: TSTZ,
        defaults: 0,
    },
    Proc {
        oid: 15001,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp with time zone, origin timestamp with time zone",
        result: "timestamp with time zone",
        arg_types: &[IV, TSTZ, TSTZ],
        arg_names: &["bucket_width", "ts", "origin"],
        ret: TSTZ,
        defaults: 0,
    },
    Proc {
        oid: 15002,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp with time zone, \"offset\" interval",
        result: "timestamp with time zone",
        arg_types: &[IV, TSTZ, IV],
        arg_names: &["bucket_width", "ts", "offset"],
        ret: TSTZ,
        defaults: 0,
    },
    Proc {
        oid: 15003,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp with time zone, timezone text, origin timestamp with time zone DEFAULT NULL::timestamp with time zone, \"offset\" interval DEFAULT NULL::interval",
        result: "timestamp with time zone",
        arg_types: &[IV, TSTZ, 25, TSTZ, IV],
        arg_names: &["bucket_width", "ts", "timezone", "origin", "offset"],
        ret: TSTZ,
        defaults: 2,
    },
    Proc {
        oid: 15004,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp without time zone",
        result: "timestamp without time zone",
        arg_types: &[IV, TS],
        arg_names: &["bucket_width", "ts"],
        ret: TS,
        defaults: 0,
    },
    Proc {
        oid: 15005,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp without time zone, origin timestamp without time zone",
        result: "timestamp without time zone",
        arg_types: &[IV, TS, TS],
        arg_names: &["bucket_width", "ts", "origin"],
        ret: TS,
        defaults: 0,
    },
    Proc {
        oid: 15006,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts timestamp without time zone, \"offset\" interval",
        result: "timestamp without time zone",
        arg_types: &[IV, TS, IV],
        arg_names: &["bucket_width", "ts", "offset"],
        ret: TS,
        defaults: 0,
    },
    Proc {
        oid: 15007,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts date",
        result: "date",
        arg_types: &[IV, DATE],
        arg_names: &["bucket_width", "ts"],
        ret: DATE,
        defaults: 0,
    },
    Proc {
        oid: 15008,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts date, origin date",
        result: "date",
        arg_types: &[IV, DATE, DATE],
        arg_names: &["bucket_width", "ts", "origin"],
        ret: DATE,
        defaults: 0,
    },
    Proc {
        oid: 15009,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width interval, ts date, \"offset\" interval",
        result: "date",
        arg_types: &[IV, DATE, IV],
        arg_names: &["bucket_width", "ts", "offset"],
        ret: DATE,
        defaults: 0,
    },
    Proc {
        oid: 15010,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width smallint, ts smallint",
        result: "smallint",
        arg_types: &[21, 21],
        arg_names: &["bucket_width", "ts"],
        ret: 21,
        defaults: 0,
    },
    Proc {
        oid: 15011,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width smallint, ts smallint, \"offset\" smallint",
        result: "smallint",
        arg_types: &[21, 21, 21],
        arg_names: &["bucket_width", "ts", "offset"],
        ret: 21,
        defaults: 0,
    },
    Proc {
        oid: 15012,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width integer, ts integer",
        result: "integer",
        arg_types: &[23, 23],
        arg_names: &["bucket_width", "ts"],
        ret: 23,
        defaults: 0,
    },
    Proc {
        oid: 15013,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width integer, ts integer, \"offset\" integer",
        result: "integer",
        arg_types: &[23, 23, 23],
        arg_names: &["bucket_width", "ts", "offset"],
        ret: 23,
        defaults: 0,
    },
    Proc {
        oid: 15014,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width bigint, ts bigint",
        result: "bigint",
        arg_types: &[20, 20],
        arg_names: &["bucket_width", "ts"],
        ret: 20,
        defaults: 0,
    },
    Proc {
        oid: 15015,
        name: "time_bucket",
        kind: b'f',
        args: "bucket_width bigint, ts bigint, \"offset\" bigint",
        result: "bigint",
        arg_types: &[20, 20, 20],
        arg_names: &["bucket_width", "ts", "offset"],
        ret: 20,
        defaults: 0,
    },
    Proc {
        oid: 15020,
        name: "first",
        kind: b'a',
        args: "anyelement, \"any\"",
        result: "anyelement",
        arg_types: &[2283, 2276],
        arg_names: &[],
        ret: 2283,
        defaults: 0,
    },
    Proc {
        oid: 15021,
        name: "last",
        kind: b'a',
        args: "anyelement, \"any\"",
        result: "anyelement",
        arg_types: &[2283, 2276],
        arg_names: &[],
        ret: 2283,
        defaults: 0,
    },
    Proc {
        oid: 15022,
        name: "histogram",
        kind: b'a',
        args: "double precision, double precision, double precision, integer",
        result: "integer[]",
        arg_types: &[701, 701, 701, 23],
        arg_names: &[],
        ret: 1007,
        defaults: 0,
    },
    Proc {
        oid: 15030,
        name: "create_hypertable",
        kind: b'f',
        args: "relation regclass, time_column_name name, chunk_time_interval anyelement DEFAULT NULL::bigint",
        result: "TABLE(hypertable_id integer, schema_name name, table_name name, created boolean)",
        arg_types: &[2205, 19, 2283],
        arg_names: &["relation", "time_column_name", "chunk_time_interval"],
        ret: 2249,
        defaults: 1,
    },
    Proc {
        oid: 15031,
        name: "set_chunk_time_interval",
        kind: b'f',
        args: "hypertable regclass, chunk_time_interval anyelement",
        result: "void",
        arg_types: &[2205, 2283],
        arg_names: &["hypertable", "chunk_time_interval"],
        ret: 2278,
        defaults: 0,
    },
    Proc {
        oid: 15032,
        name: "sundial_flush",
        kind: b'f',
        args: "",
        result: "text",
        arg_types: &[],
        arg_names: &[],
        ret: 25,
        defaults: 0,
    },
    Proc {
        oid: 15033,
        name: "sundial_compact",
        kind: b'f',
        args: "",
        result: "text",
        arg_types: &[],
        arg_names: &[],
        ret: 25,
        defaults: 0,
    },
];

/// The function with oid `oid`.
pub fn proc_by_oid(oid: i64) -> Option<&'static Proc> {
    PROCS.iter().find(|p| i64::from(p.oid) == oid)
}

fn list<T: Into<V> + Clone>(items: &[T]) -> V {
    V::L(items.iter().cloned().map(Into::into).collect())
}

impl From<i32> for V {
    fn from(x: i32) -> V {
        V::I(i64::from(x))
    }
}

impl From<&str> for V {
    fn from(x: &str) -> V {
        V::S(x.to_string())
    }
}

fn yes_no(b: bool) -> V {
    s(if b { "YES" } else { "NO" })
}

/// `information_schema.columns` facts about a type: (data_type, udt_name,
/// character_maximum_length, numeric_precision, radix, scale, datetime_precision).
fn info_type(oid: i32, typmod: i32) -> [V; 7] {
    let t = type_by_oid(i64::from(oid));
    let udt = t.map(|t| s(t.name)).unwrap_or(V::N);
    let data_type = match t {
        Some(t) if t.category == b'A' => "ARRAY".to_string(),
        Some(t) => t.display.to_string(),
        None => "USER-DEFINED".to_string(),
    };
    let n = V::N;
    let (len, prec, radix, scale, dt) = match oid {
        21 => (n.clone(), i(16), i(2), i(0), n),
        23 => (n.clone(), i(32), i(2), i(0), n),
        20 => (n.clone(), i(64), i(2), i(0), n),
        700 => (n.clone(), i(24), i(2), n.clone(), n),
        701 => (n.clone(), i(53), i(2), n.clone(), n),
        1700 if typmod >= 4 => {
            let v = typmod - 4;
            (n.clone(), i((v >> 16) & 0xffff), i(10), i(v & 0xffff), n)
        }
        1700 => (n.clone(), n.clone(), i(10), n.clone(), n),
        1043 | 1042 if typmod >= 4 => (i(typmod - 4), n.clone(), n.clone(), n.clone(), n),
        1082 => (n.clone(), n.clone(), n.clone(), n.clone(), i(0)),
        1114 | 1184 | 1083 | 1186 => (
            n.clone(),
            n.clone(),
            n.clone(),
            n.clone(),
            i(if typmod >= 0 { typmod } else { 6 }),
        ),
        _ => (n.clone(), n.clone(), n.clone(), n.clone(), n),
    };
    [s(data_type), udt, len, prec, radix, scale, dt]
}

fn info_rows(ctx: &CatalogCtx, rel: &str) -> Vec<Row> {
    let db = ctx.db.clone();
    let user = ctx.user();
    let nsname = |ns: i32| namespace_name(i64::from(ns)).unwrap_or("").to_string();
    match rel {
        "schemata" => NAMESPACES
            .iter()
            .map(|(_, name, owner)| {
                vec![
                    ("catalog_name", s(&db)),
                    ("schema_name", s(*name)),
                    ("schema_owner", s(ctx.role_name(i64::from(*owner)))),
                ]
            })
            .collect(),
        "tables" => relations(ctx)
            .into_iter()
            .map(|r| {
                vec![
                    ("table_catalog", s(&db)),
                    ("table_schema", s(nsname(r.ns))),
                    ("table_name", s(r.name)),
                    (
                        "table_type",
                        s(if r.kind == b'r' { "BASE TABLE" } else { "VIEW" }),
                    ),
                    ("is_insertable_into", yes_no(r.kind == b'r')),
                    ("is_typed", yes_no(false)),
                ]
            })
            .collect(),
        "views" => relations(ctx)
            .into_iter()
            .filter(|r| r.kind == b'v')
            .map(|r| {
                vec![
                    ("table_catalog", s(&db)),
                    ("table_schema", s(nsname(r.ns))),
                    ("table_name", s(r.name)),
                    ("check_option", s("NONE")),
                    ("is_updatable", yes_no(false)),
                    ("is_insertable_into", yes_no(false)),
                    ("is_trigger_updatable", yes_no(false)),
                    ("is_trigger_deletable", yes_no(false)),
                    ("is_trigger_insertable_into", yes_no(false)),
                ]
            })
            .collect(),
        "columns" => {
            let mut out = vec![];
            for r in relations(ctx) {
                for (n, a) in r.atts.iter().enumerate() {
                    let [data_type, udt, len, prec, radix, scale, dtp] =
                        info_type(a.type_oid, a.typmod);
                    let coll = type_by_oid(i64::from(a.type_oid))
                        .map(|t| t.collation != 0)
                        .unwrap_or(false);
                    out.push(vec![
                        ("table_catalog", s(&db)),
                        ("table_schema", s(nsname(r.ns))),
                        ("table_name", s(&r.name)),
                        ("column_name", s(&a.name)),
                        ("ordinal_position", i(n as i64 + 1)),
                        (
                            "column_default",
                            a.default.clone().map(V::S).unwrap_or(V::N),
                        ),
                        ("is_nullable", yes_no(!a.notnull)),
                        ("data_type", data_type),
                        ("character_maximum_length", len.clone()),
                        (
                            "character_octet_length",
                            if coll {
                                match len {
                                    V::I(l) => i(l * 4),
                                    _ => i(1_073_741_824),
                                }
                            } else {
                                V::N
                            },
                        ),
                        ("numeric_precision", prec),
                        ("numeric_precision_radix", radix),
                        ("numeric_scale", scale),
                        ("datetime_precision", dtp),
                        ("udt_catalog", s(&db)),
                        ("udt_schema", s("pg_catalog")),
                        ("udt_name", udt),
                        ("dtd_identifier", s((n + 1).to_string())),
                        ("is_self_referencing", yes_no(false)),
                        ("is_identity", yes_no(a.identity.is_some())),
                        (
                            "identity_generation",
                            match a.identity {
                                Some('a') => s("ALWAYS"),
                                Some(_) => s("BY DEFAULT"),
                                None => V::N,
                            },
                        ),
                        ("identity_cycle", yes_no(false)),
                        ("is_generated", s("NEVER")),
                        ("is_updatable", yes_no(r.kind == b'r')),
                    ]);
                }
            }
            out
        }
        _ => {
            let _ = user;
            vec![]
        }
    }
}

fn attstorage(type_oid: i32) -> &'static str {
    match type_by_oid(i64::from(type_oid)).map(|t| t.storage) {
        Some(b'x') => "x",
        Some(b'm') => "m",
        Some(b'e') => "e",
        _ => "p",
    }
}

/// The `pg_catalog` relations that never have rows in Sundial (no indexes,
/// constraints, policies, inheritance, publications, comments, ...).
pub const EMPTY_RELS: &[&str] = &[
    "pg_aggregate",
    "pg_auth_members",
    "pg_conversion",
    "pg_db_role_setting",
    "pg_default_acl",
    "pg_foreign_data_wrapper",
    "pg_foreign_server",
    "pg_largeobject_metadata",
    "pg_opfamily",
    "pg_shdepend",
    "pg_subscription",
    "pg_ts_config",
    "pg_cast",
    "pg_depend",
    "pg_description",
    "pg_enum",
    "pg_event_trigger",
    "pg_foreign_table",
    "pg_index",
    "pg_indexes",
    "pg_inherits",
    "pg_language",
    "pg_locks",
    "pg_matviews",
    "pg_opclass",
    "pg_operator",
    "pg_partitioned_table",
    "pg_policy",
    "pg_publication",
    "pg_publication_namespace",
    "pg_publication_rel",
    "pg_range",
    "pg_rewrite",
    "pg_sequence",
    "pg_sequences",
    "pg_shdescription",
    "pg_stat_activity",
    "pg_statistic_ext",
    "pg_timezone_names",
    "pg_trigger",
];

/// One role as the catalogs show it.
struct RoleRow {
    oid: i32,
    name: String,
    superuser: bool,
    login: bool,
    create_db: bool,
    create_role: bool,
    conn_limit: i32,
    password: Option<crate::catalog::roles::Secret>,
}

/// The roles of the catalog, and PostgreSQL's `pg_database_owner`. The role that
/// owns every object (oid 10) is the configured superuser; under trust it is the
/// session's user when that is not a catalog role.
fn roles(ctx: &CatalogCtx, user: &str) -> Vec<RoleRow> {
    let manifest = ctx.engine.catalog().snapshot();
    let config = ctx.engine.config();
    let trust = config.auth == crate::config::AuthMethod::Trust;
    let owner = if trust && manifest.role(user).is_none() {
        user.to_string()
    } else {
        config.superuser.clone()
    };
    let mut out: Vec<RoleRow> = manifest
        .roles
        .iter()
        .map(|(name, r)| RoleRow {
            oid: if *name == owner {
                ROLE_OWNER
            } else {
                user_oid(r.id)
            },
            name: name.clone(),
            superuser: r.superuser,
            login: r.login,
            create_db: r.create_db,
            create_role: r.create_role,
            conn_limit: r.conn_limit,
            password: r.password.clone(),
        })
        .collect();
    if !out.iter().any(|r| r.oid == ROLE_OWNER) {
        out.push(RoleRow {
            oid: ROLE_OWNER,
            name: owner,
            superuser: true,
            login: true,
            create_db: true,
            create_role: true,
            conn_limit: -1,
            password: None,
        });
    }
    out.push(RoleRow {
        oid: ROLE_DATABASE_OWNER,
        name: "pg_database_owner".into(),
        superuser: false,
        login: false,
        create_db: false,
        create_role: false,
        conn_limit: -1,
        password: None,
    });
    out.sort_by_key(|r| r.oid);
    out
}

fn pg_rows(ctx: &CatalogCtx, rel: &str) -> Vec<Row> {
    if EMPTY_RELS.contains(&rel) {
        return vec![];
    }
    let user = ctx.user();
    match rel {
        "pg_namespace" => NAMESPACES
            .iter()
            .map(|(oid, name, owner)| {
                vec![
                    ("oid", i(*oid)),
                    ("nspname", s(*name)),
                    ("nspowner", i(*owner)),
                ]
            })
            .collect(),
        "pg_class" => {
            let checks = constraints(ctx);
            relations(ctx)
                .into_iter()
                .map(|r| {
                    let n = checks
                        .iter()
                        .filter(|c| c.rel == r.oid && c.kind == 'c')
                        .count();
                    // psql lists foreign keys of tables with triggers (PostgreSQL's are).
                    let fk = checks.iter().any(|c| {
                        c.kind == 'f'
                            && (c.rel == r.oid || c.foreign.as_ref().is_some_and(|f| f.0 == r.oid))
                    });
                    vec![
                        ("relchecks", i(n as i64)),
                        ("relhastriggers", V::B(fk)),
                        ("oid", i(r.oid)),
                        ("relname", s(r.name)),
                        ("relnamespace", i(r.ns)),
                        ("relowner", i(ROLE_OWNER)),
                        ("relam", i(if r.kind == b'r' { 2 } else { 0 })),
                        ("relfilenode", i(if r.kind == b'r' { r.oid } else { 0 })),
                        ("reltuples", V::F(-1.0)),
                        ("relpersistence", s("p")),
                        ("relkind", s(char::from(r.kind).to_string())),
                        ("relnatts", i(r.atts.len() as i64)),
                        ("relispopulated", V::B(true)),
                        ("relreplident", s(if r.kind == b'r' { "d" } else { "n" })),
                    ]
                })
                .collect()
        }
        "pg_attribute" => {
            let mut out = vec![];
            for r in relations(ctx) {
                for (n, a) in r.atts.into_iter().enumerate() {
                    let t = type_by_oid(i64::from(a.type_oid));
                    out.push(vec![
                        ("attrelid", i(r.oid)),
                        ("attname", s(a.name)),
                        ("atttypid", i(a.type_oid)),
                        ("attstattarget", i(-1)),
                        ("attlen", i(t.map(|t| t.len).unwrap_or(-1))),
                        ("attnum", i(n as i64 + 1)),
                        ("attcacheoff", i(-1)),
                        ("atttypmod", i(a.typmod)),
                        ("attbyval", V::B(t.map(|t| t.byval).unwrap_or(false))),
                        (
                            "attalign",
                            s(char::from(t.map(|t| t.align).unwrap_or(b'i')).to_string()),
                        ),
                        ("attstorage", s(attstorage(a.type_oid))),
                        ("attnotnull", V::B(a.notnull)),
                        ("atthasdef", V::B(a.default.is_some())),
                        (
                            "attidentity",
                            s(a.identity.map(String::from).unwrap_or_default()),
                        ),
                        ("attgenerated", s("")),
                        ("attislocal", V::B(true)),
                        ("attcollation", i(t.map(|t| t.collation).unwrap_or(0))),
                    ]);
                }
            }
            out
        }
        "pg_constraint" => constraints(ctx)
            .into_iter()
            .map(|c| {
                vec![
                    ("oid", i(c.oid)),
                    ("conname", s(c.name)),
                    ("connamespace", i(NS_PUBLIC)),
                    ("contype", s(c.kind.to_string())),
                    ("condeferrable", V::B(false)),
                    ("condeferred", V::B(false)),
                    ("convalidated", V::B(c.validated)),
                    ("conrelid", i(c.rel)),
                    ("contypid", i(0)),
                    ("conindid", i(0)),
                    ("conparentid", i(0)),
                    ("confrelid", i(c.foreign.as_ref().map_or(0, |f| f.0))),
                    (
                        "confupdtype",
                        s(if c.foreign.is_some() { "a" } else { " " }),
                    ),
                    (
                        "confdeltype",
                        s(c.foreign.as_ref().map_or(' ', |f| f.2).to_string()),
                    ),
                    (
                        "confmatchtype",
                        s(if c.foreign.is_some() { "s" } else { " " }),
                    ),
                    (
                        "confkey",
                        match &c.foreign {
                            Some(f) => list(&f.1.iter().map(|k| i32::from(*k)).collect::<Vec<_>>()),
                            None => V::N,
                        },
                    ),
                    ("conislocal", V::B(true)),
                    ("coninhcount", i(0)),
                    ("connoinherit", V::B(false)),
                    (
                        "conkey",
                        list(&c.key.iter().map(|k| i32::from(*k)).collect::<Vec<_>>()),
                    ),
                ]
            })
            .collect(),
        "pg_attrdef" => {
            let mut out = vec![];
            for r in relations(ctx) {
                for (n, a) in r.atts.into_iter().enumerate() {
                    if let Some(d) = a.default {
                        out.push(vec![
                            ("oid", i(0)),
                            ("adrelid", i(r.oid)),
                            ("adnum", i(n as i64 + 1)),
                            ("adbin", s(d)),
                        ]);
                    }
                }
            }
            out
        }
        "pg_type" => TYPES
            .iter()
            .map(|t| {
                vec![
                    ("oid", i(t.oid)),
                    ("typname", s(t.name)),
                    ("typnamespace", i(NS_PG_CATALOG)),
                    ("typowner", i(ROLE_OWNER)),
                    ("typlen", i(t.len)),
                    ("typbyval", V::B(t.byval)),
                    ("typtype", s(char::from(t.kind).to_string())),
                    ("typcategory", s(char::from(t.category).to_string())),
                    ("typispreferred", V::B(t.preferred)),
                    ("typisdefined", V::B(true)),
                    ("typdelim", s(",")),
                    ("typelem", i(t.elem)),
                    ("typarray", i(t.array)),
                    ("typalign", s(char::from(t.align).to_string())),
                    ("typstorage", s(char::from(t.storage).to_string())),
                    ("typtypmod", i(-1)),
                    ("typcollation", i(t.collation)),
                ]
            })
            .collect(),
        "pg_database" => ctx
            .engine
            .catalog()
            .snapshot()
            .databases
            .iter()
            .map(|(name, d)| {
                vec![
                    ("oid", i(database_oid(d.id))),
                    ("datname", s(name)),
                    ("datdba", i(ROLE_OWNER)),
                    ("encoding", i(6)),
                    ("datlocprovider", s("c")),
                    ("datallowconn", V::B(true)),
                    ("datconnlimit", i(-1)),
                    ("dattablespace", i(1663)),
                    ("datcollate", s("C.UTF-8")),
                    ("datctype", s("C.UTF-8")),
                ]
            })
            .collect(),
        // PostgreSQL's plpgsql, and timescaledb in `public` as TimescaleDB installs
        // itself (Grafana and other tools look here to enable their TimescaleDB SQL).
        "pg_extension" => [
            (13559, "plpgsql", NS_PG_CATALOG, "1.0"),
            (
                FIRST_USER_OID as i32,
                "timescaledb",
                NS_PUBLIC,
                TIMESCALEDB_VERSION,
            ),
        ]
        .into_iter()
        .map(|(oid, name, ns, version)| {
            vec![
                ("oid", i(oid)),
                ("extname", s(name)),
                ("extowner", i(ROLE_OWNER)),
                ("extnamespace", i(ns)),
                ("extrelocatable", V::B(false)),
                ("extversion", s(version)),
            ]
        })
        .collect(),
        "pg_am" => vec![
            vec![("oid", i(2)), ("amname", s("heap")), ("amtype", s("t"))],
            vec![("oid", i(403)), ("amname", s("btree")), ("amtype", s("i"))],
        ],
        "pg_collation" => vec![
            vec![
                ("oid", i(100)),
                ("collname", s("default")),
                ("collnamespace", i(NS_PG_CATALOG)),
                ("collowner", i(ROLE_OWNER)),
                ("collprovider", s("d")),
                ("collisdeterministic", V::B(true)),
                ("collencoding", i(-1)),
            ],
            vec![
                ("oid", i(950)),
                ("collname", s("C")),
                ("collnamespace", i(NS_PG_CATALOG)),
                ("collowner", i(ROLE_OWNER)),
                ("collprovider", s("c")),
                ("collisdeterministic", V::B(true)),
                ("collencoding", i(-1)),
                ("collcollate", s("C")),
                ("collctype", s("C")),
            ],
        ],
        "pg_roles" | "pg_authid" => {
            let superuser = ctx.engine.config().auth == crate::config::AuthMethod::Trust
                || ctx
                    .engine
                    .catalog()
                    .snapshot()
                    .role(&user)
                    .is_some_and(|r| r.superuser);
            roles(ctx, &user)
                .into_iter()
                .map(|r| {
                    let password = match (rel, &r.password) {
                        ("pg_roles", _) => s("********"),
                        // Only superusers see password verifiers.
                        (_, Some(p)) if superuser => s(p.verifier()),
                        _ => V::N,
                    };
                    vec![
                        ("oid", i(r.oid)),
                        ("rolname", s(r.name)),
                        ("rolsuper", V::B(r.superuser)),
                        ("rolinherit", V::B(true)),
                        ("rolcreaterole", V::B(r.create_role)),
                        ("rolcreatedb", V::B(r.create_db)),
                        ("rolcanlogin", V::B(r.login)),
                        ("rolreplication", V::B(r.superuser)),
                        ("rolbypassrls", V::B(r.superuser)),
                        ("rolconnlimit", i(r.conn_limit)),
                        ("rolpassword", password),
                    ]
                })
                .collect()
        }
        "pg_user" => roles(ctx, &user)
            .into_iter()
            .filter(|r| r.login)
            .map(|r| {
                vec![
                    ("usename", s(r.name)),
                    ("usesysid", i(r.oid)),
                    ("usecreatedb", V::B(r.create_db)),
                    ("usesuper", V::B(r.superuser)),
                    ("userepl", V::B(r.superuser)),
                    ("usebypassrls", V::B(r.superuser)),
                    ("passwd", s("********")),
                ]
            })
            .collect(),
        "pg_tablespace" => vec![
            vec![
                ("oid", i(1663)),
                ("spcname", s("pg_default")),
                ("spcowner", i(ROLE_OWNER)),
            ],
            vec![
                ("oid", i(1664)),
                ("spcname", s("pg_global")),
                ("spcowner", i(ROLE_OWNER)),
            ],
        ],
        "pg_settings" => ctx
            .settings
            .read()
            .iter()
            .map(|(k, v)| {
                vec![
                    ("name", s(k)),
                    ("setting", s(v)),
                    ("category", s("Sundial")),
                    ("short_desc", s("")),
                    ("context", s("user")),
                    ("vartype", s("string")),
                    ("source", s("default")),
                    ("boot_val", s(v)),
                    ("reset_val", s(v)),
                    ("pending_restart", V::B(false)),
                ]
            })
            .collect(),
        "pg_proc" => PROCS
            .iter()
            .map(|p| {
                vec![
                    ("oid", i(p.oid)),
                    ("proname", s(p.name)),
                    ("pronamespace", i(NS_PUBLIC)),
                    ("proowner", i(ROLE_OWNER)),
                    ("prolang", i(13)),
                    ("procost", V::F(1.0)),
                    ("prokind", s(char::from(p.kind).to_string())),
                    ("provolatile", s("i")),
                    ("proparallel", s("s")),
                    ("pronargs", i(p.arg_types.len() as i64)),
                    ("pronargdefaults", i(p.defaults)),
                    ("prorettype", i(p.ret)),
                    ("proargtypes", list(p.arg_types)),
                    (
                        "proargnames",
                        if p.arg_names.is_empty() {
                            V::N
                        } else {
                            list(p.arg_names)
                        },
                    ),
                    ("prosrc", s(p.name)),
                ]
            })
            .collect(),
        "pg_stat_user_tables" => ctx
            .tables()
            .iter()
            .map(|t| {
                let rows: u64 = t.files.iter().map(|f| f.rows).sum();
                vec![
                    ("relid", i(table_oid(t.id))),
                    ("schemaname", s("public")),
                    ("relname", s(&t.name)),
                    ("n_live_tup", i(i64::try_from(rows).unwrap_or(i64::MAX))),
                ]
            })
            .collect(),
        "pg_tables" | "pg_views" => {
            let view = rel == "pg_views";
            relations(ctx)
                .into_iter()
                .filter(|r| (r.kind == b'v') == view)
                .map(|r| {
                    let ns = namespace_name(i64::from(r.ns)).unwrap_or("");
                    if view {
                        vec![
                            ("schemaname", s(ns)),
                            ("viewname", s(r.name)),
                            ("viewowner", s(&user)),
                        ]
                    } else {
                        vec![
                            ("schemaname", s(ns)),
                            ("tablename", s(r.name)),
                            ("tableowner", s(&user)),
                            ("hasindexes", V::B(false)),
                            ("hasrules", V::B(false)),
                            ("hastriggers", V::B(false)),
                            ("rowsecurity", V::B(false)),
                        ]
                    }
                })
                .collect()
        }
        _ => vec![],
    }
}

/// A schema of catalog relations (`pg_catalog` or `information_schema`).
#[derive(Debug)]
pub struct CatalogSchema {
    ctx: Arc<CatalogCtx>,
    ns: i32,
    rels: &'static [RelDef],
}

impl CatalogSchema {
    /// The `pg_catalog` schema of a connection.
    pub fn pg_catalog(ctx: Arc<CatalogCtx>) -> CatalogSchema {
        CatalogSchema {
            ctx,
            ns: NS_PG_CATALOG,
            rels: PG_CATALOG_RELS,
        }
    }

    /// The `information_schema` schema of a connection.
    pub fn information_schema(ctx: Arc<CatalogCtx>) -> CatalogSchema {
        CatalogSchema {
            ctx,
            ns: NS_INFORMATION_SCHEMA,
            rels: INFO_SCHEMA_RELS,
        }
    }

    /// The relation `name` of this schema as a table.
    pub fn get(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        let def = self.rels.iter().find(|d| d.name == name)?;
        let (ctx, ns, schema) = (self.ctx.clone(), self.ns, def.schema());
        let out = schema.clone();
        Some(Arc::new(crate::query::system::SystemTable::new(
            schema,
            move || {
                let rows = if ns == NS_PG_CATALOG {
                    pg_rows(&ctx, def.name)
                } else {
                    info_rows(&ctx, def.name)
                };
                to_batch(def, &out, rows)
            },
        )))
    }
}

#[async_trait]
impl SchemaProvider for CatalogSchema {
    fn table_names(&self) -> Vec<String> {
        self.rels.iter().map(|d| d.name.to_string()).collect()
    }
    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self.get(name))
    }
    fn table_exist(&self, name: &str) -> bool {
        self.rels.iter().any(|d| d.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_types_like_postgres() {
        assert_eq!(
            format_type(1184, Some(-1)).as_deref(),
            Some("timestamp with time zone")
        );
        assert_eq!(
            format_type(1700, Some((10 << 16 | 2) + 4)).as_deref(),
            Some("numeric(10,2)")
        );
        assert_eq!(
            format_type(1043, Some(24)).as_deref(),
            Some("character varying(20)")
        );
        assert_eq!(format_type(1009, None).as_deref(), Some("text[]"));
        assert_eq!(format_type(99999, None), None);
        assert_eq!(type_by_name("double precision").map(|t| t.oid), Some(701));
        assert_eq!(type_by_name("pg_catalog.int4").map(|t| t.oid), Some(23));
        assert_eq!(type_by_name("text[]").map(|t| t.oid), Some(1009));
        assert_eq!(type_by_name("numeric(10,2)").map(|t| t.oid), Some(1700));
        assert!(type_by_name("hstore").is_none());
    }

    #[test]
    fn parses_identifiers_like_postgres() {
        assert_eq!(
            parse_ident("Public.CPU"),
            Some(vec!["public".into(), "cpu".into()])
        );
        assert_eq!(
            parse_ident("\"My\"\"T\".x"),
            Some(vec!["My\"T".into(), "x".into()])
        );
        assert_eq!(parse_ident("a..b"), None);
        assert_eq!(parse_ident(""), None);
    }

    #[test]
    fn oids_are_the_catalog_ids_above_first_user_oid() {
        assert_eq!(table_oid(1), 16385);
        assert_eq!(database_oid(u64::MAX), i32::MAX);
    }
}
