//! Privileges: `GRANT` / `REVOKE` (CONNECT and CREATE on a database, SELECT, INSERT,
//! UPDATE, DELETE, TRUNCATE on tables and views), and the check every statement of
//! a role that is not a superuser passes before it is planned (42501 otherwise).

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::resolve::resolve_table_references;
use datafusion::sql::sqlparser::ast::{
    Action, CopySource, FromTable, GrantObjects, Grantee, GranteeName, GranteesType, ObjectType,
    Privileges, Statement, TableFactor,
};

use super::{Output, Session, args};
use crate::catalog::roles::{GrantChange, Privilege};
use crate::error::{Error, Result};

/// Schemas everyone may read (the catalogs).
const OPEN_SCHEMAS: [&str; 4] = [
    "pg_catalog",
    "information_schema",
    "timescaledb_information",
    "timescaledb_experimental",
];

/// Whether `stmt` is GRANT or REVOKE.
pub fn handles(stmt: &Statement) -> bool {
    matches!(stmt, Statement::Grant(_) | Statement::Revoke(_))
}

fn lit(t: &str) -> datafusion::sql::sqlparser::ast::Expr {
    datafusion::sql::sqlparser::ast::Expr::value(
        datafusion::sql::sqlparser::ast::Value::SingleQuotedString(t.to_string()),
    )
}

fn denied(kind: &str, name: &str) -> Error {
    Error::sql("42501", format!("permission denied for {kind} {name}"))
}

/// Checks that this session's role may run `stmt`; superusers may run anything.
pub fn check(s: &Session, stmt: &Statement) -> Result<()> {
    if s.is_superuser() {
        return Ok(());
    }
    let m = s.engine.catalog().snapshot();
    let db = s.db.as_str();
    let user = s.user.as_str();
    let need = |name: &str, p: Privilege| -> Result<()> {
        let known = m
            .databases
            .get(db)
            .is_some_and(|d| d.tables.contains_key(name) || d.views.contains_key(name));
        // An unknown name is the planner's to report (42P01).
        if !known || m.allowed(user, db, name, p) {
            Ok(())
        } else {
            Err(denied(
                if m.databases
                    .get(db)
                    .is_some_and(|d| d.views.contains_key(name))
                {
                    "view"
                } else {
                    "table"
                },
                name,
            ))
        }
    };
    let owner = |name: &str| -> Result<()> {
        match m.owner(db, name) == Some(user) {
            true => Ok(()),
            false => Err(Error::sql(
                "42501",
                format!("must be owner of table {name}"),
            )),
        }
    };
    let target = |name: &datafusion::sql::sqlparser::ast::ObjectName| args::table_name(name);
    // The relation written to, and the privilege the write needs.
    let written: Option<(String, Privilege)> = match stmt {
        Statement::Insert(i) => match &i.table {
            datafusion::sql::sqlparser::ast::TableObject::TableName(n) => {
                Some((target(n)?, Privilege::Insert))
            }
            _ => None,
        },
        Statement::Delete(d) => {
            let tables = match &d.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            match tables.first().map(|t| &t.relation) {
                Some(TableFactor::Table { name, .. }) => Some((target(name)?, Privilege::Delete)),
                _ => None,
            }
        }
        Statement::Update(u) => match &u.table.relation {
            TableFactor::Table { name, .. } => Some((target(name)?, Privilege::Update)),
            _ => None,
        },
        Statement::Truncate(t) => {
            for n in &t.table_names {
                need(&target(&n.name)?, Privilege::Truncate)?;
            }
            return Ok(());
        }
        Statement::Copy {
            source: CopySource::Table { table_name, .. },
            to,
            ..
        } => {
            let p = if *to {
                Privilege::Select
            } else {
                Privilege::Insert
            };
            return need(&target(table_name)?, p);
        }
        Statement::CreateTable(_) | Statement::CreateView(_) => {
            if !m.may_create(user, db) {
                return Err(Error::sql("42501", "permission denied for schema public"));
            }
            None
        }
        Statement::Drop {
            object_type: ObjectType::Table | ObjectType::View,
            names,
            ..
        } => {
            for n in names {
                let n = target(n)?;
                if m.databases
                    .get(db)
                    .is_some_and(|d| d.tables.contains_key(&n) || d.views.contains_key(&n))
                {
                    owner(&n)?;
                }
            }
            return Ok(());
        }
        Statement::AlterTable(a) => return owner(&target(&a.name)?),
        Statement::CreateDatabase { .. }
        | Statement::Drop {
            object_type: ObjectType::Database,
            ..
        } => {
            if m.role(user).is_some_and(|r| r.create_db) {
                return Ok(());
            }
            return Err(Error::sql("42501", "permission denied to create database"));
        }
        Statement::Call(f) if super::maintenance::is_call(f) => return Ok(()),
        Statement::Call(_) => {
            return Err(Error::sql("42501", "only superusers may run jobs by hand"));
        }
        Statement::Query(_) => {
            let bare = super::ddl::management_call(stmt);
            let calls = bare
                .iter()
                .map(|(name, fargs)| (name.clone(), first_table_arg(fargs)))
                .chain(
                    super::signatures::management_calls(stmt)
                        .into_iter()
                        .map(|(n, t)| (n.to_string(), t)),
                );
            for (name, table) in calls {
                let table = table
                    .as_deref()
                    .and_then(|t| args::regclass_name(&lit(t)).ok());
                match (name.as_str(), table) {
                    // Sizes and chunk lists: for those who may read the table.
                    (
                        "show_chunks"
                        | "hypertable_size"
                        | "hypertable_detailed_size"
                        | "chunks_detailed_size"
                        | "approximate_row_count"
                        | "hypertable_compression_stats"
                        | "hypertable_columnstore_stats"
                        | "chunk_compression_stats"
                        | "chunk_columnstore_stats",
                        Some(t),
                    ) => need(&t, Privilege::Select)?,
                    // A chunk: compressing changes how it is stored, not what it holds.
                    ("compress_chunk" | "decompress_chunk", _) => {}
                    // Changing a hypertable: its owner.
                    (
                        "create_hypertable"
                        | "set_chunk_time_interval"
                        | "drop_chunks"
                        | "add_retention_policy"
                        | "remove_retention_policy"
                        | "add_continuous_aggregate_policy"
                        | "remove_continuous_aggregate_policy"
                        | "add_compression_policy"
                        | "remove_compression_policy",
                        Some(t),
                    ) => owner(&t)?,
                    _ => {
                        return Err(Error::sql(
                            "42501",
                            format!("permission denied for function {name} (superusers only)"),
                        ));
                    }
                }
            }
            if bare.is_some() {
                return Ok(());
            }
            None
        }
        _ => None,
    };
    if let Some((name, p)) = &written {
        need(name, *p)?;
    }
    let wrapped = DfStatement::Statement(Box::new(stmt.clone()));
    let (relations, _) = resolve_table_references(&wrapped, true)?;
    for r in relations {
        if r.schema().is_some_and(|s| OPEN_SCHEMAS.contains(&s)) {
            continue;
        }
        let name = r.table();
        if written.as_ref().is_some_and(|(w, _)| w == name) {
            continue;
        }
        need(name, Privilege::Select)?;
    }
    Ok(())
}

