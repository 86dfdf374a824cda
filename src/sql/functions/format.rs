//! `format(template, args...)` as PostgreSQL has it: `%s` (text, NULL as empty),
//! `%I` (an identifier, quoted when it must be), `%L` (a literal, NULL as `NULL`),
//! `%%`, and positions (`%2$s`). Widths and flags are rejected (0A000).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// The `format` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Format {
    signature: Signature,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            signature: Signature::variadic_any(Volatility::Stable),
        }
    }
}

fn err(state: &'static str, msg: impl Into<String>) -> datafusion::error::DataFusionError {
    crate::Error::sql(state, msg.into()).into()
}

/// PostgreSQL's `quote_ident`: as it is when it is a lower-case identifier.
fn quote_ident(s: &str) -> String {
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

/// PostgreSQL's `quote_literal` (`E'...'` when there is a backslash).
fn quote_literal(s: &str) -> String {
    let body = s.replace('\'', "''");
    if s.contains('\\') {
        format!("E'{}'", body.replace('\\', "\\\\"))
    } else {
        format!("'{body}'")
    }
}

/// One row: `template` with `args` (their text, `None` for NULL).
fn render(template: &str, args: &[Option<String>]) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut chars = template.chars().peekable();
    let mut next = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // %[n$]type
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let index = if !digits.is_empty() && chars.peek() == Some(&'$') {
            chars.next();
            let n: usize = digits
                .parse()
                .map_err(|_| err("22023", "format() argument number is out of range"))?;
            n.checked_sub(1).ok_or_else(|| {
                err(
                    "22023",
                    "format specifies argument 0, but arguments are numbered from 1",
                )
            })?
        } else if digits.is_empty() {
            next
        } else {
            return Err(err("0A000", "format() widths are not supported"));
        };
        let ty = chars
            .next()
            .ok_or_else(|| err("22023", "unterminated format() type specifier"))?;
        if ty == '%' {
            out.push('%');
            continue;
        }
        let arg = args
            .get(index)
            .ok_or_else(|| err("22023", "too few arguments for format()"))?;
        next = index + 1;
        match ty {
            's' => out.push_str(arg.as_deref().unwrap_or("")),
            'I' => match arg {
                Some(a) => out.push_str(&quote_ident(a)),
                None => {
                    return Err(err(
                        "22004",
                        "null values cannot be formatted as an SQL identifier",
                    ));
                }
            },
            'L' => match arg {
                Some(a) => out.push_str(&quote_literal(a)),
                None => out.push_str("NULL"),
            },
            '-' => return Err(err("0A000", "format() flags are not supported")),
            other => {
                return Err(err(
                    "22023",
                    format!("unrecognized format() type specifier \"{other}\""),
                ));
            }
        }
    }
    Ok(out)
}

/// An argument column as PostgreSQL's text (booleans `t` / `f`).
fn texts(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    if let DataType::Boolean = a.data_type() {
        let b = a.as_boolean();
        return Ok((0..b.len())
            .map(|i| {
                b.is_valid(i)
                    .then(|| if b.value(i) { "t" } else { "f" }.to_string())
            })
            .collect());
    }
    let s = arrow::compute::cast(a, &DataType::Utf8)?;
    let s = s.as_string::<i32>();
    Ok((0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect())
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let cols = arrays.iter().map(texts).collect::<Result<Vec<_>>>()?;
        let Some((template, rest)) = cols.split_first() else {
            return Err(err("42883", "function format() needs a template"));
        };
        let mut out = Vec::with_capacity(n);
        for r in 0..n {
            match &template[r] {
                None => out.push(None),
                Some(t) => {
                    let row: Vec<Option<String>> = rest.iter().map(|c| c[r].clone()).collect();
                    out.push(Some(render(t, &row)?));
                }
            }
        }
        super::columnar(Arc::new(StringArray::from(out)), scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_postgresql_does() {
        let a = |v: &[Option<&str>]| v.iter().map(|x| x.map(str::to_string)).collect::<Vec<_>>();
        assert_eq!(render("%s-%s", &a(&[Some("a"), Some("1")])).unwrap(), "a-1");
        assert_eq!(
            render("%I.%L %L", &a(&[Some("My T"), Some("it's"), None])).unwrap(),
            "\"My T\".'it''s' NULL"
        );
        assert_eq!(
            render("%2$s %1$s %%", &a(&[Some("x"), Some("y")])).unwrap(),
            "y x %"
        );
        assert_eq!(render("%s|", &a(&[None])).unwrap(), "|");
        assert!(render("%s %s", &a(&[Some("x")])).is_err());
        assert!(render("%q", &a(&[Some("x")])).is_err());
    }
}
