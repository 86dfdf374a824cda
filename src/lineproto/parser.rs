//! Zero-copy parser for InfluxDB line protocol, following the strict 1.x rules
//! (escaping, field types, error wording), plus the escaping writers and
//! `format_line` used by generators and tests.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Longest string field value accepted, in bytes after unescaping.
const MAX_STRING_LEN: usize = 65_536;
/// `ParseError::text` is cut to at most this many bytes.
const MAX_ERROR_TEXT: usize = 256;
/// Keys quoted inside an error reason are cut to at most this many bytes.
const MAX_KEY_IN_REASON: usize = 128;
/// Up to this many keys, duplicates are found by comparing every pair.
const SMALL_KEY_COUNT: usize = 16;

/// Which escape sequences a slice of the input understands.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Esc {
    /// The measurement: `\,` `\ ` `\\`.
    Measurement,
    /// Tag keys, tag values and field keys: `\,` `\=` `\ ` `\\`.
    Key,
    /// The inside of a string field value: `\"` `\\`.
    Str,
}

impl Esc {
    /// True if a backslash followed by `b` is an escape sequence for `b`.
    #[inline]
    fn escapes(self, b: u8) -> bool {
        match self {
            Esc::Measurement => matches!(b, b',' | b' ' | b'\\'),
            Esc::Key => matches!(b, b',' | b'=' | b' ' | b'\\'),
            Esc::Str => matches!(b, b'"' | b'\\'),
        }
    }
}

/// A slice of the input that may still contain backslash escapes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EscStr<'a> {
    raw: &'a str,
    escaped: bool,
    kind: Esc,
}

impl<'a> EscStr<'a> {
    fn new(raw: &'a str, escaped: bool, kind: Esc) -> Self {
        EscStr { raw, escaped, kind }
    }

    /// The text as in the input, escapes included.
    pub fn raw(&self) -> &'a str {
        self.raw
    }

    /// True if `raw` holds at least one escape sequence to resolve.
    pub fn is_escaped(&self) -> bool {
        self.escaped
    }

    /// The unescaped text; borrowed from the input when there are no escapes.
    pub fn as_str(&self) -> Cow<'a, str> {
        if self.escaped {
            let mut s = String::with_capacity(self.raw.len());
            self.write_unescaped(&mut s);
            Cow::Owned(s)
        } else {
            Cow::Borrowed(self.raw)
        }
    }

    /// Appends the unescaped text to `out`.
    pub fn write_unescaped(&self, out: &mut String) {
        if !self.escaped {
            out.push_str(self.raw);
            return;
        }
        let bytes = self.raw.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'\\' && i + 1 < bytes.len() && self.kind.escapes(bytes[i + 1]) {
                // Both bytes are ASCII, so `i` and `i + 1` are char boundaries.
                out.push_str(&self.raw[start..i]);
                start = i + 1;
                i += 2;
            } else {
                i += 1;
            }
        }
        out.push_str(&self.raw[start..]);
    }

    /// The unescaped bytes, without allocating.
    fn unescaped_bytes(&self) -> UnescapedBytes<'a> {
        UnescapedBytes {
            bytes: self.raw.as_bytes(),
            pos: 0,
            kind: self.kind,
        }
    }

    /// True if two keys unescape to the same text.
    fn eq_unescaped(&self, other: &EscStr<'_>) -> bool {
        if !self.escaped && !other.escaped {
            self.raw == other.raw
        } else {
            self.unescaped_bytes().eq(other.unescaped_bytes())
        }
    }

    /// Compares the unescaped texts of two keys.
    fn cmp_unescaped(&self, other: &EscStr<'_>) -> std::cmp::Ordering {
        if !self.escaped && !other.escaped {
            self.raw.as_bytes().cmp(other.raw.as_bytes())
        } else {
            self.unescaped_bytes().cmp(other.unescaped_bytes())
        }
    }
}

struct UnescapedBytes<'a> {
    bytes: &'a [u8],
    pos: usize,
    kind: Esc,
}

impl Iterator for UnescapedBytes<'_> {
    type Item = u8;

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        if b == b'\\'
            && let Some(&n) = self.bytes.get(self.pos + 1)
            && self.kind.escapes(n)
        {
            self.pos += 2;
            return Some(n);
        }
        self.pos += 1;
        Some(b)
    }
}

/// A field value. Strings keep their escapes until asked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FieldValue<'a> {
    Float(f64),
    Int(i64),
    UInt(u64),
    Str(EscStr<'a>),
    Bool(bool),
}

/// One parsed line. `tags` and `fields` borrow buffers inside the [`Parser`]
/// and are valid until the next call to [`Parser::next_line`].
#[derive(Debug)]
pub struct Line<'p, 'a> {
    /// 1-based line number within the body (blank and comment lines count).
    pub number: usize,
    /// The whole line, without the newline and a trailing `\r`.
    pub text: &'a str,
    pub measurement: EscStr<'a>,
    /// Tags in input order.
    pub tags: &'p [(EscStr<'a>, EscStr<'a>)],
    /// Fields in input order.
    pub fields: &'p [(EscStr<'a>, FieldValue<'a>)],
    /// The raw timestamp; precision is not applied.
    pub timestamp: Option<i64>,
}

/// A line that could not be parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// 1-based line number within the body.
    pub line: usize,
    /// The line, cut to at most 256 bytes on a char boundary.
    pub text: String,
    /// Short lowercase reason, e.g. `missing fields`.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unable to parse '{}': {}", self.text, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Reason for a failed line: a fixed phrase, or a built one for errors that
/// name a key.
type Reason = Cow<'static, str>;

fn reason(s: &'static str) -> Reason {
    Cow::Borrowed(s)
}

/// Cuts `s` to at most `max` bytes on a char boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Iterates over the lines of a body. Reuses its tag and field buffers, so
/// parsing allocates nothing once they have grown to the widest line.
pub struct Parser<'a> {
    body: &'a [u8],
    pos: usize,
    line_no: usize,
    tags: Vec<(EscStr<'a>, EscStr<'a>)>,
    fields: Vec<(EscStr<'a>, FieldValue<'a>)>,
    order: Vec<usize>,
}

