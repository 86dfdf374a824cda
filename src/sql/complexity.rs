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

/// The deepest nesting of function calls (`f(g(h(…)))`) and subscripts. sqlparser parses each
/// call's arguments twice over (an attempt, then the parse that holds), so its time
/// doubles with every level: 20 levels took 2 s in a debug build and the fuzzer found
/// a 345-byte statement that parsed for over 10 s. Queries rarely nest calls more
/// than a handful deep.
pub const MAX_CALL_DEPTH: usize = 16;

/// The most `.` a dotted name (`a.b.c`, `(rec).f.g`) may have. sqlparser parses
/// what follows each `.` as an attempt and again when the attempt fails, so a chain
/// that ends badly costs 2^N: the fuzzer found a stream whose 115-dot chain parsed
/// for over 15 minutes. PostgreSQL's longest qualified name has three dots.
pub const MAX_DOTS: usize = 12;

/// An error (54001) when `sql` nests deeper than [`MAX_DEPTH`], its function calls
/// deeper than [`MAX_CALL_DEPTH`], or a dotted name has more than [`MAX_DOTS`] dots.
pub fn check(sql: &str) -> Result<()> {
    if raw_dots(sql) > MAX_DOTS {
        let dots = dotted_chain(sql);
        if dots > MAX_DOTS {
            return Err(Error::sql(
                "54001",
                format!(
                    "statement too complex: a dotted name with {dots} dots, the limit is \
                     {MAX_DOTS}"
                ),
            ));
        }
    }
    if raw_paren_depth(sql) > MAX_CALL_DEPTH {
        let calls = call_depth(sql);
        if calls > MAX_CALL_DEPTH {
            return Err(Error::sql(
                "54001",
                format!(
                    "statement too complex: function calls nested {calls} deep, the limit is \
                     {MAX_CALL_DEPTH}"
                ),
            ));
        }
    }
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

/// The most `.` between two bytes that always end a dotted name (quotes not
/// considered): an upper bound of [`dotted_chain`] that needs no tokenizing.
fn raw_dots(sql: &str) -> usize {
    let (mut dots, mut most) = (0usize, 0usize);
    for b in sql.bytes() {
        match b {
            b'.' => {
                dots += 1;
                most = most.max(dots);
            }
            b',' | b';' | b'(' | b'=' | b'<' | b'>' | b'+' | b'-' | b'/' => dots = 0,
            _ => {}
        }
    }
    most
}

/// The most dots in one dotted name: a run of tokens where every other one is a `.`
/// (consecutive dots count too). Text the tokenizer refuses counts 0: the parser
/// refuses it as fast.
pub fn dotted_chain(sql: &str) -> usize {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return 0;
    };
    let (mut dots, mut most) = (0usize, 0usize);
    let mut after_dot = false;
    for t in &tokens {
        match t {
            Token::Whitespace(_) => continue,
            Token::Period => {
                dots += 1;
                most = most.max(dots);
                after_dot = true;
            }
            // A name part after a dot continues the chain; anything after a part ends it.
            _ if after_dot => after_dot = false,
            _ => dots = 0,
        }
    }
    most
}

