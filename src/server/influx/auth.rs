//! Credentials on the HTTP port, checked against the same roles as the Postgres
//! port: `Authorization: Basic` (user:password), `Token user:password` (InfluxDB
//! 2's 1.x compatibility form), `u=`/`p=` query parameters, or the configured API
//! token, which stands for the superuser. Nothing is checked under `trust`.

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use parking_lot::Mutex;
use subtle::ConstantTimeEq;

use crate::config::AuthMethod;
use crate::engine::Engine;

/// Passwords verified recently, so that a writer posting many batches pays the
/// PBKDF2 rounds once: user → (salted password it was checked against, SHA-256 of
/// the password given). A changed password no longer matches the first field.
#[derive(Default)]
pub struct Verified(Mutex<HashMap<String, (String, [u8; 32])>>);

/// At most this many users are remembered; past it the cache starts over.
const MAX_VERIFIED: usize = 10_000;

/// Who sent a request.
pub enum Who {
    /// Anyone with every right: authentication is off (trust), or the API token.
    Unchecked,
    /// A role that gave its password.
    Role(String),
}

/// Whether the request carries valid credentials (always, under trust).
pub fn authorized(engine: &Engine, headers: &HeaderMap, q: &HashMap<String, String>) -> bool {
    identify(engine, headers, q).is_some()
}

/// Who the request's credentials say it is from; `None` when they are missing or
/// wrong.
pub fn identify(engine: &Engine, headers: &HeaderMap, q: &HashMap<String, String>) -> Option<Who> {
    let config = engine.config();
    if config.auth == AuthMethod::Trust {
        return Some(Who::Unchecked);
    }
    let token_ok = |given: &str| {
        config
            .http_auth_token
            .as_deref()
            .is_some_and(|t| bool::from(t.as_bytes().ct_eq(given.as_bytes())))
    };
    let role = |u: &str, p: &str| {
        if token_ok(p) {
            Some(Who::Unchecked)
        } else if password_ok(engine, u, p) {
            Some(Who::Role(u.to_string()))
        } else {
            None
        }
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Some(b64) = auth.and_then(|a| a.strip_prefix("Basic ")) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())?;
        let (u, p) = decoded.split_once(':')?;
        return role(u, p);
    }
    let bearer = auth.and_then(|a| {
        a.strip_prefix("Token ")
            .or_else(|| a.strip_prefix("Bearer "))
    });
    if let Some(t) = bearer.map(str::trim) {
        if token_ok(t) {
            return Some(Who::Unchecked);
        }
        let (u, p) = t.split_once(':')?;
        return role(u, p);
    }
    match (q.get("u"), q.get("p")) {
        (Some(u), Some(p)) => role(u, p),
        (None, Some(p)) if token_ok(p) => Some(Who::Unchecked),
        _ => None,
    }
}

/// Whether `user` is a role that may log in and `password` is its password.
fn password_ok(engine: &Engine, user: &str, password: &str) -> bool {
    let catalog = engine.catalog().snapshot();
    let Some(secret) = catalog
        .role(user)
        .filter(|r| r.login)
        .and_then(|r| r.password.as_ref())
    else {
        return false;
    };
    let digest: [u8; 32] = {
        let d = ring::digest::digest(&ring::digest::SHA256, password.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        out
    };
    let cache = engine.shared::<Verified>();
    if let Some((salted, known)) = cache.0.lock().get(user)
        && *salted == secret.salted_password
        && bool::from(known.ct_eq(&digest))
    {
        return true;
    }
    if !secret.matches(password) {
        return false;
    }
    let mut map = cache.0.lock();
    if map.len() >= MAX_VERIFIED {
        map.clear();
    }
    map.insert(user.to_string(), (secret.salted_password.clone(), digest));
    true
}

/// Whether endpoint `name` (`health`, `ping`, `metrics`) answers without credentials.
pub fn open_endpoint(engine: &Engine, name: &str) -> bool {
    engine
        .config()
        .http_open_endpoints
        .iter()
        .any(|e| e == name)
}
