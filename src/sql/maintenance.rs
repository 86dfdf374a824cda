//! `VACUUM` and `ANALYZE` in PostgreSQL's forms (options bare or in parentheses,
//! several tables, column lists), which migration tools and TimescaleDB's docs run
//! after loads. Sundial keeps every file's statistics (row count, min/max, nulls) as
//! it writes the file, so ANALYZE has nothing to refresh: it checks its tables exist.
//! VACUUM writes what is held in memory to Parquet and compacts small chunk files.

use datafusion::sql::sqlparser::ast::{self, FunctionArg, FunctionArgExpr};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::{Output, Session};
use crate::error::{Error, Result};

/// The procedure a VACUUM / ANALYZE statement becomes: `CALL
/// sundial_maintenance('VACUUM' | 'ANALYZE', 'table', …)`.
pub const PROCEDURE: &str = "sundial_maintenance";

const VACUUM_OPTIONS: [&str; 12] = [
    "full",
    "freeze",
    "verbose",
    "analyze",
    "analyse",
    "disable_page_skipping",
    "skip_locked",
    "index_cleanup",
    "process_main",
    "process_toast",
    "truncate",
    "parallel",
];

/// The canonical `CALL` text of a `VACUUM` / `ANALYZE` statement's tokens (the
/// statement word first), or `None` when it is not one PostgreSQL accepts.
pub fn canonical(t: &[&TokenWithSpan]) -> Option<String> {
    let word = |k: usize| match t.get(k).map(|x| &x.token) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
        _ => None,
    };
    let kind = match word(0)?.as_str() {
        "vacuum" => "VACUUM",
        "analyze" | "analyse" => "ANALYZE",
        _ => return None,
    };
    let mut k = 1;
    if matches!(t.get(k).map(|x| &x.token), Some(Token::LParen)) {
        // ( option [value] [, ...] )
        k += 1;
        loop {
            let opt = word(k)?;
            let known = if kind == "VACUUM" {
                VACUUM_OPTIONS.contains(&opt.as_str())
            } else {
                matches!(opt.as_str(), "verbose" | "skip_locked")
            };
            if !known {
                return None;
            }
            k += 1;
            // An optional value: a boolean word, a number, a quoted word.
            if matches!(
                t.get(k).map(|x| &x.token),
                Some(Token::Word(_) | Token::Number(..) | Token::SingleQuotedString(_))
            ) {
                k += 1;
            }
            match t.get(k).map(|x| &x.token) {
                Some(Token::Comma) => k += 1,
                Some(Token::RParen) => {
                    k += 1;
                    break;
                }
                _ => return None,
            }
        }
    } else {
        // The old form: VACUUM [FULL] [FREEZE] [VERBOSE] [ANALYZE], ANALYZE [VERBOSE].
        let words: &[&str] = if kind == "VACUUM" {
            &["full", "freeze", "verbose", "analyze", "analyse"]
        } else {
            &["verbose"]
        };
        for w in words {
            if word(k).as_deref() == Some(*w)
                || (*w == "analyse" && word(k).as_deref() == Some("analyze"))
            {
                k += 1;
            }
        }
    }
    // table [ (column [, ...]) ] [, ...]
    let mut tables = vec![];
    while k < t.len() {
        let mut name = String::new();
        loop {
            match t.get(k).map(|x| &x.token) {
                Some(Token::Word(w)) => name.push_str(&w.to_string()),
                _ => return None,
            }
            k += 1;
            if matches!(t.get(k).map(|x| &x.token), Some(Token::Period)) {
                name.push('.');
                k += 1;
            } else {
                break;
            }
        }
        if matches!(t.get(k).map(|x| &x.token), Some(Token::LParen)) {
            k += 1;
            loop {
                // Each column follows its table's name after a tab.
                let col = word(k).or_else(|| match t.get(k).map(|x| &x.token) {
                    Some(Token::Word(w)) => Some(w.value.clone()),
                    _ => None,
                })?;
                name.push('\t');
                name.push_str(&col);
                k += 1;
                match t.get(k).map(|x| &x.token) {
                    Some(Token::Comma) => k += 1,
                    Some(Token::RParen) => {
                        k += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        tables.push(name);
        match t.get(k).map(|x| &x.token) {
            Some(Token::Comma) => k += 1,
            None => break,
            _ => return None,
        }
    }
    let mut args = vec![format!("'{kind}'")];
    args.extend(
        tables
            .iter()
            .map(|n| format!("'{}'", n.replace('\'', "''"))),
    );
    Some(format!("CALL {PROCEDURE}({})", args.join(", ")))
}

/// Whether `f` is the maintenance procedure.
pub fn is_call(f: &ast::Function) -> bool {
    f.name.to_string().eq_ignore_ascii_case(PROCEDURE)
}

/// Runs a VACUUM / ANALYZE made [`canonical`].
pub async fn run(s: &Session, f: &ast::Function) -> Result<Output> {
    let ast::FunctionArguments::List(l) = &f.args else {
        return Err(Error::Internal("maintenance call".into()));
    };
    let texts: Vec<String> = l
        .args
        .iter()
        .filter_map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => super::args::literal_text(e),
            _ => None,
        })
        .collect();
    let Some((kind, tables)) = texts.split_first() else {
        return Err(Error::Internal("maintenance call".into()));
    };
    let m = s.engine.catalog().snapshot();
    for t in tables {
        let mut parts = t.split('\t');
        let rel = parts.next().unwrap_or_default();
        let name = super::args::regclass_name(&ast::Expr::value(ast::Value::SingleQuotedString(
            rel.to_string(),
        )))?;
        let db = m.database(&s.db)?;
        if !db.tables.contains_key(&name) && !db.views.contains_key(&name) {
            return Err(Error::sql(
                "42P01",
                format!("relation \"{rel}\" does not exist"),
            ));
        }
        if let Some(def) = db.tables.get(&name) {
            for col in parts {
                if !def.columns.iter().any(|c| c.name == col) {
                    return Err(Error::sql(
                        "42703",
                        format!("column \"{col}\" of relation \"{name}\" does not exist"),
                    ));
                }
            }
        }
    }
    if kind == "VACUUM" {
        if s.staging.in_block() {
            return Err(Error::sql(
                "25001",
                "VACUUM cannot run inside a transaction block",
            ));
        }
        s.engine.flush().await?;
        s.engine.compact(false).await?;
        return Ok(Output::Command("VACUUM".into()));
    }
    Ok(Output::Command("ANALYZE".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn canon(sql: &str) -> Option<String> {
        let tokens: Vec<TokenWithSpan> = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .ok()?
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
            .collect();
        let refs: Vec<&TokenWithSpan> = tokens.iter().collect();
        canonical(&refs)
    }

    #[test]
    fn postgresql_forms() {
        assert_eq!(
            canon("VACUUM").as_deref(),
            Some("CALL sundial_maintenance('VACUUM')")
        );
        assert_eq!(
            canon("vacuum full verbose analyze public.t, u").as_deref(),
            Some("CALL sundial_maintenance('VACUUM', 'public.t', 'u')")
        );
        assert_eq!(
            canon("VACUUM (VERBOSE, ANALYZE, INDEX_CLEANUP off) t (a, b)").as_deref(),
            Some("CALL sundial_maintenance('VACUUM', 't\ta\tb')")
        );
        assert_eq!(
            canon("ANALYZE VERBOSE \"T\"").as_deref(),
            Some("CALL sundial_maintenance('ANALYZE', '\"T\"')")
        );
        assert_eq!(canon("ANALYZE (bogus) t"), None);
        assert_eq!(canon("VACUUM t u"), None);
    }
}
