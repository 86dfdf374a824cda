//! Token-level rewrite before parsing: sqlparser rejects TimescaleDB's
//! `WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day')`, so dotted option keys
//! are quoted and bare flags get `= true` inside a `CREATE TABLE ... WITH (...)`.
//! sqlparser has no `MOVE` and no negative or omitted FETCH counts either: FETCH
//! and MOVE become `FETCH dir FROM c`, marked `INTO` [`MOVE_MARK`] /
//! [`NEGATIVE_MARK`] for the cursor code.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, Word};

/// The `INTO` target that marks a FETCH written as MOVE.
pub const MOVE_MARK: &str = "_sundial_move";
/// Appended to the `INTO` target (or alone) when the count was negative.
pub const NEGATIVE_MARK: &str = "_sundial_neg";
/// The `IN ROLE` member that marks a `CREATE ROLE` written as `CREATE USER`
/// (whose default is LOGIN).
pub const USER_MARK: &str = "_sundial_user";
/// The option that marks `WITH NO DATA` at the end of a `CREATE MATERIALIZED VIEW`
/// (sqlparser reads no such clause for PostgreSQL).
pub const NO_DATA_OPTION: &str = "sundial.with_no_data";
/// The option that marks an `ALTER TABLE … SET (…)` written as `ALTER
/// MATERIALIZED VIEW` (sqlparser has no ALTER MATERIALIZED VIEW).
pub const MATVIEW_MARK: &str = "sundial.materialized_view";
/// `INSERT … OVERRIDING SYSTEM VALUE` (sqlparser reads no OVERRIDING clause)
/// becomes `PARTITION (this)`, which the INSERT code takes back off.
pub const OVERRIDING_SYSTEM: &str = "_sundial_overriding_system";
/// `INSERT … OVERRIDING USER VALUE`, marked the same way.
pub const OVERRIDING_USER: &str = "_sundial_overriding_user";

/// Returns `sql` with every `CREATE TABLE ... WITH (...)` option list normalized
/// and MOVE statements written as marked FETCHes. SQL that does not tokenize is
/// returned unchanged (the parser reports the error).
pub fn rewrite(sql: &str) -> String {
    let sql = &sequence_options(&overriding(&extensions(&matviews(&negative_limits(
        &users(&moves(&maintenance(sql))),
    )))));
    let lower = sql.to_ascii_lowercase();
    if !(lower.contains("create") && lower.contains("with")) {
        return sql.to_string();
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        return sql.to_string();
    };
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    let sig: Vec<&TokenWithSpan> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let mut i = 0;
    while i < sig.len() {
        if is_kw(&sig[i].token, "create") {
            // find TABLE before the next semicolon
            let mut j = i + 1;
            while j < sig.len()
                && !matches!(sig[j].token, Token::SemiColon)
                && !is_kw(&sig[j].token, "table")
            {
                j += 1;
            }
            if j < sig.len() && is_kw(&sig[j].token, "table") {
                // skip to the column list and past its closing paren
                let mut k = j + 1;
                while k < sig.len() && !matches!(sig[k].token, Token::LParen | Token::SemiColon) {
                    k += 1;
                }
                if k < sig.len() && matches!(sig[k].token, Token::LParen) {
                    let close = matching(&sig, k);
                    if let Some(close) = close
                        && close + 2 < sig.len()
                        && is_kw(&sig[close + 1].token, "with")
                        && matches!(sig[close + 2].token, Token::LParen)
                        && let Some(end) = matching(&sig, close + 2)
                        && let Some(text) = options_text(&sig[close + 3..end])
                    {
                        let from = offsets.offset(&sig[close + 2].span.start);
                        let to = offsets.offset(&sig[end].span.end);
                        if let (Some(from), Some(to)) = (from, to) {
                            edits.push((from, to, format!("({text})")));
                        }
                        i = end;
                    }
                }
            }
        }
        i += 1;
    }
    apply(sql, edits)
}

