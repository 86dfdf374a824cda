//! Roles (`CREATE ROLE`): their attributes and password secrets, kept in the
//! manifest. A password is never stored: only its SCRAM-SHA-256 salted hash and its
//! md5 hash, the forms the Postgres port's authentication methods check against.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::{Catalog, Manifest};
use crate::error::{Error, Result};

/// PBKDF2 rounds of a new SCRAM secret (PostgreSQL's `scram_iterations` default).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// One role. `oid` is `16384 + id`, stable across restarts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RoleDef {
    pub id: u64,
    pub superuser: bool,
    pub login: bool,
    #[serde(default)]
    pub create_db: bool,
    #[serde(default)]
    pub create_role: bool,
    /// `CONNECTION LIMIT`; -1 for none.
    #[serde(default = "no_limit")]
    pub conn_limit: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// Privileges granted, by database.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grants: BTreeMap<String, DbGrants>,
}

/// What a role was granted in one database.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DbGrants {
    /// `GRANT CONNECT ON DATABASE` (needed once CONNECT is revoked from PUBLIC).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connect: bool,
    /// `GRANT CREATE ON DATABASE` / `ON SCHEMA public`: may create tables and views.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create: bool,
    /// Table (or view) privileges as [`Privilege`] bits, by relation name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tables: BTreeMap<String, u8>,
}

/// A privilege on a table or view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Select = 1,
    Insert = 2,
    Update = 4,
    Delete = 8,
    Truncate = 16,
}

impl Privilege {
    pub const ALL: u8 = 31;

    pub fn name(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Truncate => "TRUNCATE",
        }
    }
}

/// Changes a role's privileges: `grant` adds, else removes.
#[derive(Debug, Clone)]
pub enum GrantChange {
    Connect {
        db: String,
    },
    Create {
        db: String,
    },
    /// Privilege bits on relations of `db`.
    Tables {
        db: String,
        tables: Vec<String>,
        bits: u8,
    },
}

fn no_limit() -> i32 {
    -1
}

/// What a role's password turns into: the SCRAM salted password
/// (`Hi(SASLprep(password), salt, iterations)`) and `md5(password || name)`.
///
/// pgwire 0.41 (the release arrow-pg 0.16 builds on) verifies SCRAM with the salted
/// password, not with PostgreSQL's StoredKey/ServerKey pair, so the salted password
/// is what is kept: it cannot be turned back into the password, but a copy of the
/// manifest is enough to log in as the role. Keep the data directory private.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Secret {
    pub salt: String,
    pub iterations: u32,
    pub salted_password: String,
    pub md5: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// The secret of `password` for role `name`, with a fresh random salt.
    pub fn new(name: &str, password: &str) -> Secret {
        let salt: [u8; 16] = rand::random();
        let salted = salted_password(password, &salt, SCRAM_ITERATIONS);
        Secret {
            salt: STANDARD.encode(salt),
            iterations: SCRAM_ITERATIONS,
            salted_password: STANDARD.encode(salted),
            md5: format!("{:x}", md5::compute(format!("{password}{name}"))),
        }
    }

    /// Salt and salted password, decoded.
    pub fn scram(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        Some((
            STANDARD.decode(&self.salt).ok()?,
            STANDARD.decode(&self.salted_password).ok()?,
        ))
    }

    /// Whether `password` is this secret's password (constant time in the
    /// comparison; the PBKDF2 rounds make every check cost the same).
    pub fn matches(&self, password: &str) -> bool {
        let Some((salt, salted)) = self.scram() else {
            return false;
        };
        let Some(rounds) = NonZeroU32::new(self.iterations) else {
            return false;
        };
        let normalized = stringprep::saslprep(password)
            .map(|p| p.into_owned())
            .unwrap_or_else(|_| password.to_string());
        ring::pbkdf2::verify(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            rounds,
            &salt,
            normalized.as_bytes(),
            &salted,
        )
        .is_ok()
    }

    /// The answer an md5 client must send for `salt`:
    /// `"md5" || md5(md5(password || name) || salt)`.
    pub fn md5_response(&self, salt: &[u8]) -> String {
        let mut bytes = self.md5.as_bytes().to_vec();
        bytes.extend_from_slice(salt);
        format!("md5{:x}", md5::compute(bytes))
    }

    /// PostgreSQL's `pg_authid.rolpassword` text:
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn verifier(&self) -> String {
        use ring::{digest, hmac};
        let Some((_, salted)) = self.scram() else {
            return String::new();
        };
        let key = hmac::Key::new(hmac::HMAC_SHA256, &salted);
        let client_key = hmac::sign(&key, b"Client Key");
        let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
        let server_key = hmac::sign(&key, b"Server Key");
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            self.salt,
            STANDARD.encode(stored_key.as_ref()),
            STANDARD.encode(server_key.as_ref())
        )
    }
}

