//! `CREATE ROLE` / `CREATE USER`, `ALTER ROLE` / `ALTER USER` and `DROP ROLE` /
//! `DROP USER`: role attributes and passwords, with PostgreSQL's rules on who may
//! change what (superusers, CREATEROLE roles, a role changing its own password).

use datafusion::sql::sqlparser::ast::{
    AlterRoleOperation, CreateRole, Expr, ObjectType, Password, RoleOption, Statement,
    UnaryOperator, Value,
};

use super::{Output, Session, args, prepass};
use crate::catalog::roles::RoleOptions;
use crate::config::AuthMethod;
use crate::error::{Error, Result};

/// Whether `stmt` is a role statement.
pub fn handles(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::CreateRole(_)
            | Statement::AlterRole { .. }
            | Statement::Drop {
                object_type: ObjectType::Role | ObjectType::User,
                ..
            }
    )
}

fn denied(what: &str) -> Error {
    Error::sql("42501", format!("permission denied to {what}"))
}

impl Session {
    /// Whether this session's role is a superuser (everyone is under trust).
    pub fn is_superuser(&self) -> bool {
        self.engine.config().auth == AuthMethod::Trust || self.role_is(|r| r.superuser)
    }

    /// Whether this session's role may create, change and drop roles.
    fn may_manage_roles(&self) -> bool {
        self.is_superuser() || self.role_is(|r| r.create_role)
    }

    /// Whether this session's role exists and `f` holds for it.
    fn role_is(&self, f: impl FnOnce(&crate::catalog::roles::RoleDef) -> bool) -> bool {
        self.engine
            .catalog()
            .snapshot()
            .role(&self.user)
            .is_some_and(f)
    }
}

pub fn execute(s: &Session, stmt: &Statement) -> Result<Output> {
    match stmt {
        Statement::CreateRole(c) => create(s, c),
        Statement::AlterRole { name, operation } => {
            s.check_ddl_in_block("ALTER ROLE")?;
            let name = name.value.clone();
            let AlterRoleOperation::WithOptions { options } = operation else {
                return Err(Error::NotSupported(format!(
                    "ALTER ROLE {operation} is not supported (Sundial supports ALTER ROLE name [WITH] options)"
                )));
            };
            let opts = options_of(options)?;
            let own_password_only = name == s.user
                && opts.password.is_some()
                && RoleOptions {
                    password: None,
                    ..opts.clone()
                }
                .is_empty();
            if !(own_password_only || s.may_manage_roles()) {
                return Err(denied("alter role"));
            }
            if opts.superuser.is_some() && !s.is_superuser() {
                return Err(denied("alter superuser attribute"));
            }
            if name == s.engine.config().superuser
                && (opts.superuser == Some(false) || opts.login == Some(false))
            {
                return Err(Error::sql(
                    "42501",
                    format!(
                        "role \"{name}\" is the configured superuser: its SUPERUSER and LOGIN stay"
                    ),
                ));
            }
            s.engine.catalog().alter_role(&name, &opts)?;
            Ok(Output::Command("ALTER ROLE".into()))
        }
        Statement::Drop {
            object_type,
            if_exists,
            names,
            ..
        } => {
            s.check_ddl_in_block("DROP ROLE")?;
            if !s.may_manage_roles() {
                return Err(denied("drop role"));
            }
            let names = names
                .iter()
                .map(args::ident_name)
                .collect::<Result<Vec<_>>>()?;
            for n in &names {
                if *n == s.user {
                    return Err(Error::sql("55006", "current user cannot be dropped"));
                }
                if *n == s.engine.config().superuser {
                    return Err(Error::sql(
                        "2BP01",
                        format!(
                            "cannot drop role {n} because it is required by the database system"
                        ),
                    ));
                }
            }
            // Absent roles under IF EXISTS are skipped (PostgreSQL says so in a
            // NOTICE; Sundial sends no notices).
            s.engine.catalog().drop_roles(&names, *if_exists)?;
            let tag = match object_type {
                ObjectType::User => "DROP USER",
                _ => "DROP ROLE",
            };
            Ok(Output::Command(tag.into()))
        }
        _ => Err(Error::Internal("not a role statement".into())),
    }
}