impl<'a> Parser<'a> {
    pub fn new(body: &'a [u8]) -> Parser<'a> {
        Parser {
            body,
            pos: 0,
            line_no: 0,
            tags: Vec::new(),
            fields: Vec::new(),
            order: Vec::new(),
        }
    }

    /// Next non-blank, non-comment line; `None` at the end of the body.
    /// After an `Err` the parser continues with the next line.
    pub fn next_line(&mut self) -> Option<Result<Line<'_, 'a>, ParseError>> {
        let body = self.body;
        let line = loop {
            if self.pos >= body.len() {
                return None;
            }
            let rest = &body[self.pos..];
            let (mut line, advance) = match find_newline(rest) {
                Some(n) => (&rest[..n], n + 1),
                None => (rest, rest.len()),
            };
            self.pos += advance;
            self.line_no += 1;
            if let [head @ .., b'\r'] = line {
                line = head;
            }
            let first = line.iter().position(|&b| b != b' ' && b != b'\t');
            match first {
                None => continue,
                Some(i) if line[i] == b'#' => continue,
                Some(_) => break line,
            }
        };
        let number = self.line_no;
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(_) => {
                let head = &line[..line.len().min(MAX_ERROR_TEXT)];
                let lossy = String::from_utf8_lossy(head);
                return Some(Err(ParseError {
                    line: number,
                    text: cut(&lossy, MAX_ERROR_TEXT).to_owned(),
                    reason: "invalid utf-8".to_owned(),
                }));
            }
        };
        self.tags.clear();
        self.fields.clear();
        let parsed = parse_line(text, &mut self.tags, &mut self.fields, &mut self.order);
        Some(match parsed {
            Ok((measurement, timestamp)) => Ok(Line {
                number,
                text,
                measurement,
                tags: &self.tags,
                fields: &self.fields,
                timestamp,
            }),
            Err(reason) => Err(ParseError {
                line: number,
                text: cut(text, MAX_ERROR_TEXT).to_owned(),
                reason: reason.into_owned(),
            }),
        })
    }
}

/// Index of the first `\n` in `s`, looking at eight bytes at a time.
#[inline]
fn find_newline(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const NEWLINES: u64 = ONES * b'\n' as u64;
    let mut chunks = s.chunks_exact(8);
    let mut base = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word) ^ NEWLINES;
        // Non-zero if some byte of `x` is zero, i.e. some byte was `\n`.
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            break;
        }
        base += 8;
    }
    s[base..].iter().position(|&b| b == b'\n').map(|i| base + i)
}

/// Where an escaped token stopped.
struct Token<'a> {
    s: EscStr<'a>,
    /// Index of the byte that ended the token, or `len` at the end of line.
    end: usize,
}

/// Scans an escaped token from `start` until an unescaped byte for which
/// `stop` is true, or the end of the line.
#[inline]
fn scan<'a>(text: &'a str, start: usize, kind: Esc, stop: impl Fn(u8) -> bool) -> Token<'a> {
    let bytes = text.as_bytes();
    let mut escaped = false;
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\\' {
            if i + 1 < bytes.len() && kind.escapes(bytes[i + 1]) {
                escaped = true;
                i += 2;
            } else {
                i += 1;
            }
        } else if stop(b) {
            break;
        } else {
            i += 1;
        }
    }
    // `i` is at an ASCII byte or at the end: both are char boundaries.
    Token {
        s: EscStr::new(&text[start..i], escaped, kind),
        end: i,
    }
}

/// Index of the first byte at or after `i` that is not a space or tab.
#[inline]
fn skip_blanks(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b'\t') {
        i += 1;
    }
    i
}

type Parsed<'a> = Result<(EscStr<'a>, Option<i64>), Reason>;

fn parse_line<'a>(
    text: &'a str,
    tags: &mut Vec<(EscStr<'a>, EscStr<'a>)>,
    fields: &mut Vec<(EscStr<'a>, FieldValue<'a>)>,
    order: &mut Vec<usize>,
) -> Parsed<'a> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    let start = skip_blanks(bytes, 0);

    // Measurement.
    let m = scan(text, start, Esc::Measurement, |b| b == b',' || b == b' ');
    if m.s.raw.is_empty() {
        return Err(reason("missing measurement"));
    }
    let measurement = m.s;
    let mut i = m.end;

    // Tags.
    if i < len && bytes[i] == b',' {
        loop {
            i += 1; // the comma
            let k = scan(text, i, Esc::Key, |b| b == b'=' || b == b',' || b == b' ');
            if k.s.raw.is_empty() {
                return Err(reason("missing tag key"));
            }
            if k.end >= len || bytes[k.end] != b'=' {
                return Err(reason("missing tag value"));
            }
            let v = scan(text, k.end + 1, Esc::Key, |b| {
                b == b',' || b == b' ' || b == b'='
            });
            if v.end < len && bytes[v.end] == b'=' {
                return Err(reason("invalid tag format"));
            }
            if v.s.raw.is_empty() {
                return Err(reason("missing tag value"));
            }
            tags.push((k.s, v.s));
            i = v.end;
            if i >= len || bytes[i] != b',' {
                break;
            }
        }
        if find_duplicate(tags, |t| &t.0, order).is_some() {
            return Err(reason("duplicate tags"));
        }
    }

    // Fields. Only spaces separate them from the tags: a tab here would be
    // the first byte of a field key (a tab has no escape).
    while i < len && bytes[i] == b' ' {
        i += 1;
    }
    if skip_blanks(bytes, i) >= len {
        return Err(reason("missing fields"));
    }
    loop {
        let k = scan(text, i, Esc::Key, |b| b == b'=' || b == b',' || b == b' ');
        if k.s.raw.is_empty() {
            return Err(reason("missing field key"));
        }
        if k.end >= len || bytes[k.end] != b'=' {
            return Err(reason("missing field value"));
        }
        let (value, end) = parse_field_value(text, k.end + 1)?;
        fields.push((k.s, value));
        i = end;
        if i < len && bytes[i] == b',' {
            i += 1;
        } else {
            break;
        }
    }
    if let Some(dup) = find_duplicate(fields, |f| &f.0, order) {
        let name = fields[dup].0.as_str();
        return Err(Cow::Owned(format!(
            "duplicate field '{}'",
            cut(&name, MAX_KEY_IN_REASON)
        )));
    }

    // Timestamp.
    i = skip_blanks(bytes, i);
    if i >= len {
        return Ok((measurement, None));
    }
    let ts_start = i;
    while i < len && bytes[i] != b' ' && bytes[i] != b'\t' {
        i += 1;
    }
    let ts = parse_i64(&text[ts_start..i]).ok_or_else(|| reason("invalid timestamp"))?;
    if skip_blanks(bytes, i) < len {
        return Err(reason("extra data after timestamp"));
    }
    Ok((measurement, Some(ts)))
}

/// Index of a key that unescapes to the same text as another one, if any.
/// Quadratic for a few keys; for many, sorts indices in `order` (reused
/// between lines) so that the time stays O(n log n).
fn find_duplicate<T>(
    items: &[T],
    key: impl Fn(&T) -> &EscStr<'_>,
    order: &mut Vec<usize>,
) -> Option<usize> {
    let n = items.len();
    if n <= SMALL_KEY_COUNT {
        return (1..n).find(|&j| {
            let kj = key(&items[j]);
            items[..j].iter().any(|e| key(e).eq_unescaped(kj))
        });
    }
    order.clear();
    order.extend(0..n);
    order.sort_unstable_by(|&a, &b| key(&items[a]).cmp_unescaped(key(&items[b])));
    order
        .windows(2)
        .find(|w| key(&items[w[0]]).eq_unescaped(key(&items[w[1]])))
        .map(|w| w[0])
}