/// RFC 5802's `Hi(SASLprep(password), salt, i)`; a password SASLprep rejects is
/// used as given, as PostgreSQL does.
pub fn salted_password(password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    let normalized = stringprep::saslprep(password)
        .map(|p| p.into_owned())
        .unwrap_or_else(|_| password.to_string());
    let mut out = vec![0u8; ring::digest::SHA256_OUTPUT_LEN];
    let rounds = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        rounds,
        salt,
        normalized.as_bytes(),
        &mut out,
    );
    out
}

/// The attributes `CREATE ROLE` / `ALTER ROLE` set; `None` leaves one as it is.
#[derive(Debug, Clone, Default)]
pub struct RoleOptions {
    pub superuser: Option<bool>,
    pub login: Option<bool>,
    pub create_db: Option<bool>,
    pub create_role: Option<bool>,
    pub conn_limit: Option<i32>,
    /// `Some(None)` is `PASSWORD NULL`.
    pub password: Option<Option<String>>,
}

impl RoleOptions {
    fn apply(&self, name: &str, r: &mut RoleDef) {
        if let Some(v) = self.superuser {
            r.superuser = v;
        }
        if let Some(v) = self.login {
            r.login = v;
        }
        if let Some(v) = self.create_db {
            r.create_db = v;
        }
        if let Some(v) = self.create_role {
            r.create_role = v;
        }
        if let Some(v) = self.conn_limit {
            r.conn_limit = v;
        }
        if let Some(p) = &self.password {
            r.password = p.as_deref().map(|p| Secret::new(name, p));
        }
    }
}

fn duplicate(name: &str) -> Error {
    Error::sql("42710", format!("role \"{name}\" already exists"))
}

fn undefined(name: &str) -> Error {
    Error::sql("42704", format!("role \"{name}\" does not exist"))
}

impl Manifest {
    pub fn role(&self, name: &str) -> Option<&RoleDef> {
        self.roles.get(name)
    }

    pub fn is_superuser(&self, user: &str) -> bool {
        self.role(user).is_some_and(|r| r.superuser)
    }

    /// The role that owns relation `name` of `db` (`None`: a superuser does).
    pub fn owner(&self, db: &str, name: &str) -> Option<&str> {
        self.databases.get(db)?.owners.get(name).map(String::as_str)
    }

    /// Whether `user` may connect to `db`: CONNECT belongs to PUBLIC unless revoked.
    pub fn may_connect(&self, user: &str, db: &str) -> bool {
        let revoked = self.databases.get(db).is_some_and(|d| d.connect_revoked);
        !revoked || self.is_superuser(user) || self.grants(user, db).is_some_and(|g| g.connect)
    }

    /// Whether `user` may create tables and views in `db`.
    pub fn may_create(&self, user: &str, db: &str) -> bool {
        self.is_superuser(user) || self.grants(user, db).is_some_and(|g| g.create)
    }

    /// Whether `user` may use `p` on relation `name` of `db`: superusers and the
    /// owner always may, others when granted.
    pub fn allowed(&self, user: &str, db: &str, name: &str, p: Privilege) -> bool {
        self.is_superuser(user)
            || self.owner(db, name) == Some(user)
            || self
                .grants(user, db)
                .and_then(|g| g.tables.get(name))
                .is_some_and(|bits| bits & p as u8 != 0)
    }

    fn grants(&self, user: &str, db: &str) -> Option<&DbGrants> {
        self.role(user)?.grants.get(db)
    }
}

/// Forgets a dropped relation's owner and every grant on it.
pub(super) fn forget_relation(m: &mut Manifest, db: &str, name: &str) {
    if let Some(d) = m.databases.get_mut(db) {
        d.owners.remove(name);
    }
    for r in m.roles.values_mut() {
        if let Some(g) = r.grants.get_mut(db) {
            g.tables.remove(name);
        }
    }
}

/// Moves a renamed relation's owner and grants to its new name.
pub(super) fn rename_relation(m: &mut Manifest, db: &str, from: &str, to: &str) {
    if let Some(d) = m.databases.get_mut(db)
        && let Some(o) = d.owners.remove(from)
    {
        d.owners.insert(to.to_string(), o);
    }
    for r in m.roles.values_mut() {
        if let Some(g) = r.grants.get_mut(db)
            && let Some(bits) = g.tables.remove(from)
        {
            g.tables.insert(to.to_string(), bits);
        }
    }
}

impl Catalog {
    /// Creates role `name` (`login`: `CREATE USER`, else `CREATE ROLE`).
    pub fn create_role(&self, name: &str, login: bool, opts: &RoleOptions) -> Result<()> {
        self.update(|m| {
            if m.roles.contains_key(name) {
                return Err(duplicate(name));
            }
            let mut r = RoleDef {
                id: m.alloc_id(),
                superuser: false,
                login,
                create_db: false,
                create_role: false,
                conn_limit: -1,
                password: None,
                grants: BTreeMap::new(),
            };
            opts.apply(name, &mut r);
            m.roles.insert(name.to_string(), r);
            Ok(())
        })
    }