/// `CREATE EXTENSION [IF NOT EXISTS] name [WITH] [SCHEMA s] [VERSION v] [CASCADE]`:
/// PostgreSQL's `WITH` is optional (TimescaleDB's docs write `CREATE EXTENSION IF
/// NOT EXISTS timescaledb CASCADE`); sqlparser reads the options only after it, so
/// it is written in.
fn extensions(sql: &str) -> String {
    if !sql.to_ascii_lowercase().contains("extension") {
        return sql.to_string();
    }
    let Some(sig) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    for i in 0..sig.len() {
        let starts = i == 0 || matches!(sig[i - 1].token, Token::SemiColon);
        if !(starts
            && is_kw(&sig[i].token, "create")
            && sig.get(i + 1).is_some_and(|t| is_kw(&t.token, "extension")))
        {
            continue;
        }
        let stop = (i..sig.len())
            .find(|&k| matches!(sig[k].token, Token::SemiColon))
            .unwrap_or(sig.len());
        let body = &sig[i + 2..stop];
        if body.iter().any(|t| is_kw(&t.token, "with")) {
            continue;
        }
        if let Some(opt) = body.iter().find(|t| {
            ["schema", "version", "cascade"]
                .iter()
                .any(|k| is_kw(&t.token, k))
        }) && let Some(at) = offsets.offset(&opt.span.start)
        {
            edits.push((at, at, "WITH ".to_string()));
        }
    }
    apply(sql, edits)
}