/// Parses the field value starting at `start` (just after the `=`). Returns
/// the value and the index of the byte after it (a `,`, blank, or the end).
fn parse_field_value(text: &str, start: usize) -> Result<(FieldValue<'_>, usize), Reason> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    if start < len && bytes[start] == b'"' {
        return parse_string(text, start + 1);
    }
    let mut end = start;
    while end < len && !matches!(bytes[end], b',' | b' ' | b'\t') {
        end += 1;
    }
    // `end` is at an ASCII byte or at the end: a char boundary.
    let token = &text[start..end];
    let value = match token.as_bytes() {
        [] => return Err(reason("missing field value")),
        b"t" | b"T" | b"true" | b"True" | b"TRUE" => FieldValue::Bool(true),
        b"f" | b"F" | b"false" | b"False" | b"FALSE" => FieldValue::Bool(false),
        [b'0'..=b'9' | b'-' | b'+' | b'.', ..] => parse_number(token)?,
        _ if ["nan", "inf", "infinity"]
            .iter()
            .any(|w| token.eq_ignore_ascii_case(w)) =>
        {
            return Err(reason("invalid number"));
        }
        _ => return Err(reason("invalid field value")),
    };
    Ok((value, end))
}

/// Parses a string field whose contents start at `start` (after the `"`).
fn parse_string(text: &str, start: usize) -> Result<(FieldValue<'_>, usize), Reason> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    let mut escapes = 0usize;
    let mut i = start;
    loop {
        match bytes.get(i) {
            None => return Err(reason("unterminated string")),
            Some(b'"') => break,
            Some(b'\\') if i + 1 < len && Esc::Str.escapes(bytes[i + 1]) => {
                escapes += 1;
                i += 2;
            }
            Some(_) => i += 1,
        }
    }
    if i - start - escapes > MAX_STRING_LEN {
        return Err(reason("string field too long (max 65536 bytes)"));
    }
    let end = i + 1; // after the closing quote
    if end < len && !matches!(bytes[end], b',' | b' ' | b'\t') {
        return Err(reason("invalid field value"));
    }
    // `start` follows a `"` and `i` is at one: both are char boundaries.
    let s = EscStr::new(&text[start..i], escapes > 0, Esc::Str);
    Ok((FieldValue::Str(s), end))
}

/// True if `s` is one or more ASCII digits.
fn all_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// Parses an optionally negative decimal integer (no `+`, no blanks).
fn parse_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !all_digits(digits.as_bytes()) {
        return None;
    }
    s.parse().ok()
}

/// True if `s` matches `-?(D+(.D*)?|.D+)([eE][+-]?D+)?`.
fn is_float_syntax(s: &[u8]) -> bool {
    let mut i = usize::from(s.first() == Some(&b'-'));
    let int_start = i;
    while i < s.len() && s[i].is_ascii_digit() {
        i += 1;
    }
    let mut digits = i - int_start;
    if i < s.len() && s[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        digits += i - frac_start;
    }
    if digits == 0 {
        return false;
    }
    if i < s.len() && (s[i] == b'e' || s[i] == b'E') {
        i += 1;
        if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
            i += 1;
        }
        let exp_start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return false;
        }
    }
    i == s.len()
}

/// Parses an unquoted numeric token: `12i`, `12u` or a float.
fn parse_number(token: &str) -> Result<FieldValue<'static>, Reason> {
    if let Some(body) = token.strip_suffix('i') {
        let digits = body.strip_prefix('-').unwrap_or(body);
        if !all_digits(digits.as_bytes()) {
            return Err(reason("invalid integer"));
        }
        return body
            .parse()
            .map(FieldValue::Int)
            .map_err(|_| reason("integer overflow"));
    }
    if let Some(body) = token.strip_suffix('u') {
        if !all_digits(body.as_bytes()) {
            return Err(reason("invalid unsigned integer"));
        }
        return body
            .parse()
            .map(FieldValue::UInt)
            .map_err(|_| reason("unsigned integer overflow"));
    }
    if !is_float_syntax(token.as_bytes()) {
        return Err(reason("invalid number"));
    }
    match token.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(FieldValue::Float(v)),
        _ => Err(reason("invalid number")),
    }
}

/// Writes `s` to `out`, putting a backslash before every byte in `special`
/// and before a backslash that would otherwise start an escape sequence
/// (one followed by an escapable byte, or ending the text).
fn escape_with(s: &str, out: &mut String, kind: Esc, special: fn(u8) -> bool) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let needs = if b == b'\\' {
            bytes.get(i + 1).is_none_or(|&n| kind.escapes(n))
        } else {
            special(b)
        };
        if needs {
            // `b` is ASCII, so `i` is a char boundary.
            out.push_str(&s[start..i]);
            out.push('\\');
            start = i;
        }
    }
    out.push_str(&s[start..]);
}

/// Escapes a measurement name: comma and space, and a backslash where it
/// would otherwise be read as the start of an escape.
pub fn escape_measurement(s: &str, out: &mut String) {
    escape_with(s, out, Esc::Measurement, |b| b == b',' || b == b' ');
}

/// Escapes a tag key, tag value or field key: comma, `=` and space, and a
/// backslash where it would otherwise be read as the start of an escape.
pub fn escape_key(s: &str, out: &mut String) {
    escape_with(s, out, Esc::Key, |b| matches!(b, b',' | b'=' | b' '));
}

/// Escapes the contents of a string field value: `"` and `\`.
pub fn escape_string_field(s: &str, out: &mut String) {
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        if b == b'"' || b == b'\\' {
            out.push_str(&s[start..i]);
            out.push('\\');
            start = i;
        }
    }
    out.push_str(&s[start..]);
}

/// An owned field value, for writing lines with [`format_line`].
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedFieldValue {
    Float(f64),
    Int(i64),
    UInt(u64),
    Str(String),
    Bool(bool),
}