/// Checks INSERT on `table` (the fast path of plain `INSERT ... VALUES`).
pub fn check_insert(s: &Session, table: &str) -> Result<()> {
    if s.is_superuser()
        || s.engine
            .catalog()
            .snapshot()
            .allowed(&s.user, &s.db, table, Privilege::Insert)
    {
        return Ok(());
    }
    Err(denied("table", table))
}

/// Runs GRANT or REVOKE.
pub fn execute(s: &Session, stmt: &Statement) -> Result<Output> {
    let (privileges, objects, grantees, grant) = match stmt {
        Statement::Grant(g) => (&g.privileges, &g.objects, &g.grantees, true),
        Statement::Revoke(r) => (&r.privileges, &r.objects, &r.grantees, false),
        _ => return Err(Error::Internal("not GRANT or REVOKE".into())),
    };
    let tag = if grant { "GRANT" } else { "REVOKE" };
    s.check_ddl_in_block(tag)?;
    let m = s.engine.catalog().snapshot();
    let roles = grantees.iter().map(grantee).collect::<Result<Vec<_>>>()?;
    let actions: Option<&Vec<Action>> = match privileges {
        Privileges::All { .. } => None,
        Privileges::Actions(a) => Some(a),
    };
    let unsupported = |what: String| Error::NotSupported(format!("{tag} {what} is not supported"));
    let changes: Vec<GrantChange> = match objects {
        Some(GrantObjects::Databases(dbs)) => {
            if !s.is_superuser() {
                return Err(Error::sql(
                    "42501",
                    "permission denied for database (only superusers grant database privileges)",
                ));
            }
            let mut out = vec![];
            for d in dbs {
                let db = args::ident_name(d)?;
                m.database(&db)?;
                let (connect, create) = match actions {
                    None => (true, true),
                    Some(a) => {
                        let mut c = (false, false);
                        for act in a {
                            match act {
                                Action::Connect => c.0 = true,
                                Action::Create { .. } => c.1 = true,
                                // TEMP: no temporary tables here; accepted as PostgreSQL's default.
                                Action::Temporary => {}
                                other => {
                                    return Err(Error::sql(
                                        "0LP01",
                                        format!("invalid privilege type {other} for database"),
                                    ));
                                }
                            }
                        }
                        c
                    }
                };
                if connect {
                    out.push(GrantChange::Connect { db: db.clone() });
                }
                if create {
                    out.push(GrantChange::Create { db });
                }
            }
            out
        }
        Some(GrantObjects::Schemas(schemas)) => {
            if !s.is_superuser() {
                return Err(Error::sql("42501", "permission denied for schema public"));
            }
            for sc in schemas {
                if !args::ident_name(sc)?.eq_ignore_ascii_case("public") {
                    return Err(unsupported(format!("on schema {sc}")));
                }
            }
            match actions {
                None => vec![GrantChange::Create { db: s.db.clone() }],
                Some(a)
                    if a.iter()
                        .all(|x| matches!(x, Action::Create { .. } | Action::Usage)) =>
                {
                    if a.iter().any(|x| matches!(x, Action::Create { .. })) {
                        vec![GrantChange::Create { db: s.db.clone() }]
                    } else {
                        vec![] // USAGE on public: everyone has it
                    }
                }
                Some(_) => return Err(Error::sql("0LP01", "invalid privilege type for schema")),
            }
        }
        Some(GrantObjects::Tables(names)) => {
            let tables = names
                .iter()
                .map(args::table_name)
                .collect::<Result<Vec<_>>>()?;
            table_change(s, &m, tables, actions)?
        }
        Some(GrantObjects::AllTablesInSchema { schemas }) => {
            for sc in schemas {
                if !args::ident_name(sc)?.eq_ignore_ascii_case("public") {
                    return Err(unsupported(format!("on all tables in schema {sc}")));
                }
            }
            // As in PostgreSQL: the tables and views that exist now.
            let d = m.database(&s.db)?;
            let tables = d.tables.keys().chain(d.views.keys()).cloned().collect();
            table_change(s, &m, tables, actions)?
        }
        Some(other) => return Err(unsupported(format!("on {other}"))),
        None => return Err(unsupported("of roles (membership)".into())),
    };
    for c in &changes {
        s.engine.catalog().change_grants(&roles, c, grant)?;
    }
    s.plans.clear();
    Ok(Output::Command(tag.into()))
}

