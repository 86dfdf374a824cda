//! Bounds how deeply a statement nests before it is parsed: a chain of N binary
//! operators (`1+1+…`, `a AND b AND …`, `UNION ALL` of N selects) becomes a syntax
//! tree N levels deep, which parsing, our rewrites and DataFusion clone, compare and
//! drop by recursion. Past [`MAX_DEPTH`] the statement gets PostgreSQL's 54001.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Error, Result};

/// The deepest nesting a statement may have. The stack would allow far more; the
/// bound is planning time: DataFusion derives an expression's name from its whole
/// subtree at every level and every analysis pass, so a chain of N operators costs
/// about N³ (650 terms took 16–21 s of CPU in a release build, 500 about 7 s).
pub const MAX_DEPTH: usize = 500;

/// Statements shorter than this cannot nest [`MAX_DEPTH`] deep (every level takes
/// at least one character and one operator): no tokenizing for them.
const SHORT: usize = 2 * MAX_DEPTH;

/// An error (54001) when `sql` nests deeper than [`MAX_DEPTH`].
pub fn check(sql: &str) -> Result<()> {
    if sql.len() < SHORT {
        return Ok(());
    }
    let depth = depth(sql);
    if depth > MAX_DEPTH {
        return Err(Error::sql(
            "54001",
            format!(
                "statement too complex: it nests about {depth} levels deep (operator chains, \
                 parentheses, set operations), the limit is {MAX_DEPTH}"
            ),
        ));
    }
    Ok(())
}

/// One open level: a parenthesis or a CASE, and the operators chained in it since
/// its last list separator.
struct Level {
    case: bool,
    chain: usize,
}

/// An upper bound of the syntax tree's depth: at each token, the open levels plus
/// every operator still chained in them. A comma (or WHEN/THEN/ELSE in a CASE) ends a
/// chain: list items are siblings, not nested. Text the tokenizer refuses has depth 0
/// (the parser reports it).
pub fn depth(sql: &str) -> usize {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return 0;
    };
    let mut levels = vec![Level {
        case: false,
        chain: 0,
    }];
    let mut chained = 0usize;
    let mut deepest = 0usize;
    for t in &tokens {
        match t {
            Token::Whitespace(_) | Token::Period => continue,
            Token::LParen | Token::LBracket => levels.push(Level {
                case: false,
                chain: 0,
            }),
            Token::RParen | Token::RBracket => close(&mut levels, &mut chained, false),
            Token::Comma => reset(&mut levels, &mut chained),
            Token::SemiColon => {
                levels.truncate(1);
                reset(&mut levels, &mut chained);
            }
            Token::Word(w) => match w.keyword {
                Keyword::CASE => levels.push(Level {
                    case: true,
                    chain: 0,
                }),
                Keyword::END => close(&mut levels, &mut chained, true),
                Keyword::WHEN | Keyword::THEN | Keyword::ELSE
                    if levels.last().is_some_and(|l| l.case) =>
                {
                    reset(&mut levels, &mut chained)
                }
                Keyword::AND
                | Keyword::OR
                | Keyword::NOT
                | Keyword::UNION
                | Keyword::INTERSECT
                | Keyword::EXCEPT
                | Keyword::IS
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::BETWEEN
                | Keyword::IN
                | Keyword::AT
                | Keyword::COLLATE => chain(&mut levels, &mut chained),
                _ => {}
            },
            Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::DollarQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::Placeholder(_)
            | Token::Char(_)
            | Token::EOF => {}
            _ => chain(&mut levels, &mut chained),
        }
        deepest = deepest.max(levels.len() + chained);
    }
    deepest
}

fn chain(levels: &mut [Level], chained: &mut usize) {
    if let Some(l) = levels.last_mut() {
        l.chain += 1;
        *chained += 1;
    }
}

fn reset(levels: &mut [Level], chained: &mut usize) {
    if let Some(l) = levels.last_mut() {
        *chained -= l.chain;
        l.chain = 0;
    }
}

/// Closes the innermost level (of the right kind: an END closes only a CASE).
fn close(levels: &mut Vec<Level>, chained: &mut usize, case: bool) {
    if levels.len() > 1
        && levels.last().is_some_and(|l| l.case == case)
        && let Some(l) = levels.pop()
    {
        *chained -= l.chain;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_nest_and_lists_do_not() {
        assert_eq!(depth("SELECT 1"), 1);
        assert_eq!(depth("SELECT 1+2+3"), 3);
        // an upper bound: the tree is 3 deep
        assert_eq!(depth("SELECT (1+2)+(3+4)"), 4);
        assert_eq!(depth("SELECT a+b, c+d, e+f FROM t"), 2);
        assert_eq!(depth("SELECT CASE WHEN a=1 THEN b+c ELSE d END"), 3);
        let values: Vec<String> = (0..5000).map(|i| format!("({i}, 'x{i}', {i}.5)")).collect();
        let insert = format!("INSERT INTO t VALUES {}", values.join(", "));
        assert!(depth(&insert) <= 3);
        assert!(check(&insert).is_ok());
    }

    #[test]
    fn long_chains_are_too_complex() {
        let terms = vec!["1"; MAX_DEPTH + 5].join("+");
        let e = check(&format!("SELECT {terms}")).err();
        assert_eq!(e.map(|e| e.sqlstate()), Some("54001"));
        let ands = vec!["a = 1"; MAX_DEPTH].join(" AND ");
        assert!(check(&format!("SELECT * FROM t WHERE {ands}")).is_err());
        let unions = vec!["SELECT 1"; MAX_DEPTH + 1].join(" UNION ALL ");
        assert!(check(&unions).is_err());
        let fine = vec!["1"; MAX_DEPTH / 2].join("+");
        assert!(check(&format!("SELECT {fine}")).is_ok());
    }
}