/// `CREATE MATERIALIZED VIEW … WITH (timescaledb.continuous, …) AS … [WITH [NO]
/// DATA]` and `ALTER MATERIALIZED VIEW v SET (…)` in forms sqlparser reads: option
/// keys quoted, `WITH [NO] DATA` as the option [`NO_DATA_OPTION`], the ALTER as an
/// ALTER TABLE marked [`MATVIEW_MARK`].
fn matviews(sql: &str) -> String {
    let lower = sql.to_ascii_lowercase();
    let alter_set = lower.contains("alter") && lower.contains("set");
    if !(lower.contains("materialized") || alter_set) {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let sig: Vec<&TokenWithSpan> = tokens.iter().collect();
    let offsets = LineIndex::new(sql);
    let off = |t: &TokenWithSpan, end: bool| {
        offsets.offset(if end { &t.span.end } else { &t.span.start })
    };
    let mut edits: Vec<(usize, usize, String)> = vec![];
    let mut i = 0;
    while i < sig.len() {
        let starts = i == 0 || matches!(sig[i - 1].token, Token::SemiColon);
        let stop = (i..sig.len())
            .find(|&k| matches!(sig[k].token, Token::SemiColon))
            .unwrap_or(sig.len());
        if !starts {
            i += 1;
            continue;
        }
        let mut k = i + 1;
        let create = is_kw(&sig[i].token, "create");
        let alter = is_kw(&sig[i].token, "alter");
        if create
            && k + 1 < stop
            && is_kw(&sig[k].token, "or")
            && is_kw(&sig[k + 1].token, "replace")
        {
            k += 2;
        }
        // ALTER TABLE t SET (timescaledb.compress, …): the dotted keys quoted.
        if alter && k < stop && is_kw(&sig[k].token, "table") {
            let mut j = k + 1;
            while j + 1 < stop
                && !(is_kw(&sig[j].token, "set") && matches!(sig[j + 1].token, Token::LParen))
            {
                j += 1;
            }
            if j + 1 < stop
                && let Some(end) = matching(&sig, j + 1)
                && sig[j + 2..end]
                    .iter()
                    .any(|t| matches!(t.token, Token::Period))
                && let (Some(from), Some(to)) = (off(sig[j + 1], false), off(sig[end], true))
                && let Some(text) = options_text(&sig[j + 2..end])
            {
                edits.push((from, to, format!("({text})")));
            }
            i = stop + 1;
            continue;
        }
        let matview = (create || alter)
            && k + 1 < stop
            && is_kw(&sig[k].token, "materialized")
            && is_kw(&sig[k + 1].token, "view");
        if !matview {
            i = stop + 1;
            continue;
        }
        let after_view = k + 2;
        // The trailing WITH [NO] DATA of a CREATE.
        let mut tail: Option<(usize, bool)> = None;
        if create && stop >= 2 && is_kw(&sig[stop - 1].token, "data") {
            if is_kw(&sig[stop - 2].token, "with") {
                tail = Some((stop - 2, false));
            } else if stop >= 3
                && is_kw(&sig[stop - 2].token, "no")
                && is_kw(&sig[stop - 3].token, "with")
            {
                tail = Some((stop - 3, true));
            }
        }
        // The option list: WITH ( before the AS of a CREATE, SET ( of an ALTER.
        let mut j = after_view;
        let mut depth = 0usize;
        let mut list: Option<(usize, usize)> = None;
        while j + 1 < stop {
            match sig[j].token {
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 && create && is_kw(&sig[j].token, "as") {
                break;
            }
            let opener = if create { "with" } else { "set" };
            if depth == 0
                && is_kw(&sig[j].token, opener)
                && matches!(sig[j + 1].token, Token::LParen)
            {
                if let Some(end) = matching(&sig, j + 1) {
                    list = Some((j + 1, end));
                }
                break;
            }
            j += 1;
        }
        if alter {
            let Some((open, end)) = list else {
                i = stop + 1;
                continue;
            };
            let (Some(a), Some(b), Some(from), Some(to)) = (
                off(sig[i], false),
                off(sig[k + 1], true),
                off(sig[open], false),
                off(sig[end], true),
            ) else {
                return sql.to_string();
            };
            let Some(text) = options_text(&sig[open + 1..end]) else {
                i = stop + 1;
                continue;
            };
            edits.push((a, b, "ALTER TABLE".into()));
            edits.push((from, to, format!("({text}, \"{MATVIEW_MARK}\" = true)")));
        } else {
            let no_data = tail.is_some_and(|(_, no)| no);
            if let Some((open, end)) = list {
                let (Some(from), Some(to)) = (off(sig[open], false), off(sig[end], true)) else {
                    return sql.to_string();
                };
                let Some(mut text) = options_text(&sig[open + 1..end]) else {
                    i = stop + 1;
                    continue;
                };
                if no_data {
                    text.push_str(&format!(", \"{NO_DATA_OPTION}\" = true"));
                }
                edits.push((from, to, format!("({text})")));
            }
            if let Some((w, _)) = tail {
                let (Some(from), Some(to)) = (off(sig[w], false), off(sig[stop - 1], true)) else {
                    return sql.to_string();
                };
                edits.push((from, to, String::new()));
            }
        }
        i = stop + 1;
    }
    apply(sql, edits)
}

/// `VACUUM` / `ANALYZE` in PostgreSQL's forms become the maintenance procedure's
/// `CALL` (sqlparser reads neither form as PostgreSQL writes it).
fn maintenance(sql: &str) -> String {
    let lower = sql.to_ascii_lowercase();
    if !(lower.contains("vacuum") || lower.contains("analy")) {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let sig: Vec<&TokenWithSpan> = tokens.iter().collect();
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    for i in 0..sig.len() {
        let starts = i == 0 || matches!(sig[i - 1].token, Token::SemiColon);
        if !(starts
            && ["vacuum", "analyze", "analyse"]
                .iter()
                .any(|w| is_kw(&sig[i].token, w)))
        {
            continue;
        }
        let stop = (i + 1..sig.len())
            .find(|&k| matches!(sig[k].token, Token::SemiColon))
            .unwrap_or(sig.len());
        let Some(canonical) = super::maintenance::canonical(&sig[i..stop]) else {
            continue;
        };
        let (Some(from), Some(to)) = (
            offsets.offset(&sig[i].span.start),
            offsets.offset(&sig[stop - 1].span.end),
        ) else {
            return sql.to_string();
        };
        edits.push((from, to, canonical));
    }
    apply(sql, edits)
}

/// FETCH and MOVE in the one form sqlparser reads: `FETCH dir FROM name`, with
/// `INTO` a mark for what it cannot hold (MOVE, a negative count).
fn moves(sql: &str) -> String {
    let lower = sql.to_ascii_lowercase();
    if !(lower.contains("move") || lower.contains("fetch")) {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let sig: Vec<&TokenWithSpan> = tokens.iter().collect();
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    for i in 0..sig.len() {
        let starts = i == 0 || matches!(sig[i - 1].token, Token::SemiColon);
        let is_move = is_kw(&sig[i].token, "move");
        if !(starts && (is_move || is_kw(&sig[i].token, "fetch"))) {
            continue;
        }
        let stop = (i + 1..sig.len())
            .find(|&k| matches!(sig[k].token, Token::SemiColon))
            .unwrap_or(sig.len());
        let Some(canonical) = fetch_text(&sig[i + 1..stop], is_move) else {
            continue;
        };
        let (Some(from), Some(to)) = (
            offsets.offset(&sig[i].span.start),
            offsets.offset(&sig[stop - 1].span.end),
        ) else {
            return sql.to_string();
        };
        edits.push((from, to, canonical));
    }
    apply(sql, edits)
}

/// `CONNECTION LIMIT -N` (PostgreSQL's -1 is "no limit"): sqlparser reads only an
/// unsigned number there, so the count becomes [`NEGATIVE_LIMIT`] + N, which
/// `sql::roles` reads back as -N.
fn negative_limits(sql: &str) -> String {
    if !sql.to_ascii_lowercase().contains("connection") {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    for w in tokens.windows(4) {
        let (Token::Minus, Token::Number(n, _)) = (&w[2].token, &w[3].token) else {
            continue;
        };
        if !(is_kw(&w[0].token, "connection") && is_kw(&w[1].token, "limit")) {
            continue;
        }
        let Ok(n) = n.parse::<u32>() else {
            continue;
        };
        let (Some(from), Some(to)) = (
            offsets.offset(&w[2].span.start),
            offsets.offset(&w[3].span.end),
        ) else {
            return sql.to_string();
        };
        edits.push((from, to, (NEGATIVE_LIMIT + u64::from(n)).to_string()));
    }
    apply(sql, edits)
}

/// What `CONNECTION LIMIT -N` becomes for the parser: this plus N (no real limit
/// is that large: PostgreSQL's is an int4).
pub const NEGATIVE_LIMIT: u64 = 1 << 40;

/// The tokens of `sql` without whitespace (`None`: it does not tokenize).
fn significant_tokens(sql: &str) -> Option<Vec<TokenWithSpan>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    Some(
        tokens
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
            .collect(),
    )
}

/// PostgreSQL's `CREATE USER` / `ALTER USER` are its `CREATE ROLE` / `ALTER ROLE`
/// (sqlparser reads them as Snowflake's): the keyword becomes ROLE, and a CREATE
/// gets [`USER_MARK`] as an `IN ROLE` member, for its LOGIN default.
fn users(sql: &str) -> String {
    if !sql.to_ascii_lowercase().contains("user") {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let sig: Vec<&TokenWithSpan> = tokens.iter().collect();
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    for i in 0..sig.len().saturating_sub(1) {
        let starts = i == 0 || matches!(sig[i - 1].token, Token::SemiColon);
        let create = is_kw(&sig[i].token, "create");
        if !(starts
            && (create || is_kw(&sig[i].token, "alter"))
            && is_kw(&sig[i + 1].token, "user"))
        {
            continue;
        }
        let (Some(from), Some(to)) = (
            offsets.offset(&sig[i + 1].span.start),
            offsets.offset(&sig[i + 1].span.end),
        ) else {
            return sql.to_string();
        };
        edits.push((from, to, "ROLE".into()));
        if create {
            let stop = (i + 2..sig.len())
                .find(|&k| matches!(sig[k].token, Token::SemiColon))
                .unwrap_or(sig.len());
            let Some(end) = offsets.offset(&sig[stop - 1].span.end) else {
                return sql.to_string();
            };
            edits.push((end, end, format!(" IN ROLE {USER_MARK}")));
        }
    }
    apply(sql, edits)
}

/// The options of `CREATE SEQUENCE` in the order sqlparser reads them (PostgreSQL
/// takes any order; pg_dump writes START first).
fn sequence_options(sql: &str) -> String {
    let lower = sql.to_ascii_lowercase();
    if !lower.contains("sequence") && !lower.contains("identity") {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let sig: Vec<&TokenWithSpan> = tokens.iter().collect();
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    let rank = |k: usize| -> Option<u8> {
        let t = &sig.get(k)?.token;
        Some(if is_kw(t, "increment") {
            0
        } else if is_kw(t, "minvalue") {
            1
        } else if is_kw(t, "maxvalue") {
            2
        } else if is_kw(t, "start") {
            3
        } else if is_kw(t, "cache") {
            4
        } else if is_kw(t, "cycle") {
            5
        } else if is_kw(t, "no") {
            let next = &sig.get(k + 1)?.token;
            if is_kw(next, "minvalue") {
                1
            } else if is_kw(next, "maxvalue") {
                2
            } else if is_kw(next, "cycle") {
                5
            } else {
                return None;
            }
        } else {
            return None;
        })
    };
    // The options between `from` and `to` sorted by rank: the edit, if needed.
    let reorder = |j: usize, end: usize| -> Option<(usize, usize, String)> {
        let mut groups: Vec<(u8, usize, usize)> = vec![];
        let mut k = j;
        while k < end {
            let Some(r) = rank(k) else {
                // Inside a group (a value, BY, WITH): part of the one before.
                if groups.is_empty() {
                    return None;
                }
                k += 1;
                continue;
            };
            if let Some(g) = groups.last_mut() {
                g.2 = k;
            }
            groups.push((r, k, end));
            k += if is_kw(&sig[k].token, "no") { 2 } else { 1 };
        }
        if groups.windows(2).all(|w| w[0].0 <= w[1].0) {
            return None;
        }
        let text = |from: usize, to: usize| -> Option<&str> {
            let a = offsets.offset(&sig[from].span.start)?;
            let b = offsets.offset(&sig[to - 1].span.end)?;
            sql.get(a..b)
        };
        groups.sort_by_key(|g| g.0);
        let parts: Vec<&str> = groups
            .iter()
            .map(|g| text(g.1, g.2))
            .collect::<Option<_>>()?;
        let a = offsets.offset(&sig[j].span.start)?;
        let b = offsets.offset(&sig[end - 1].span.end)?;
        Some((a, b, parts.join(" ")))
    };
    // GENERATED … AS IDENTITY ( options ).
    for k in 0..sig.len().saturating_sub(1) {
        if is_kw(&sig[k].token, "identity")
            && matches!(sig[k + 1].token, Token::LParen)
            && let Some(close) = matching(&sig, k + 1)
            && let Some(e) = reorder(k + 2, close)
        {
            edits.push(e);
        }
    }
    let mut i = 0;
    while i + 2 < sig.len() {
        let starts = i == 0 || matches!(sig[i - 1].token, Token::SemiColon);
        if !(starts && is_kw(&sig[i].token, "create")) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        if is_kw(&sig[j].token, "temp") || is_kw(&sig[j].token, "temporary") {
            j += 1;
        }
        if !sig.get(j).is_some_and(|t| is_kw(&t.token, "sequence")) {
            i += 1;
            continue;
        }
        j += 1;
        if sig.get(j).is_some_and(|t| is_kw(&t.token, "if")) {
            j += 3;
        }
        // The name (possibly qualified), then AS type.
        j += 1;
        while sig.get(j).is_some_and(|t| matches!(t.token, Token::Period)) {
            j += 2;
        }
        if sig.get(j).is_some_and(|t| is_kw(&t.token, "as")) {
            j += 2;
        }
        let end = (j..sig.len())
            .find(|&k| matches!(sig[k].token, Token::SemiColon) || is_kw(&sig[k].token, "owned"))
            .unwrap_or(sig.len());
        if let Some(e) = reorder(j, end) {
            edits.push(e);
        }
        i = end.max(i + 1);
    }
    edits.sort_by_key(|e| e.0);
    apply(sql, edits)
}

/// `OVERRIDING { SYSTEM | USER } VALUE` of an INSERT as a marked `PARTITION (…)`
/// clause, which sqlparser reads in the same place.
fn overriding(sql: &str) -> String {
    if !sql.to_ascii_lowercase().contains("overriding") {
        return sql.to_string();
    }
    let Some(tokens) = significant_tokens(sql) else {
        return sql.to_string();
    };
    let sig: Vec<&TokenWithSpan> = tokens.iter().collect();
    let offsets = LineIndex::new(sql);
    let mut edits: Vec<(usize, usize, String)> = vec![];
    for i in 0..sig.len().saturating_sub(2) {
        if !(is_kw(&sig[i].token, "overriding") && is_kw(&sig[i + 2].token, "value")) {
            continue;
        }
        let mark = if is_kw(&sig[i + 1].token, "system") {
            OVERRIDING_SYSTEM
        } else if is_kw(&sig[i + 1].token, "user") {
            OVERRIDING_USER
        } else {
            continue;
        };
        let (Some(from), Some(to)) = (
            offsets.offset(&sig[i].span.start),
            offsets.offset(&sig[i + 2].span.end),
        ) else {
            return sql.to_string();
        };
        edits.push((from, to, format!("PARTITION ({mark})")));
    }
    apply(sql, edits)
}

/// `[direction] [FROM | IN] name` as canonical FETCH text; `None` leaves the
/// statement to the parser (and its error).
fn fetch_text(t: &[&TokenWithSpan], is_move: bool) -> Option<String> {
    let word = |k: usize| match t.get(k).map(|x| &x.token) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    // A count at k, maybe negative: (digits, negative, tokens used).
    let count = |k: usize| -> Option<(String, bool, usize)> {
        match (t.get(k).map(|x| &x.token), t.get(k + 1).map(|x| &x.token)) {
            (Some(Token::Minus), Some(Token::Number(n, _))) => Some((n.clone(), true, 2)),
            (Some(Token::Plus), Some(Token::Number(n, _))) => Some((n.clone(), false, 2)),
            (Some(Token::Number(n, _)), _) => Some((n.clone(), false, 1)),
            _ => None,
        }
    };
    let mut k = 0;
    let mut neg = false;
    let dir = match word(0).as_deref() {
        Some(w @ ("NEXT" | "PRIOR" | "FIRST" | "LAST" | "ALL")) => {
            k = 1;
            w.to_string()
        }
        Some(w @ ("ABSOLUTE" | "RELATIVE")) => {
            let (n, negative, used) = count(1)?;
            (k, neg) = (1 + used, negative);
            format!("{w} {n}")
        }
        Some(w @ ("FORWARD" | "BACKWARD")) => {
            if word(1).as_deref() == Some("ALL") {
                k = 2;
                format!("{w} ALL")
            } else if let Some((n, negative, used)) = count(1) {
                (k, neg) = (1 + used, negative);
                format!("{w} {n}")
            } else {
                k = 1;
                w.to_string()
            }
        }
        _ => match count(0) {
            Some((n, negative, used)) => {
                (k, neg) = (used, negative);
                n
            }
            None => "NEXT".to_string(),
        },
    };
    if matches!(word(k).as_deref(), Some("FROM" | "IN")) {
        k += 1;
    }
    // The rest must be just the cursor name.
    let name = match t.get(k..)? {
        [one] => one.token.to_string(),
        _ => return None,
    };
    let mark = match (is_move, neg) {
        (false, false) => String::new(),
        (true, false) => format!(" INTO {MOVE_MARK}"),
        (false, true) => format!(" INTO {NEGATIVE_MARK}"),
        (true, true) => format!(" INTO {MOVE_MARK}{NEGATIVE_MARK}"),
    };
    Some(format!("FETCH {dir} FROM {name}{mark}"))
}

/// `sql` with each `(from, to, text)` byte range replaced (ranges in order);
/// unchanged if they overlap or run past the end.
fn apply(sql: &str, edits: Vec<(usize, usize, String)>) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    let mut pos = 0;
    for (from, to, text) in edits {
        if from < pos || to > sql.len() {
            return sql.to_string();
        }
        out.push_str(&sql[pos..from]);
        out.push_str(&text);
        pos = to;
    }
    out.push_str(&sql[pos..]);
    out
}

fn is_kw(t: &Token, kw: &str) -> bool {
    matches!(t, Token::Word(Word { value, quote_style: None, .. }) if value.eq_ignore_ascii_case(kw))
}

fn matching(sig: &[&TokenWithSpan], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (idx, t) in sig.iter().enumerate().skip(open) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(idx);
                }
            }
            _ => {}
        }
    }
    None
}

/// Renders `key.part = value, flag` as `"key.part" = value, "flag" = true`.
fn options_text(toks: &[&TokenWithSpan]) -> Option<String> {
    let mut items = vec![];
    for item in toks.split(|t| matches!(t.token, Token::Comma)) {
        if item.is_empty() {
            return None;
        }
        let eq = item.iter().position(|t| matches!(t.token, Token::Eq));
        let (key_toks, val_toks) = match eq {
            Some(p) => (&item[..p], Some(&item[p + 1..])),
            None => (item, None),
        };
        let mut key = String::new();
        for t in key_toks {
            match &t.token {
                Token::Word(w) => key.push_str(&w.value),
                Token::Period => key.push('.'),
                _ => return None,
            }
        }
        let value = match val_toks {
            Some(v) if !v.is_empty() => v
                .iter()
                .map(|t| t.token.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            Some(_) => return None,
            None => "true".to_string(),
        };
        items.push(format!("\"{}\" = {}", key.replace('"', ""), value));
    }
    Some(items.join(", "))
}

/// Maps sqlparser line/column locations (1-based, columns in chars) to byte offsets.
pub(crate) struct LineIndex<'a> {
    sql: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(sql: &'a str) -> Self {
        let mut starts = vec![0];
        for (i, c) in sql.char_indices() {
            if c == '\n' {
                starts.push(i + 1);
            }
        }
        LineIndex { sql, starts }
    }

    pub(crate) fn offset(
        &self,
        loc: &datafusion::sql::sqlparser::tokenizer::Location,
    ) -> Option<usize> {
        let line_start = *self.starts.get((loc.line as usize).checked_sub(1)?)?;
        let col = (loc.column as usize).checked_sub(1)?;
        let rest = &self.sql[line_start..];
        Some(
            rest.char_indices()
                .nth(col)
                .map(|(b, _)| line_start + b)
                .unwrap_or(self.sql.len()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_sequence_options_and_marks_overriding() {
        assert_eq!(
            rewrite("CREATE SEQUENCE public.s START WITH 5 INCREMENT BY -1 NO MINVALUE CACHE 1"),
            "CREATE SEQUENCE public.s INCREMENT BY -1 NO MINVALUE START WITH 5 CACHE 1"
        );
        assert_eq!(
            rewrite("CREATE SEQUENCE s AS int CYCLE MAXVALUE 9 OWNED BY t.id"),
            "CREATE SEQUENCE s AS int MAXVALUE 9 CYCLE OWNED BY t.id"
        );
        assert_eq!(
            rewrite(
                "CREATE TABLE t (id int GENERATED ALWAYS AS IDENTITY (START WITH 5 INCREMENT BY 2))"
            ),
            "CREATE TABLE t (id int GENERATED ALWAYS AS IDENTITY (INCREMENT BY 2 START WITH 5))"
        );
        let sorted = "CREATE SEQUENCE s INCREMENT 2 START 3";
        assert_eq!(rewrite(sorted), sorted);
        assert_eq!(
            rewrite("INSERT INTO t (id) OVERRIDING SYSTEM VALUE VALUES (1)"),
            format!("INSERT INTO t (id) PARTITION ({OVERRIDING_SYSTEM}) VALUES (1)")
        );
    }

    #[test]
    fn materialized_view_options_and_no_data() {
        let out = rewrite(
            "CREATE MATERIALIZED VIEW v WITH (timescaledb.continuous, tsdb.materialized_only = false) AS SELECT 1 FROM t GROUP BY 1 WITH NO DATA;",
        );
        assert_eq!(
            out,
            "CREATE MATERIALIZED VIEW v WITH (\"timescaledb.continuous\" = true, \"tsdb.materialized_only\" = false, \"sundial.with_no_data\" = true) AS SELECT 1 FROM t GROUP BY 1 ;"
        );
        let out = rewrite(
            "CREATE MATERIALIZED VIEW v (a, b) WITH (timescaledb.continuous) AS SELECT 1 WITH DATA",
        );
        assert_eq!(
            out,
            "CREATE MATERIALIZED VIEW v (a, b) WITH (\"timescaledb.continuous\" = true) AS SELECT 1 "
        );
        let out = rewrite("alter materialized view v set (timescaledb.materialized_only = false)");
        assert_eq!(
            out,
            "ALTER TABLE v set (\"timescaledb.materialized_only\" = false, \"sundial.materialized_view\" = true)"
        );
    }

    #[test]
    fn quotes_dotted_keys_and_flags() {
        let sql = "CREATE TABLE t (time timestamptz, v float8) WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval = '1 day')";
        let out = rewrite(sql);
        assert_eq!(
            out,
            "CREATE TABLE t (time timestamptz, v float8) WITH (\"tsdb.hypertable\" = true, \"tsdb.partition_column\" = 'time', \"tsdb.chunk_interval\" = '1 day')"
        );
        let plain = "SELECT 1";
        assert_eq!(rewrite(plain), plain);
        let multi = "SELECT 1;\nCREATE TABLE x (a int) WITH (timescaledb.hypertable);";
        assert!(rewrite(multi).contains("\"timescaledb.hypertable\" = true"));
    }
}