/// A grantee: `Some(role)`, or `None` for PUBLIC.
fn grantee(g: &Grantee) -> Result<Option<String>> {
    match (&g.grantee_type, &g.name) {
        (GranteesType::Public, _) => Ok(None),
        (_, Some(GranteeName::ObjectName(n))) => {
            let n = args::ident_name(n)?;
            Ok((!n.eq_ignore_ascii_case("public")).then_some(n))
        }
        _ => Err(Error::NotSupported(format!("grantee {g} is not supported"))),
    }
}

/// Privilege bits on `tables` of the session's database; only superusers and the
/// tables' owner may grant them.
fn table_change(
    s: &Session,
    m: &crate::catalog::Manifest,
    tables: Vec<String>,
    actions: Option<&Vec<Action>>,
) -> Result<Vec<GrantChange>> {
    let d = m.database(&s.db)?;
    for t in &tables {
        if !d.tables.contains_key(t) && !d.views.contains_key(t) {
            return Err(Error::UndefinedTable(t.clone()));
        }
        if !s.is_superuser() && m.owner(&s.db, t) != Some(s.user.as_str()) {
            return Err(denied("table", t));
        }
    }
    let bits = match actions {
        None => Privilege::ALL,
        Some(a) => {
            let mut bits = 0u8;
            for act in a {
                bits |= match act {
                    Action::Select { .. } => Privilege::Select as u8,
                    Action::Insert { .. } => Privilege::Insert as u8,
                    Action::Update { .. } => Privilege::Update as u8,
                    Action::Delete => Privilege::Delete as u8,
                    Action::Truncate => Privilege::Truncate as u8,
                    // No foreign keys or triggers: nothing to grant, as accepted.
                    Action::References { .. } | Action::Trigger => 0,
                    other => {
                        return Err(Error::sql(
                            "0LP01",
                            format!("invalid privilege type {other} for table"),
                        ));
                    }
                };
            }
            bits
        }
    };
    Ok(vec![GrantChange::Tables {
        db: s.db.clone(),
        tables,
        bits,
    }])
}

/// The table a management function names first (`'m'`, `'public.m'`, `'m'::regclass`).
fn first_table_arg(fargs: &[datafusion::sql::sqlparser::ast::FunctionArg]) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, Value};
    let mut e = match fargs.first()? {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
        | FunctionArg::Named {
            arg: FunctionArgExpr::Expr(e),
            ..
        }
        | FunctionArg::ExprNamed {
            arg: FunctionArgExpr::Expr(e),
            ..
        } => e,
        _ => return None,
    };
    while let Expr::Cast { expr, .. } = e {
        e = expr;
    }
    let Expr::Value(v) = e else { return None };
    let Value::SingleQuotedString(name) = &v.value else {
        return None;
    };
    Some(name.strip_prefix("public.").unwrap_or(name).to_string())
}