    /// Changes role `name`'s attributes.
    pub fn alter_role(&self, name: &str, opts: &RoleOptions) -> Result<()> {
        self.update(|m| {
            let r = m.roles.get_mut(name).ok_or_else(|| undefined(name))?;
            opts.apply(name, r);
            Ok(())
        })
    }

    /// Removes roles; an absent one is an error unless `if_exists`. Returns the
    /// names that were absent (for `IF EXISTS` notices).
    pub fn drop_roles(&self, names: &[String], if_exists: bool) -> Result<Vec<String>> {
        self.update(|m| {
            let mut absent = vec![];
            for n in names {
                let owned = m
                    .databases
                    .iter()
                    .find_map(|(db, d)| d.owners.iter().find(|(_, o)| *o == n).map(|(t, _)| (db, t)));
                if let Some((db, t)) = owned {
                    return Err(Error::sql(
                        "2BP01",
                        format!("role \"{n}\" cannot be dropped because some objects depend on it: owner of table {t} in database {db}"),
                    ));
                }
                if m.roles.remove(n).is_none() {
                    if !if_exists {
                        return Err(undefined(n));
                    }
                    absent.push(n.clone());
                }
            }
            Ok(absent)
        })
    }

    /// Grants (or revokes) privileges to roles; `None` as a role is PUBLIC (only
    /// CONNECT). Every role must exist.
    pub fn change_grants(
        &self,
        roles: &[Option<String>],
        change: &GrantChange,
        grant: bool,
    ) -> Result<()> {
        self.update(|m| {
            for role in roles {
                let Some(role) = role else {
                    let GrantChange::Connect { db } = change else {
                        return Err(Error::NotSupported(
                            "only CONNECT can be granted to or revoked from PUBLIC".into(),
                        ));
                    };
                    m.database_mut(db)?.connect_revoked = !grant;
                    continue;
                };
                let r = m.roles.get_mut(role).ok_or_else(|| undefined(role))?;
                match change {
                    GrantChange::Connect { db } => {
                        r.grants.entry(db.clone()).or_default().connect = grant
                    }
                    GrantChange::Create { db } => {
                        r.grants.entry(db.clone()).or_default().create = grant
                    }
                    GrantChange::Tables { db, tables, bits } => {
                        let g = r.grants.entry(db.clone()).or_default();
                        for t in tables {
                            let cur = g.tables.entry(t.clone()).or_default();
                            *cur = if grant { *cur | bits } else { *cur & !bits };
                            if *cur == 0 {
                                g.tables.remove(t);
                            }
                        }
                    }
                }
                r.grants
                    .retain(|_, g| g.connect || g.create || !g.tables.is_empty());
            }
            Ok(())
        })
    }

    /// Records `owner` as the owner of relation `name` of `db`.
    pub fn set_owner(&self, db: &str, name: &str, owner: &str) -> Result<()> {
        self.update(|m| {
            m.database_mut(db)?
                .owners
                .insert(name.to_string(), owner.to_string());
            Ok(())
        })
    }

    /// Makes sure the configured superuser exists (with LOGIN and SUPERUSER) and, when
    /// a password is configured, that it is that role's password.
    pub fn bootstrap_superuser(&self, name: &str, password: Option<&str>) -> Result<()> {
        let current = self.snapshot();
        let unchanged = current.roles.get(name).is_some_and(|r| {
            r.superuser
                && r.login
                && password.is_none_or(|p| r.password.as_ref().is_some_and(|s| s.matches(p)))
        });
        if unchanged {
            return Ok(());
        }
        self.update(|m| {
            let id = match m.roles.get(name) {
                Some(r) => r.id,
                None => m.alloc_id(),
            };
            let r = m.roles.entry(name.to_string()).or_insert(RoleDef {
                id,
                superuser: true,
                login: true,
                create_db: true,
                create_role: true,
                conn_limit: -1,
                password: None,
                grants: BTreeMap::new(),
            });
            r.superuser = true;
            r.login = true;
            if let Some(p) = password {
                r.password = Some(Secret::new(name, p));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_check_passwords_and_print_like_postgres() {
        let s = Secret::new("alice", "wonderland");
        assert!(s.matches("wonderland"));
        assert!(!s.matches("wonderlanD"));
        assert!(!s.matches(""));
        // md5(password || user), as PostgreSQL's md5 method stores it
        assert_eq!(
            s.md5,
            format!("{:x}", md5::compute("wonderlandalice".as_bytes()))
        );
        let v = s.verifier();
        assert!(v.starts_with("SCRAM-SHA-256$4096:"), "{v}");
        assert_eq!(v.matches('$').count(), 2);
        // a fresh salt each time
        assert_ne!(Secret::new("alice", "wonderland").salt, s.salt);
    }
}