/// The deepest nesting of `(` and `[` in the raw text (quotes not considered): an upper
/// bound of the call depth that needs no tokenizing.
fn raw_paren_depth(sql: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in sql.bytes() {
        match b {
            b'(' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Keywords a `(` can follow without being a call.
const NOT_CALLS: &[Keyword] = &[
    Keyword::SELECT,
    Keyword::FROM,
    Keyword::WHERE,
    Keyword::AND,
    Keyword::OR,
    Keyword::NOT,
    Keyword::IN,
    Keyword::ON,
    Keyword::AS,
    Keyword::WHEN,
    Keyword::THEN,
    Keyword::ELSE,
    Keyword::BY,
    Keyword::HAVING,
    Keyword::VALUES,
    Keyword::EXISTS,
    Keyword::JOIN,
    Keyword::LATERAL,
    Keyword::UNION,
    Keyword::ALL,
    Keyword::INTERSECT,
    Keyword::EXCEPT,
    Keyword::IS,
    Keyword::LIKE,
    Keyword::BETWEEN,
    Keyword::RETURNING,
    Keyword::USING,
    Keyword::WITH,
    Keyword::INTO,
    Keyword::SET,
    Keyword::RETURN,
];

/// How deeply function calls (a word right before `(`) and subscripts (`[`) nest;
/// unclosed ones count.
pub fn call_depth(sql: &str) -> usize {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return 0;
    };
    let mut open: Vec<bool> = vec![];
    let (mut calls, mut deepest) = (0usize, 0usize);
    let mut after_word = false;
    for t in &tokens {
        match t {
            Token::Whitespace(_) => continue,
            Token::LParen => {
                open.push(after_word);
                if after_word {
                    calls += 1;
                    deepest = deepest.max(calls);
                }
            }
            // Subscripts are tried twice over too.
            Token::LBracket => {
                open.push(true);
                calls += 1;
                deepest = deepest.max(calls);
            }
            Token::RParen | Token::RBracket if open.pop() == Some(true) => calls -= 1,
            _ => {}
        }
        after_word = matches!(t, Token::Word(w) if !NOT_CALLS.contains(&w.keyword));
    }
    deepest
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
    fn function_calls_nest_and_parentheses_alone_do_not() {
        let nested = |n: usize| format!("SELECT {}1{}", "abs(".repeat(n), ")".repeat(n));
        assert_eq!(call_depth(&nested(3)), 3);
        assert_eq!(call_depth("SELECT ((((1))))"), 0);
        assert_eq!(call_depth("SELECT f(1), g((h(2)))"), 2);
        assert!(check(&nested(MAX_CALL_DEPTH)).is_ok());
        assert!(check(&format!("SELECT {}1{}", "(".repeat(40), ")".repeat(40))).is_ok());
        let e = check(&nested(MAX_CALL_DEPTH + 1)).unwrap_err();
        assert_eq!(e.sqlstate(), "54001");
        // Unclosed calls count: the fuzzer's slow statement had few closing ones.
        assert!(check(&format!("SELECT {}y FROM t", "pg_typeof(".repeat(30))).is_err());
        assert!(check(&format!("SELECT {}1", "a[f(".repeat(9))).is_err());
    }

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
    fn long_dotted_names_are_too_complex() {
        assert_eq!(
            dotted_chain("SELECT t.a, s.t.b FROM s.t WHERE x.y.z = 1"),
            2
        );
        assert_eq!(dotted_chain("SELECT a . b . c"), 2);
        assert_eq!(dotted_chain("SELECT 1.5, 2.5 FROM t"), 0);
        assert_eq!(dotted_chain("SELECT a....b"), 4);
        let chain = |n: usize| format!("SELECT {}x", "a.".repeat(n));
        assert!(check(&chain(MAX_DOTS)).is_ok());
        let e = check(&chain(MAX_DOTS + 1)).unwrap_err();
        assert_eq!(e.sqlstate(), "54001");
        assert!(check(&format!("SELECT a{}b", ".".repeat(100))).is_err());
        // Many short names are fine, however many dots the statement has.
        let cols: Vec<String> = (0..200).map(|i| format!("s.t.c{i}")).collect();
        assert!(check(&format!("SELECT {} FROM s.t", cols.join(" , "))).is_ok());
        let spaced: Vec<String> = (0..200).map(|i| format!("t.c{i} AS a{i}")).collect();
        assert!(check(&format!("SELECT {} FROM t", spaced.join(" , "))).is_ok());
        // The worst case the bound allows parses quickly: a chain that ends badly.
        let worst = format!("SELECT {}+ FROM t", "a.".repeat(MAX_DOTS));
        assert!(crate::sql::parse(&worst).is_err());
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
