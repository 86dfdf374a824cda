//! Entry point of the `pg_messages` fuzz target: a byte stream decoded as a client's
//! messages the way a connection decodes them (startup first, a decoder panic caught
//! as a malformed message), each Parse's SQL through the front door and each Bind's
//! parameters through Sundial's own parameter decoding.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use arrow::datatypes::DataType;
use bytes::BytesMut;
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::api::stmt::StoredStatement;
use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};

/// At most this many messages are looked at per input.
const MAX_MESSAGES: usize = 256;

/// Decodes `data` as what a client sends; panics only on a bug in Sundial.
pub fn frontend(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    let mut ctx = DecodeContext::new(ProtocolVersion::PROTOCOL3_0);
    let mut declared: Vec<Option<Type>> = vec![];
    for _ in 0..MAX_MESSAGES {
        let before = buf.len();
        let decoded = quietly(|| PgWireFrontendMessage::decode(&mut buf, &ctx));
        let msg = match decoded {
            // A connection answers these with FATAL 08P01 and closes.
            None | Some(Err(_)) | Some(Ok(None)) => return,
            Some(Ok(Some(m))) => m,
        };
        // The SSL negotiation message only looks at the first bytes.
        assert!(
            buf.len() < before || matches!(msg, PgWireFrontendMessage::SslNegotiation(_)),
            "a decoded message consumed no bytes"
        );
        match msg {
            PgWireFrontendMessage::SslNegotiation(_) => ctx.awaiting_frontend_ssl = false,
            PgWireFrontendMessage::Startup(_) => {
                ctx.awaiting_frontend_ssl = false;
                ctx.awaiting_frontend_startup = false;
            }
            PgWireFrontendMessage::Query(q) => crate::sql::front_door(&q.query),
            PgWireFrontendMessage::Parse(p) => {
                crate::sql::front_door(&p.query);
                declared = p.type_oids.iter().map(|o| Type::from_oid(*o)).collect();
            }
            // The connection refuses these before anything reads the codes.
            PgWireFrontendMessage::Bind(b) if super::conn::bad_bind(&b).is_some() => {}
            PgWireFrontendMessage::Bind(b) => {
                let stmt = StoredStatement::new(String::new(), (), declared.clone());
                let Ok(portal) = Portal::try_new(&b, Arc::new(stmt)) else {
                    continue;
                };
                // The plan's types: from the declared ones, numeric otherwise (the
                // decoder Sundial writes itself).
                let types: Vec<Option<DataType>> = (0..portal.parameter_len())
                    .map(|i| {
                        let t = declared.get(i).cloned().flatten();
                        Some(
                            t.as_ref()
                                .and_then(super::pg_to_arrow)
                                .unwrap_or(crate::catalog::ANY_NUMERIC),
                        )
                    })
                    .collect();
                let _ = super::params::decode(&portal, &types, &[]);
            }
            _ => {}
        }
    }
}

/// Runs `f`, a panic inside it being an answer (pgwire's decoder panics on some
/// malformed bodies; the connection catches that), not a crash.
fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(AssertUnwindSafe(f)).ok();
    std::panic::set_hook(hook);
    out
}

#[cfg(test)]
mod tests {
    /// Every input a fuzz run found slow (kept in `fuzz/slow-inputs/`) runs through
    /// the target to its end: a hang here is a test timeout.
    #[test]
    fn inputs_fuzzing_found_slow_finish() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/slow-inputs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("fuzz/slow-inputs is readable") {
            let path = entry.expect("a directory entry").path();
            let data = std::fs::read(&path).expect("a slow input is readable");
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("pg_messages") {
                super::frontend(&data);
            } else if name.starts_with("sql_front_door") {
                crate::sql::front_door(&String::from_utf8_lossy(&data));
            }
            n += 1;
        }
        assert!(n > 0, "no slow inputs in {}", dir.display());
    }
}
