//! Password authentication of a Postgres connection: the md5 challenge and the
//! SCRAM-SHA-256 exchange (pgwire's SCRAM state machine) against the roles in the
//! catalog. Failures are PostgreSQL's FATAL 28P01 / 28000 errors.

use std::fmt::Debug;

use futures::{Sink, SinkExt};
use pgwire::api::auth::Password;
use pgwire::api::auth::sasl::scram::{ScramServerAuth, ScramServerAuthWaitingForClientFinal};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use subtle::ConstantTimeEq;

use crate::catalog::roles::SCRAM_ITERATIONS;
use crate::config::AuthMethod;
use crate::engine::Engine;

/// SCRAM's mechanism name; channel binding (`-PLUS`) is not offered.
const SCRAM: &str = "SCRAM-SHA-256";

/// Where a connection's authentication stands (kept in its session extensions).
enum State {
    Md5 { salt: [u8; 4] },
    ScramStart,
    ScramSent(Box<ScramServerAuthWaitingForClientFinal>),
}

struct Pending(parking_lot::Mutex<Option<State>>);

/// A FATAL error during startup.
pub(super) fn fatal(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message,
    )))
}

fn user_of<C: ClientInfo>(client: &C) -> String {
    client
        .metadata()
        .get(pgwire::api::METADATA_USER)
        .cloned()
        .unwrap_or_default()
}

fn failed(user: &str, method: AuthMethod) -> PgWireError {
    let how = match method {
        AuthMethod::ScramSha256 | AuthMethod::Md5 => "password",
        AuthMethod::Trust => "trust",
    };
    fatal(
        "28P01",
        format!("{how} authentication failed for user \"{user}\""),
    )
}

/// Starts authentication after the startup message. `Ok(true)`: the client is
/// authenticated already (trust); `Ok(false)`: a challenge was sent.
pub(super) async fn begin<C>(engine: &Engine, client: &mut C) -> PgWireResult<bool>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let method = engine.config().auth;
    let (state, challenge) = match method {
        AuthMethod::Trust => return Ok(true),
        AuthMethod::Md5 => {
            let salt: [u8; 4] = rand::random();
            (
                State::Md5 { salt },
                Authentication::MD5Password(salt.to_vec()),
            )
        }
        AuthMethod::ScramSha256 => (
            State::ScramStart,
            Authentication::SASL(vec![SCRAM.to_string()]),
        ),
    };
    client
        .session_extensions()
        .insert(Pending(parking_lot::Mutex::new(Some(state))));
    client.set_state(PgWireConnectionState::AuthenticationInProgress);
    client
        .send(PgWireBackendMessage::Authentication(challenge))
        .await?;
    Ok(false)
}

/// Handles one password message. `Ok(true)`: authenticated; `Ok(false)`: the
/// exchange goes on.
pub(super) async fn step<C>(
    engine: &Engine,
    client: &mut C,
    msg: PasswordMessageFamily,
) -> PgWireResult<bool>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let method = engine.config().auth;
    let user = user_of(client);
    let state = client
        .session_extensions()
        .get::<Pending>()
        .and_then(|p| p.0.lock().take());
    let Some(state) = state else {
        return Err(fatal("08P01", "unexpected password message".into()));
    };
    let catalog = engine.catalog().snapshot();
    let secret = catalog
        .role(&user)
        .filter(|r| r.login)
        .and_then(|r| r.password.clone());
    match state {
        State::Md5 { salt } => {
            let given = msg.into_password()?.password;
            match secret {
                Some(s) if bool::from(given.as_bytes().ct_eq(s.md5_response(&salt).as_bytes())) => {
                    Ok(true)
                }
                _ => Err(failed(&user, method)),
            }
        }
        State::ScramStart => {
            let first = msg.into_sasl_initial_response()?;
            if first.auth_method != SCRAM {
                return Err(fatal(
                    "28000",
                    format!(
                        "SASL authentication mechanism {} is not supported (offered: {SCRAM})",
                        first.auth_method
                    ),
                ));
            }
            let data = first
                .data
                .ok_or_else(|| fatal("08P01", "SCRAM client-first message is empty".into()))?;
            // An unknown role gets a made-up secret and fails at the proof, as in
            // PostgreSQL, so that role names cannot be probed.
            let (salt, salted) = match secret.as_ref().and_then(|s| s.scram()) {
                Some(pair) => pair,
                None => {
                    let salt: [u8; 16] = rand::random();
                    let salted: [u8; 32] = rand::random();
                    (salt.to_vec(), salted.to_vec())
                }
            };
            let mut auth = ScramServerAuth::new();
            auth.set_iterations(
                secret
                    .as_ref()
                    .map(|s| s.iterations as usize)
                    .unwrap_or(SCRAM_ITERATIONS as usize),
            );
            let (server_first, waiting) =
                auth.on_client_first_message(&data, Password::new(Some(salt), salted))?;
            client
                .session_extensions()
                .insert(Pending(parking_lot::Mutex::new(Some(State::ScramSent(
                    Box::new(waiting),
                )))));
            client
                .send(PgWireBackendMessage::Authentication(
                    Authentication::SASLContinue(server_first.into_bytes().into()),
                ))
                .await?;
            Ok(false)
        }
        State::ScramSent(waiting) => {
            let last = msg.into_sasl_response()?;
            let server_final = match waiting.on_client_final_message(&last.data) {
                Ok(f) if secret.is_some() => f,
                Ok(_) | Err(PgWireError::InvalidPassword(_)) => {
                    return Err(failed(&user, method));
                }
                Err(e) => return Err(fatal("08P01", format!("invalid SCRAM message: {e}"))),
            };
            client
                .send(PgWireBackendMessage::Authentication(
                    Authentication::SASLFinal(server_final.into_bytes().into()),
                ))
                .await?;
            Ok(true)
        }
    }
}