fn create(s: &Session, c: &CreateRole) -> Result<Output> {
    let user = c.in_role.iter().any(|r| r.value == prepass::USER_MARK);
    let tag = if user { "CREATE USER" } else { "CREATE ROLE" };
    s.check_ddl_in_block(tag)?;
    if !s.may_manage_roles() {
        return Err(denied("create role"));
    }
    if c.in_role.iter().any(|r| r.value != prepass::USER_MARK)
        || !c.in_group.is_empty()
        || !c.role.is_empty()
        || !c.user.is_empty()
        || !c.admin.is_empty()
    {
        return Err(Error::NotSupported(
            "role membership (IN ROLE, ROLE, ADMIN) is not supported".into(),
        ));
    }
    let mut options = vec![];
    let flags = [
        (c.superuser, RoleOption::SuperUser as fn(bool) -> RoleOption),
        (c.login, RoleOption::Login),
        (c.create_db, RoleOption::CreateDB),
        (c.create_role, RoleOption::CreateRole),
    ];
    for (v, f) in flags {
        if let Some(v) = v {
            options.push(f(v));
        }
    }
    if let Some(p) = &c.password {
        options.push(RoleOption::Password(p.clone()));
    }
    if let Some(e) = &c.connection_limit {
        options.push(RoleOption::ConnectionLimit(e.clone()));
    }
    let opts = options_of(&options)?;
    if opts.superuser == Some(true) && !s.is_superuser() {
        return Err(denied("create superuser"));
    }
    for name in &c.names {
        let name = args::ident_name(name)?;
        if name.len() > 63 {
            return Err(Error::sql(
                "42622",
                format!("role name \"{name}\" is longer than 63 bytes"),
            ));
        }
        if name.starts_with("pg_") {
            return Err(Error::sql(
                "42939",
                format!(
                    "role name \"{name}\" is reserved. Hint: Role names starting with \"pg_\" are reserved."
                ),
            ));
        }
        let exists = s.engine.catalog().snapshot().role(&name).is_some();
        if exists && c.if_not_exists {
            continue;
        }
        s.engine.catalog().create_role(&name, user, &opts)?;
    }
    Ok(Output::Command(tag.into()))
}

impl RoleOptions {
    fn is_empty(&self) -> bool {
        self.superuser.is_none()
            && self.login.is_none()
            && self.create_db.is_none()
            && self.create_role.is_none()
            && self.conn_limit.is_none()
            && self.password.is_none()
    }
}

fn options_of(options: &[RoleOption]) -> Result<RoleOptions> {
    let mut o = RoleOptions::default();
    for opt in options {
        match opt {
            RoleOption::SuperUser(v) => o.superuser = Some(*v),
            RoleOption::Login(v) => o.login = Some(*v),
            RoleOption::CreateDB(v) => o.create_db = Some(*v),
            RoleOption::CreateRole(v) => o.create_role = Some(*v),
            // Accepted and without effect here: no inheritance, replication or RLS.
            RoleOption::Inherit(_) | RoleOption::Replication(_) | RoleOption::BypassRLS(_) => {}
            RoleOption::ConnectionLimit(e) => {
                let n = int_of(e)?;
                if n < -1 {
                    return Err(Error::sql(
                        "22023",
                        format!("invalid connection limit: {n}"),
                    ));
                }
                o.conn_limit = Some(n);
            }
            RoleOption::Password(Password::NullPassword) => o.password = Some(None),
            RoleOption::Password(Password::Password(e)) => {
                let p = string_of(e)
                    .ok_or_else(|| Error::sql("42601", "PASSWORD must be a string constant"))?;
                if p.starts_with("SCRAM-SHA-256$")
                    || (p.len() == 35
                        && p.starts_with("md5")
                        && p[3..].chars().all(|c| c.is_ascii_hexdigit()))
                {
                    return Err(Error::NotSupported(
                        "pre-hashed passwords are not supported: give the password itself (it is stored hashed)".into(),
                    ));
                }
                // PostgreSQL stores an empty password as none at all.
                o.password = Some(Some(p).filter(|p| !p.is_empty()));
            }
            RoleOption::ValidUntil(_) => {
                return Err(Error::NotSupported("VALID UNTIL is not supported".into()));
            }
        }
    }
    Ok(o)
}

fn string_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn int_of(e: &Expr) -> Result<i32> {
    let bad = || Error::sql("42601", format!("CONNECTION LIMIT {e} is not an integer"));
    match e {
        Expr::Value(v) => match &v.value {
            // `-N`, as the pre-pass hands it over.
            Value::Number(n, _) => match n.parse::<u64>() {
                Ok(v) if v >= prepass::NEGATIVE_LIMIT => i32::try_from(v - prepass::NEGATIVE_LIMIT)
                    .map(|v| -v)
                    .map_err(|_| bad()),
                _ => n.parse().map_err(|_| bad()),
            },
            _ => Err(bad()),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => int_of(expr).map(|n| -n),
        _ => Err(bad()),
    }
}
