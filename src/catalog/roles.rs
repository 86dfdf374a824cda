//! Roles (`CREATE ROLE`): their attributes and password secrets, kept in the
//! manifest. A password is never stored: only its SCRAM-SHA-256 salted hash and its
//! md5 hash, the forms the Postgres port's authentication methods check against.

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