/// Appends one point as a line, without a trailing newline.
///
/// Tags with an empty value are left out, as InfluxDB clients do (the line
/// protocol cannot express them). Floats are written in Rust's shortest
/// round-trip form (`1.0`, `0.1`, `1e300`); NaN and infinities cannot be
/// expressed and are written as `NaN`/`inf`, which the parser rejects. An
/// empty measurement or key, or no fields, likewise gives a line that does
/// not parse.
pub fn format_line(
    out: &mut String,
    measurement: &str,
    tags: &[(&str, &str)],
    fields: &[(&str, OwnedFieldValue)],
    timestamp: Option<i64>,
) {
    escape_measurement(measurement, out);
    for (k, v) in tags {
        if v.is_empty() {
            continue;
        }
        out.push(',');
        escape_key(k, out);
        out.push('=');
        escape_key(v, out);
    }
    for (n, (k, v)) in fields.iter().enumerate() {
        out.push(if n == 0 { ' ' } else { ',' });
        escape_key(k, out);
        out.push('=');
        // Writing to a String cannot fail.
        let _ = match v {
            OwnedFieldValue::Float(f) => write!(out, "{f:?}"),
            OwnedFieldValue::Int(i) => write!(out, "{i}i"),
            OwnedFieldValue::UInt(u) => write!(out, "{u}u"),
            OwnedFieldValue::Bool(b) => write!(out, "{b}"),
            OwnedFieldValue::Str(s) => {
                out.push('"');
                escape_string_field(s, out);
                out.push('"');
                Ok(())
            }
        };
    }
    if let Some(ts) = timestamp {
        let _ = write!(out, " {ts}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A parsed line with every string unescaped, for comparisons.
    #[derive(Debug, PartialEq)]
    struct Owned {
        number: usize,
        measurement: String,
        tags: Vec<(String, String)>,
        fields: Vec<(String, OwnedFieldValue)>,
        timestamp: Option<i64>,
    }

    fn own(line: &Line<'_, '_>) -> Owned {
        Owned {
            number: line.number,
            measurement: line.measurement.as_str().into_owned(),
            tags: line
                .tags
                .iter()
                .map(|(k, v)| (k.as_str().into_owned(), v.as_str().into_owned()))
                .collect(),
            fields: line
                .fields
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        FieldValue::Float(f) => OwnedFieldValue::Float(*f),
                        FieldValue::Int(i) => OwnedFieldValue::Int(*i),
                        FieldValue::UInt(u) => OwnedFieldValue::UInt(*u),
                        FieldValue::Bool(b) => OwnedFieldValue::Bool(*b),
                        FieldValue::Str(s) => OwnedFieldValue::Str(s.as_str().into_owned()),
                    };
                    (k.as_str().into_owned(), v)
                })
                .collect(),
            timestamp: line.timestamp,
        }
    }

    /// Every line of a body, parsed and owned.
    fn all(body: &[u8]) -> Vec<Result<Owned, ParseError>> {
        let mut p = Parser::new(body);
        let mut out = Vec::new();
        while let Some(r) = p.next_line() {
            out.push(r.map(|l| own(&l)));
        }
        out
    }

    /// The only line of `s`.
    fn one(s: &str) -> Result<Owned, ParseError> {
        let mut v = all(s.as_bytes());
        assert_eq!(v.len(), 1, "expected exactly one line in {s:?}");
        v.remove(0)
    }

    fn ok(s: &str) -> Owned {
        match one(s) {
            Ok(o) => o,
            Err(e) => panic!("{:?} should parse: {}", cut(s, 200), e.reason),
        }
    }

    fn err(s: &str) -> String {
        match one(s) {
            Ok(o) => panic!("{:?} should fail, got {:?}", cut(s, 200), o.fields.len()),
            Err(e) => e.reason,
        }
    }

    fn field(s: &str) -> OwnedFieldValue {
        let o = ok(&format!("m f={s}"));
        assert_eq!(o.fields.len(), 1);
        o.fields[0].1.clone()
    }

    fn field_err(s: &str) -> String {
        err(&format!("m f={s}"))
    }

    fn strs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    use OwnedFieldValue as V;

    // ---- grammar -------------------------------------------------------

    #[test]
    fn full_line() {
        let o = ok(
            "cpu,host=a,region=eu usage=1.5,count=3i,ok=t,name=\"x\",big=7u 1451606400000000000",
        );
        assert_eq!(o.number, 1);
        assert_eq!(o.measurement, "cpu");
        assert_eq!(o.tags, strs(&[("host", "a"), ("region", "eu")]));
        assert_eq!(
            o.fields,
            vec![
                ("usage".into(), V::Float(1.5)),
                ("count".into(), V::Int(3)),
                ("ok".into(), V::Bool(true)),
                ("name".into(), V::Str("x".into())),
                ("big".into(), V::UInt(7)),
            ]
        );
        assert_eq!(o.timestamp, Some(1_451_606_400_000_000_000));
    }

    #[test]
    fn no_tags_no_timestamp() {
        let o = ok("m f=1");
        assert_eq!(o.measurement, "m");
        assert!(o.tags.is_empty());
        assert_eq!(o.fields, vec![("f".into(), V::Float(1.0))]);
        assert_eq!(o.timestamp, None);
    }

    #[test]
    fn tags_and_fields_keep_input_order() {
        let o = ok("m,z=1,a=2,m=3 z=1,a=2,m=3");
        assert_eq!(o.tags, strs(&[("z", "1"), ("a", "2"), ("m", "3")]));
        let keys: Vec<_> = o.fields.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }

    #[test]
    fn line_borrows_input() {
        let body = b"cpu,host=a f=\"s\" 5\n";
        let mut p = Parser::new(body);
        let Some(Ok(line)) = p.next_line() else {
            panic!("line expected");
        };
        assert_eq!(line.text, "cpu,host=a f=\"s\" 5");
        assert_eq!(line.measurement.raw(), "cpu");
        assert!(matches!(line.measurement.as_str(), Cow::Borrowed("cpu")));
        assert_eq!(line.tags[0].1.raw(), "a");
        assert!(matches!(line.fields[0].1, FieldValue::Str(s) if s.raw() == "s"));
    }

    #[test]
    fn blanks_between_sections() {
        let o = ok("m,t=1   f=1   5   ");
        assert_eq!(o.fields, vec![("f".into(), V::Float(1.0))]);
        assert_eq!(o.timestamp, Some(5));
        let o = ok("m f=1\t5\t");
        assert_eq!(o.timestamp, Some(5));
        // Only spaces separate the tags from the fields: a tab starts a key.
        assert_eq!(ok("m,t=1 \tf=1").fields[0].0, "\tf");
        // Trailing blanks with no timestamp.
        assert_eq!(ok("m f=1  \t").timestamp, None);
    }

    // ---- lines, comments, line numbers ---------------------------------

    #[test]
    fn splits_lines_and_numbers_them() {
        let body = b"\n# comment\n  \t\nm f=1\r\n   # indented comment\n\tm2 f=2 7\r\n\r\nm3 f=3";
        let v = all(body);
        let got: Vec<_> = v
            .iter()
            .map(|r| match r {
                Ok(o) => (o.number, o.measurement.clone(), o.timestamp),
                Err(e) => panic!("{e}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (4, "m".to_string(), None),
                (6, "m2".to_string(), Some(7)),
                (8, "m3".to_string(), None),
            ]
        );
    }

    #[test]
    fn text_excludes_newline_and_cr_but_keeps_leading_blanks() {
        let mut p = Parser::new(b"  m f=1 5\r\nm f=2\n");
        let Some(Ok(l)) = p.next_line() else {
            panic!("line expected")
        };
        assert_eq!(l.text, "  m f=1 5");
        assert_eq!(l.timestamp, Some(5));
        let Some(Ok(l)) = p.next_line() else {
            panic!("line expected")
        };
        assert_eq!((l.text, l.number), ("m f=2", 2));
        assert!(p.next_line().is_none());
        assert!(p.next_line().is_none());
    }

    #[test]
    fn empty_and_comment_only_bodies() {
        assert!(all(b"").is_empty());
        assert!(all(b"\n\n\r\n").is_empty());
        assert!(all(b"# a\n#b\n   # c").is_empty());
        // A comment is only a comment at the start of the line.
        assert_eq!(ok("m#x f=1").measurement, "m#x");
    }

    #[test]
    fn only_one_trailing_cr_is_stripped() {
        assert_eq!(err("m f=1\r\r"), "invalid number");
        assert_eq!(ok("m f=1\r").fields[0].1, V::Float(1.0));
    }

    #[test]
    fn newline_always_ends_a_line_even_inside_quotes() {
        let v = all(b"m s=\"a\nb\" 1\nm f=1");
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[0].as_ref().map_err(|e| e.reason.as_str()).err(),
            Some("unterminated string")
        );
        // `b" 1` is a measurement `b"` and then the timestamp-less field `1`?
        // No: `1` has no `=`, so it is a missing field value.
        assert_eq!(
            v[1].as_ref().err().map(|e| (e.line, e.reason.as_str())),
            Some((2, "missing field value"))
        );
        assert_eq!(v[2].as_ref().ok().map(|o| o.number), Some(3));
    }

    #[test]
    fn parser_continues_after_errors() {
        let v = all(b"m\nm f=1\nbad f=x\nm f=2 3");
        let summary: Vec<_> = v
            .iter()
            .map(|r| match r {
                Ok(o) => format!("ok {}", o.number),
                Err(e) => format!("err {} {}", e.line, e.reason),
            })
            .collect();
        assert_eq!(
            summary,
            [
                "err 1 missing fields",
                "ok 2",
                "err 3 invalid field value",
                "ok 4"
            ]
        );
    }

    #[test]
    fn invalid_utf8_fails_only_that_line() {
        let v = all(b"m f=1\nm,t=\xff\xfe f=1\n# \xff comment\nm f=2");
        assert_eq!(v.len(), 3);
        assert!(v[0].is_ok());
        let e = v[1].as_ref().err().cloned();
        let Some(e) = e else { panic!("error expected") };
        assert_eq!((e.line, e.reason.as_str()), (2, "invalid utf-8"));
        assert_eq!(e.text, "m,t=\u{FFFD}\u{FFFD} f=1");
        assert_eq!(v[2].as_ref().ok().map(|o| o.number), Some(4));
    }

    #[test]
    fn invalid_utf8_error_text_is_cut() {
        let mut body = vec![0xffu8; 1000];
        body.extend_from_slice(b" f=1");
        let v = all(&body);
        let Some(Err(e)) = v.first() else {
            panic!("error expected")
        };
        assert!(e.text.len() <= 256);
        assert!(e.text.starts_with('\u{FFFD}'));
    }

    // ---- measurement and tags ------------------------------------------

    #[test]
    fn missing_measurement() {
        assert_eq!(err(",t=1 f=1"), "missing measurement");
        assert_eq!(err("  ,t=1 f=1"), "missing measurement");
    }

    #[test]
    fn measurement_may_contain_equals() {
        assert_eq!(ok("a=b f=1").measurement, "a=b");
    }

    #[test]
    fn missing_fields() {
        assert_eq!(err("m"), "missing fields");
        assert_eq!(err("m   "), "missing fields");
        assert_eq!(err("m,t=1"), "missing fields");
        assert_eq!(err("m,t=1 \t "), "missing fields");
        // A line that starts with blanks then a field-looking word is a measurement.
        assert_eq!(err("   f=1"), "missing fields");
    }

    #[test]
    fn tag_errors() {
        assert_eq!(err("m, f=1"), "missing tag key");
        assert_eq!(err("m,"), "missing tag key");
        assert_eq!(err("m,=v f=1"), "missing tag key");
        assert_eq!(err("m,t=1, f=1"), "missing tag key");
        assert_eq!(err("m,t=1,,u=2 f=1"), "missing tag key");
        assert_eq!(err("m,t f=1"), "missing tag value");
        assert_eq!(err("m,t"), "missing tag value");
        assert_eq!(err("m,t= f=1"), "missing tag value");
        assert_eq!(err("m,t=,u=1 f=1"), "missing tag value");
        assert_eq!(err("m,t="), "missing tag value");
        assert_eq!(err("m,t=a=b f=1"), "invalid tag format");
        assert_eq!(err("m,t==b f=1"), "invalid tag format");
        assert_eq!(err("m,t=1,t=2 f=1"), "duplicate tags");
        assert_eq!(err("m,a=1,b=2,a=3 f=1"), "duplicate tags");
    }

    #[test]
    fn duplicate_tags_compare_unescaped() {
        assert_eq!(err(r"m,a\ b=1,a\ b=2 f=1"), "duplicate tags");
        // `\x` is kept verbatim, so `a\x` and `a\\x` are both `a\x`.
        assert_eq!(err(r"m,a\x=1,a\\x=2 f=1"), "duplicate tags");
        let o = ok(r"m,a\ b=1,a\,b=2 f=1");
        assert_eq!(o.tags, strs(&[("a b", "1"), ("a,b", "2")]));
    }

    #[test]
    fn duplicates_among_many_keys() {
        let mut line = String::from("m");
        for i in 0..100 {
            line.push_str(&format!(",t{i}=v"));
        }
        line.push_str(" f=1");
        assert_eq!(ok(&line).tags.len(), 100);
        // `a\b` and `a\\b` both unescape to `a\b`.
        let dup = line.replace(" f=1", r",a\b=1,a\\b=2 f=1");
        assert_eq!(err(&dup), "duplicate tags");

        let mut line = String::from("m ");
        for i in 0..100 {
            line.push_str(&format!("f{i}=1,"));
        }
        line.push_str("f42=2");
        assert_eq!(err(&line), "duplicate field 'f42'");
    }

    #[test]
    fn measurement_escapes() {
        let o = ok(r"m\,x\ y\\z f=1");
        assert_eq!(o.measurement, r"m,x y\z");
        // `=` and other characters are not escapes in a measurement.
        assert_eq!(ok(r"m\=x\a\n f=1").measurement, r"m\=x\a\n");
        // `\ ` is an escaped space, so this is all measurement.
        assert_eq!(err(r"m\ f=1"), "missing fields");
    }

    #[test]
    fn trailing_backslash_stays_verbatim() {
        // `m\` followed by the end of the line.
        assert_eq!(err("m\\"), "missing fields");
        let mut p = Parser::new(b"m,t=a\\\\ f=1");
        let Some(Ok(l)) = p.next_line() else {
            panic!("line expected")
        };
        assert_eq!(l.tags[0].1.as_str(), "a\\");
        // A lone backslash at the very end of a field key.
        assert_eq!(err("m f\\"), "missing field value");
    }

    #[test]
    fn key_escapes() {
        let o = ok(r"m,a\,b\=c\ d\\e=v\,1\=2\ 3\\4 f\,\=\ \\g=1");
        assert_eq!(o.tags, strs(&[(r"a,b=c d\e", r"v,1=2 3\4")]));
        assert_eq!(o.fields[0].0, r"f,= \g");
        // A backslash before any other character stays verbatim.
        let o = ok(r#"m,t\n=v\"\x f\t=1"#);
        assert_eq!(o.tags, strs(&[(r"t\n", r#"v\"\x"#)]));
        assert_eq!(o.fields[0].0, r"f\t");
    }

    #[test]
    fn escaped_space_does_not_end_a_section() {
        let o = ok(r"my\ m,t=a\ b my\ f=1 9");
        assert_eq!(o.measurement, "my m");
        assert_eq!(o.tags, strs(&[("t", "a b")]));
        assert_eq!(o.fields[0].0, "my f");
        assert_eq!(o.timestamp, Some(9));
    }

    #[test]
    fn escstr_accessors() {
        let mut p = Parser::new(br"a\b,k\,1=v f=1");
        let Some(Ok(l)) = p.next_line() else {
            panic!("line expected")
        };
        // Only a verbatim backslash: nothing to resolve.
        assert_eq!(l.measurement.raw(), r"a\b");
        assert!(!l.measurement.is_escaped());
        assert!(matches!(l.measurement.as_str(), Cow::Borrowed(r"a\b")));
        let k = l.tags[0].0;
        assert_eq!(k.raw(), r"k\,1");
        assert!(k.is_escaped());
        assert!(matches!(k.as_str(), Cow::Owned(ref s) if s == "k,1"));
        let mut out = String::from(">");
        k.write_unescaped(&mut out);
        l.measurement.write_unescaped(&mut out);
        assert_eq!(out, r">k,1a\b");
    }

    // ---- fields --------------------------------------------------------

    #[test]
    fn field_key_and_value_errors() {
        assert_eq!(err("m =1"), "missing field key");
        assert_eq!(err("m f=1,=2"), "missing field key");
        assert_eq!(err("m f=1,"), "missing field key");
        assert_eq!(err("m f=1, g=2"), "missing field key");
        assert_eq!(err("m f"), "missing field value");
        assert_eq!(err("m f 1"), "missing field value");
        assert_eq!(err("m f="), "missing field value");
        assert_eq!(err("m f= 1"), "missing field value");
        assert_eq!(err("m f=,g=1"), "missing field value");
        assert_eq!(err("m f=1,g"), "missing field value");
    }

    #[test]
    fn duplicate_field_names_the_key() {
        assert_eq!(err("m f=1,f=2"), "duplicate field 'f'");
        assert_eq!(err("m a=1,b=\"x\",a=t"), "duplicate field 'a'");
        assert_eq!(err(r"m a\=b=1,a\=b=2"), "duplicate field 'a=b'");
        // A tag and a field may share a key.
        assert_eq!(ok("m,f=1 f=1").fields.len(), 1);
        // A long key is cut in the reason.
        let k = "k".repeat(1000);
        let reason = err(&format!("m {k}=1,{k}=2"));
        assert!(reason.len() < 200, "{reason}");
    }

    #[test]
    fn floats() {
        for (s, want) in [
            ("1", 1.0),
            ("1.0", 1.0),
            ("-1.5", -1.5),
            ("1e9", 1e9),
            ("1.5E-3", 1.5e-3),
            ("1e+5", 1e5),
            (".5", 0.5),
            ("5.", 5.0),
            ("-.5", -0.5),
            ("007", 7.0),
            ("1.7976931348623157e308", f64::MAX),
            ("5e-324", 5e-324),
            ("1e-400", 0.0),
        ] {
            assert_eq!(field(s), V::Float(want), "{s}");
        }
        let V::Float(z) = field("-0.0") else {
            panic!("float expected")
        };
        assert!(z == 0.0 && z.is_sign_negative());
    }

    #[test]
    fn float_errors() {
        for s in [
            "nan", "NaN", "inf", "-inf", "+inf", "Infinity", "INF", "+1", "1e", "1e+", "1.2.3",
            "--1", "1-", "1x", "0x10", "1e400", "-1e400", "-", ".", "-.", "1_000", "1,5e", "1\"",
        ] {
            let r = field_err(s);
            let want = if s == "1,5e" {
                "missing field value"
            } else {
                "invalid number"
            };
            assert_eq!(r, want, "{s}");
        }
    }

    #[test]
    fn integers() {
        assert_eq!(field("123i"), V::Int(123));
        assert_eq!(field("-5i"), V::Int(-5));
        assert_eq!(field("0i"), V::Int(0));
        assert_eq!(field("9223372036854775807i"), V::Int(i64::MAX));
        assert_eq!(field("-9223372036854775808i"), V::Int(i64::MIN));
        assert_eq!(field_err("9223372036854775808i"), "integer overflow");
        assert_eq!(field_err("-9223372036854775809i"), "integer overflow");
        assert_eq!(
            field_err(&format!("{}i", "9".repeat(5000))),
            "integer overflow"
        );
        for s in ["1.5i", "-i", "+5i", "1e3i", "1ii", "--1i", "0x1i"] {
            assert_eq!(field_err(s), "invalid integer", "{s}");
        }
    }

    #[test]
    fn unsigned_integers() {
        assert_eq!(field("123u"), V::UInt(123));
        assert_eq!(field("18446744073709551615u"), V::UInt(u64::MAX));
        assert_eq!(
            field_err("18446744073709551616u"),
            "unsigned integer overflow"
        );
        for s in ["-1u", "-0u", "+1u", "1.0u", "1uu"] {
            assert_eq!(field_err(s), "invalid unsigned integer", "{s}");
        }
    }

    #[test]
    fn booleans() {
        for s in ["t", "T", "true", "True", "TRUE"] {
            assert_eq!(field(s), V::Bool(true), "{s}");
        }
        for s in ["f", "F", "false", "False", "FALSE"] {
            assert_eq!(field(s), V::Bool(false), "{s}");
        }
        for s in ["tRUE", "tru", "yes", "FaLse", "truee", "on"] {
            assert_eq!(field_err(s), "invalid field value", "{s}");
        }
    }

    #[test]
    fn other_values_are_invalid() {
        for s in ["abc", "e5", "'x'", "x\"y\"", "\\1", "#1"] {
            assert_eq!(field_err(s), "invalid field value", "{s}");
        }
    }

    #[test]
    fn strings() {
        assert_eq!(field("\"hello\""), V::Str("hello".into()));
        assert_eq!(field("\"\""), V::Str(String::new()));
        assert_eq!(field(r#""a \"q\" b""#), V::Str(r#"a "q" b"#.into()));
        assert_eq!(field(r#""back\\slash""#), V::Str(r"back\slash".into()));
        // Any other backslash is literal.
        assert_eq!(field(r#""a\nb\,c\=d\ e""#), V::Str(r"a\nb\,c\=d\ e".into()));
        assert_eq!(field("\"a, b=c d\r\t#\""), V::Str("a, b=c d\r\t#".into()));
        assert_eq!(field("\"🦀 é\""), V::Str("🦀 é".into()));
        let o = ok("m s=\"x y\",n=1 5");
        assert_eq!(o.fields[1], ("n".into(), V::Float(1.0)));
        assert_eq!(o.timestamp, Some(5));
    }

    #[test]
    fn string_escaped_flag() {
        let mut p = Parser::new(br#"m a="x\y",b="x\\y""#);
        let Some(Ok(l)) = p.next_line() else {
            panic!("line expected")
        };
        let FieldValue::Str(a) = l.fields[0].1 else {
            panic!("string expected")
        };
        let FieldValue::Str(b) = l.fields[1].1 else {
            panic!("string expected")
        };
        assert!(!a.is_escaped());
        assert!(b.is_escaped());
        assert_eq!((a.raw(), a.as_str()), (r"x\y", Cow::Borrowed(r"x\y")));
        assert_eq!(b.as_str(), r"x\y");
    }

    #[test]
    fn string_errors() {
        assert_eq!(field_err("\"abc"), "unterminated string");
        assert_eq!(field_err(r#""abc\""#), "unterminated string");
        assert_eq!(field_err("\""), "unterminated string");
        assert_eq!(field_err("\"a\"b"), "invalid field value");
        assert_eq!(field_err("\"a\"\"b\""), "invalid field value");
    }

    #[test]
    fn string_length_limit() {
        let max = "x".repeat(65_536);
        assert_eq!(field(&format!("\"{max}\"")), V::Str(max.clone()));
        assert_eq!(
            field_err(&format!("\"{max}y\"")),
            "string field too long (max 65536 bytes)"
        );
        // The limit applies to the unescaped length.
        let escaped = "\\\"".repeat(65_536);
        assert_eq!(
            field(&format!("\"{escaped}\"")),
            V::Str("\"".repeat(65_536))
        );
    }

    // ---- timestamps ----------------------------------------------------

    #[test]
    fn timestamps() {
        assert_eq!(ok("m f=1 0").timestamp, Some(0));
        assert_eq!(ok("m f=1 -5").timestamp, Some(-5));
        assert_eq!(ok("m f=1 9223372036854775807").timestamp, Some(i64::MAX));
        assert_eq!(ok("m f=1 -9223372036854775808").timestamp, Some(i64::MIN));
        assert_eq!(ok("m f=1 1 \t ").timestamp, Some(1));
        assert_eq!(ok("m f=\"s\" 12").timestamp, Some(12));
    }

    #[test]
    fn timestamp_errors() {
        for s in [
            "m f=1 9223372036854775808",
            "m f=1 -9223372036854775809",
            "m f=1 12a",
            "m f=1 1.5",
            "m f=1 +1",
            "m f=1 -",
            "m f=1 1e9",
            "m f=1 abc",
            "m f=1 1,2",
        ] {
            assert_eq!(err(s), "invalid timestamp", "{s}");
        }
        assert_eq!(err("m f=1 1 2"), "extra data after timestamp");
        assert_eq!(err("m f=1 1\tx"), "extra data after timestamp");
    }

    // ---- errors --------------------------------------------------------

    #[test]
    fn error_display_and_text_cut() {
        let e = one("m,t f=1").err();
        let Some(e) = e else { panic!("error expected") };
        assert_eq!(
            e.to_string(),
            "unable to parse 'm,t f=1': missing tag value"
        );
        let _: &dyn std::error::Error = &e;

        // 255 ASCII bytes then a 4-byte char: cut before the char.
        let line = format!("{}🦀🦀 x", "a".repeat(255));
        let e = one(&line).err();
        let Some(e) = e else { panic!("error expected") };
        assert_eq!(e.text, "a".repeat(255));
        let short = "m";
        assert_eq!(one(short).err().map(|e| e.text), Some("m".to_string()));
    }

    #[test]
    fn find_newline_matches_naive_search() {
        let mut s = vec![b'a'; 40];
        assert_eq!(find_newline(&s), None);
        assert_eq!(find_newline(b""), None);
        for at in 0..40 {
            s[at] = b'\n';
            assert_eq!(find_newline(&s), Some(at));
            // Bytes that differ from `\n` in one bit, and high bytes.
            s[at] = [0x0b, 0x8a, 0x0e, 0xff][at % 4];
        }
        assert_eq!(find_newline(&s), None);
    }

    // ---- allocation and hostile input ----------------------------------

    #[test]
    fn buffers_are_reused_between_lines() {
        let body = "m,a=1,b=2 x=1,y=2,z=3\n".repeat(50);
        let mut p = Parser::new(body.as_bytes());
        let mut seen = None;
        while let Some(l) = p.next_line() {
            let l = l.map(|l| (l.tags.as_ptr(), l.fields.as_ptr()));
            let Ok(ptrs) = l else { panic!("valid line") };
            assert_eq!(*seen.get_or_insert(ptrs), ptrs);
        }
    }

    #[test]
    fn a_million_fields() {
        let mut line = String::from("m ");
        for i in 0..1_000_000 {
            if i > 0 {
                line.push(',');
            }
            line.push_str(&format!("f{i}=1i"));
        }
        line.push_str(" 1");
        let mut p = Parser::new(line.as_bytes());
        let Some(Ok(l)) = p.next_line() else {
            panic!("line expected")
        };
        assert_eq!(l.fields.len(), 1_000_000);
        assert_eq!(l.timestamp, Some(1));

        // The same key a million times.
        let line = format!("m {}", vec!["f=1"; 1_000_000].join(","));
        assert_eq!(err(&line), "duplicate field 'f'");
    }

    #[test]
    fn huge_tag_value_and_backslash_runs() {
        let v = "v".repeat(10 << 20);
        let o = ok(&format!("m,t={v} f=1"));
        assert_eq!(o.tags[0].1.len(), 10 << 20);

        let run = "\\".repeat(1 << 20);
        let short = "\\".repeat(1 << 17);
        let o = ok(&format!("m{run},t={run} k{run}=\"{short}\""));
        assert_eq!(o.measurement.len(), 1 + (1 << 19));
        assert_eq!(o.tags[0].1.len(), 1 << 19);
        assert_eq!(o.fields[0].0.len(), 1 + (1 << 19));
        assert_eq!(o.fields[0].1, V::Str("\\".repeat(1 << 16)));
        // An odd run escapes the separator that follows it.
        let odd = "\\".repeat((1 << 20) + 1);
        assert_eq!(err(&format!("m{odd} f=1")), "missing fields");
        assert_eq!(field_err(&format!("\"{odd}\"")), "unterminated string");
    }

    // ---- writers -------------------------------------------------------

    fn esc(f: fn(&str, &mut String), s: &str) -> String {
        let mut out = String::from("<");
        f(s, &mut out);
        out
    }

    #[test]
    fn escape_writers() {
        assert_eq!(esc(escape_measurement, "a,b c=d\"e"), "<a\\,b\\ c=d\"e");
        assert_eq!(esc(escape_measurement, r"a\b"), r"<a\b");
        assert_eq!(esc(escape_measurement, r"a\"), r"<a\\");
        assert_eq!(esc(escape_measurement, r"a\,"), r"<a\\\,");
        assert_eq!(esc(escape_measurement, r"a\="), r"<a\=");
        assert_eq!(esc(escape_key, "a,b c=d\"e"), "<a\\,b\\ c\\=d\"e");
        assert_eq!(esc(escape_key, r"a\="), r"<a\\\=");
        assert_eq!(esc(escape_key, r"\\x"), r"<\\\x");
        assert_eq!(esc(escape_key, ""), "<");
        assert_eq!(
            esc(escape_string_field, "a\"b\\c, d=e"),
            "<a\\\"b\\\\c, d=e"
        );
    }

    #[test]
    fn format_line_output() {
        let mut out = String::new();
        format_line(
            &mut out,
            "my cpu",
            &[("host", "a,b"), ("empty", ""), ("k=", "v")],
            &[
                ("f", V::Float(1.0)),
                ("g", V::Float(0.1)),
                ("h", V::Float(1e300)),
                ("i", V::Int(-3)),
                ("u", V::UInt(4)),
                ("s", V::Str("say \"hi\"".into())),
                ("b", V::Bool(false)),
            ],
            Some(-1),
        );
        assert_eq!(
            out,
            r#"my\ cpu,host=a\,b,k\==v f=1.0,g=0.1,h=1e300,i=-3i,u=4u,s="say \"hi\"",b=false -1"#
        );
        let o = ok(&out);
        assert_eq!(o.tags, strs(&[("host", "a,b"), ("k=", "v")]));
        assert_eq!(o.fields[2].1, V::Float(1e300));
        assert_eq!(o.timestamp, Some(-1));

        out.clear();
        format_line(&mut out, "m", &[], &[("f", V::Bool(true))], None);
        assert_eq!(out, "m f=true");
    }

    // ---- properties ----------------------------------------------------

    /// Text mixing the characters that matter to the syntax with any other
    /// character except a newline.
    fn text(min: usize) -> impl Strategy<Value = String> {
        let c = prop_oneof![
            3 => prop::sample::select(vec![
                ',', ' ', '=', '"', '\\', '\t', '\r', '#', 'a', 'i', 'u', '1', '.', 'é', '🦀'
            ]),
            2 => any::<char>().prop_filter("no newline", |c| *c != '\n'),
        ];
        prop::collection::vec(c, min..12).prop_map(|v| v.into_iter().collect())
    }

    fn value() -> impl Strategy<Value = OwnedFieldValue> {
        prop_oneof![
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(V::Float),
            prop::sample::select(vec![0.0, -0.0, 1.0, 0.1, 1e300, -1e-300, 5e-324, f64::MAX])
                .prop_map(V::Float),
            any::<i64>().prop_map(V::Int),
            any::<u64>().prop_map(V::UInt),
            text(0).prop_map(V::Str),
            any::<bool>().prop_map(V::Bool),
        ]
    }

    /// Keeps the first of each key.
    fn dedup<T>(v: Vec<(String, T)>) -> Vec<(String, T)> {
        let mut seen = std::collections::HashSet::new();
        v.into_iter()
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect()
    }

    fn same_value(a: &OwnedFieldValue, b: &OwnedFieldValue) -> bool {
        match (a, b) {
            (V::Float(x), V::Float(y)) => x.to_bits() == y.to_bits(),
            _ => a == b,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn format_then_parse_round_trips(
            measurement in text(1).prop_filter("no leading tab or #", |m| {
                !m.starts_with('\t') && !m.starts_with('#')
            }),
            tags in prop::collection::vec((text(1), text(0)), 0..5).prop_map(dedup),
            fields in prop::collection::vec((text(1), value()), 1..6).prop_map(dedup),
            timestamp in prop::option::of(any::<i64>()),
        ) {
            let tag_refs: Vec<(&str, &str)> =
                tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut line = String::new();
            let field_refs: Vec<(&str, OwnedFieldValue)> =
                fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            format_line(&mut line, &measurement, &tag_refs, &field_refs, timestamp);
            let parsed = one(&line);
            let o = match parsed {
                Ok(o) => o,
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            };
            prop_assert_eq!(&o.measurement, &measurement);
            let want_tags: Vec<_> = tags.into_iter().filter(|(_, v)| !v.is_empty()).collect();
            prop_assert_eq!(&o.tags, &want_tags);
            prop_assert_eq!(o.fields.len(), fields.len());
            for ((gk, gv), (wk, wv)) in o.fields.iter().zip(&fields) {
                prop_assert_eq!(gk, wk);
                prop_assert!(same_value(gv, wv), "{:?} != {:?} in {}", gv, wv, line);
            }
            prop_assert_eq!(o.timestamp, timestamp);
        }
    }

    /// Walks every line of `body`, touching every part, and checks that line
    /// numbers only grow.
    fn walk(body: &[u8]) {
        let mut p = Parser::new(body);
        let mut last = 0;
        let mut out = String::new();
        while let Some(r) = p.next_line() {
            let n = match r {
                Ok(l) => {
                    let _ = l.measurement.as_str();
                    for (k, v) in l.tags {
                        let _ = (k.as_str(), v.as_str());
                    }
                    for (k, v) in l.fields {
                        let _ = k.as_str();
                        if let FieldValue::Str(s) = v {
                            out.clear();
                            s.write_unescaped(&mut out);
                            assert_eq!(s.as_str(), out.as_str());
                        }
                    }
                    l.number
                }
                Err(e) => {
                    assert!(e.text.len() <= MAX_ERROR_TEXT);
                    let _ = e.to_string();
                    e.line
                }
            };
            assert!(n > last);
            last = n;
        }
        assert!(last <= body.iter().filter(|&&b| b == b'\n').count() + 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        #[test]
        fn random_bytes_do_not_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
            walk(&body);
        }

        #[test]
        fn random_syntax_soup_does_not_panic(
            body in prop::collection::vec(
                prop::sample::select(b"a,= \\\"\n#i0.9-eu tTf".to_vec()),
                0..256,
            )
        ) {
            walk(&body);
        }
    }
}
