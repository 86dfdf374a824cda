//! PostgreSQL's `json` and `jsonb` values: parsing (serde_json), the text forms
//! PostgreSQL prints (`jsonb` normalized, `json` as written), and the operations
//! of the operators and functions. Both are stored as Arrow text, told apart by the
//! field's extension name ([`Kind`]).

use std::collections::HashMap;
use std::ops::Range;

use arrow::datatypes::{DataType, Field};
use serde_json::value::RawValue;

use crate::error::{Error, Result};

/// Arrow's field metadata key naming an extension type.
pub const EXTENSION_KEY: &str = "ARROW:extension:name";

/// Which of PostgreSQL's two JSON types a text column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `json`: the input text, kept as written.
    Json,
    /// `jsonb`: normalized (keys sorted and unique, numbers as `numeric` prints).
    Jsonb,
}

impl Kind {
    /// The extension name on the Arrow field.
    pub fn extension(self) -> &'static str {
        match self {
            Kind::Json => "sundial.json",
            Kind::Jsonb => "sundial.jsonb",
        }
    }

    /// PostgreSQL's type name.
    pub fn pg_name(self) -> &'static str {
        match self {
            Kind::Json => "json",
            Kind::Jsonb => "jsonb",
        }
    }

    /// The kind a field holds, if it holds JSON.
    pub fn of(f: &Field) -> Option<Kind> {
        if f.data_type() != &DataType::Utf8 {
            return None;
        }
        match f.metadata().get(EXTENSION_KEY).map(String::as_str) {
            Some("sundial.json") => Some(Kind::Json),
            Some("sundial.jsonb") => Some(Kind::Jsonb),
            _ => None,
        }
    }

    /// Field metadata marking a text field as this kind.
    pub fn metadata(self) -> HashMap<String, String> {
        HashMap::from([(EXTENSION_KEY.to_string(), self.extension().to_string())])
    }

    /// A text field of this kind.
    pub fn field(self, name: &str, nullable: bool) -> Field {
        Field::new(name, DataType::Utf8, nullable).with_metadata(self.metadata())
    }

    /// The stored text of input `text`: `json` keeps it once it parses, `jsonb`
    /// normalizes it.
    pub fn input(self, text: &str) -> Result<String> {
        let node = parse(text)?;
        Ok(match self {
            Kind::Json => text.to_string(),
            Kind::Jsonb => node.normalized().jsonb_text(),
        })
    }
}

/// One JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// A number's text (for `jsonb`, as `numeric` prints it).
    Num(String),
    Str(String),
    Arr(Vec<Node>),
    Obj(Vec<(String, Node)>),
    /// `json` text spliced in as written (json_build_object of a `json` value).
    Raw(String),
}

/// A value and where it was in the text it was parsed from (`json` operators
/// answer with that text as written).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub span: Range<usize>,
}

impl From<Value> for Node {
    fn from(value: Value) -> Node {
        Node { value, span: 0..0 }
    }
}

/// 22P02 with PostgreSQL's message.
fn syntax_error(text: &str, detail: impl std::fmt::Display) -> Error {
    let shown: String = text.chars().take(60).collect();
    Error::sql(
        "22P02",
        format!("invalid input syntax for type json: \"{shown}\" ({detail})"),
    )
}

/// Parses JSON text (PostgreSQL's grammar: no NaN or Infinity, one value).
/// serde_json checks the text; each value's text is kept (`RawValue`), so numbers
/// keep their digits and `json` operators can answer the text as written.
pub fn parse(text: &str) -> Result<Node> {
    let raw: &RawValue = serde_json::from_str(text).map_err(|e| syntax_error(text, e))?;
    node(raw, text)
}

fn node(raw: &RawValue, src: &str) -> Result<Node> {
    let t = raw.get();
    let err = |e: serde_json::Error| syntax_error(src, e);
    let start = (t.as_ptr() as usize)
        .checked_sub(src.as_ptr() as usize)
        .filter(|s| s + t.len() <= src.len())
        .unwrap_or(0);
    let value = match t.as_bytes().first() {
        Some(b'{') => {
            let pairs: Pairs = serde_json::from_str(t).map_err(err)?;
            Value::Obj(
                pairs
                    .0
                    .into_iter()
                    .map(|(k, v)| Ok((k, node(v, src)?)))
                    .collect::<Result<_>>()?,
            )
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(t).map_err(err)?;
            Value::Arr(
                items
                    .into_iter()
                    .map(|v| node(v, src))
                    .collect::<Result<_>>()?,
            )
        }
        Some(b'"') => Value::Str(serde_json::from_str(t).map_err(err)?),
        Some(b't') => Value::Bool(true),
        Some(b'f') => Value::Bool(false),
        Some(b'n') => Value::Null,
        _ => Value::Num(t.to_string()),
    };
    Ok(Node {
        value,
        span: start..start + t.len(),
    })
}

/// An object's members in order, duplicates kept (PostgreSQL's `json` keeps them;
/// `jsonb` keeps the last).
struct Pairs<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Pairs<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> std::result::Result<Pairs<'a>, M::Error> {
                let mut out = vec![];
                while let Some((k, v)) = m.next_entry::<String, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A JSON number's text as PostgreSQL's `numeric` prints it: the exponent
/// applied, as many fraction digits as the input had after it (`1e2` is `100`,
/// `1.50` stays `1.50`, `1E-3` is `0.001`), no negative zero.
pub fn numeric_text(n: &str) -> String {
    let (neg, rest) = match n.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, n),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int}{frac}");
    let mut point = int.len() as i64 + exp;
    if point < 0 {
        digits.insert_str(0, &"0".repeat((-point) as usize));
        point = 0;
    }
    let point = point as usize;
    if point > digits.len() {
        digits.push_str(&"0".repeat(point - digits.len()));
    }
    let (i, f) = digits.split_at(point);
    let i = i.trim_start_matches('0');
    let i = if i.is_empty() { "0" } else { i };
    let zero = digits.bytes().all(|b| b == b'0');
    let sign = if neg && !zero { "-" } else { "" };
    if f.is_empty() {
        format!("{sign}{i}")
    } else {
        format!("{sign}{i}.{f}")
    }
}

/// A string as a JSON string literal, escaped as PostgreSQL escapes it.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    quote_into(&mut out, s);
    out
}

fn quote_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Node {
    /// The `jsonb` form of this value: objects' keys unique (the last wins) and
    /// sorted shorter first, then by bytes; numbers as `numeric` prints them.
    pub fn normalized(self) -> Node {
        let value = match self.value {
            Value::Num(n) => Value::Num(numeric_text(&n)),
            Value::Arr(items) => Value::Arr(items.into_iter().map(Node::normalized).collect()),
            Value::Obj(pairs) => {
                let mut pairs: Vec<(String, Node)> = pairs
                    .into_iter()
                    .rev()
                    .map(|(k, v)| (k, v.normalized()))
                    .collect();
                // Stable: among equal keys the last written (now first) stays.
                pairs.sort_by(|(a, _), (b, _)| (a.len(), a).cmp(&(b.len(), b)));
                pairs.dedup_by(|b, a| a.0 == b.0);
                Value::Obj(pairs)
            }
            Value::Raw(text) => match parse(&text) {
                Ok(n) => n.normalized().value,
                Err(_) => Value::Str(text),
            },
            v => v,
        };
        Node {
            value,
            span: self.span,
        }
    }

    /// The text PostgreSQL prints for a `jsonb` (`{"a": 1, "b": [1, 2]}`).
    pub fn jsonb_text(&self) -> String {
        let mut out = String::new();
        self.write_jsonb(&mut out);
        out
    }

    fn write_jsonb(&self, out: &mut String) {
        match &self.value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Num(n) => out.push_str(n),
            Value::Str(s) => quote_into(out, s),
            Value::Raw(r) => out.push_str(r),
            Value::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write_jsonb(out);
                }
                out.push(']');
            }
            Value::Obj(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    quote_into(out, k);
                    out.push_str(": ");
                    v.write_jsonb(out);
                }
                out.push('}');
            }
        }
    }

    /// `jsonb_pretty`: four spaces per level, one element per line.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write_pretty(&mut out, 0);
        out
    }

    fn write_pretty(&self, out: &mut String, level: usize) {
        let pad = |out: &mut String, level: usize| out.push_str(&"    ".repeat(level));
        match &self.value {
            Value::Arr(items) => {
                out.push_str("[\n");
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    pad(out, level + 1);
                    v.write_pretty(out, level + 1);
                }
                if !items.is_empty() {
                    out.push('\n');
                }
                pad(out, level);
                out.push(']');
            }
            Value::Obj(pairs) => {
                out.push_str("{\n");
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(",\n");
                    }
                    pad(out, level + 1);
                    quote_into(out, k);
                    out.push_str(": ");
                    v.write_pretty(out, level + 1);
                }
                if !pairs.is_empty() {
                    out.push('\n');
                }
                pad(out, level);
                out.push('}');
            }
            _ => self.write_jsonb(out),
        }
    }

    /// The text of this value in a value of `kind` parsed from `src`: `jsonb`
    /// prints it normalized, `json` answers the text as written.
    pub fn text(&self, kind: Kind, src: &str) -> String {
        match kind {
            Kind::Json if self.span.end > self.span.start => src
                .get(self.span.clone())
                .map(str::to_string)
                .unwrap_or_else(|| self.jsonb_text()),
            _ => self.jsonb_text(),
        }
    }

    /// `->>`'s text: a string's characters, SQL NULL for `null`, else the JSON text.
    pub fn unquoted(&self, kind: Kind, src: &str) -> Option<String> {
        match &self.value {
            Value::Null => None,
            Value::Str(s) => Some(s.clone()),
            _ => Some(self.text(kind, src)),
        }
    }

    /// `jsonb_typeof`.
    pub fn type_name(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Num(_) => "number",
            Value::Str(_) => "string",
            Value::Arr(_) => "array",
            Value::Obj(_) => "object",
            Value::Raw(r) => match parse(r) {
                Ok(n) => n.type_name(),
                Err(_) => "string",
            },
        }
    }

    /// The field `key` of an object (the last of equal keys, as PostgreSQL's `json`
    /// answers).
    pub fn field(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Obj(pairs) => pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Element `i` of an array, counted from the end when negative.
    pub fn index(&self, i: i64) -> Option<&Node> {
        match &self.value {
            Value::Arr(items) => {
                let i = if i < 0 { items.len() as i64 + i } else { i };
                usize::try_from(i).ok().and_then(|i| items.get(i))
            }
            _ => None,
        }
    }

    /// `#>`: follows a path of keys and array positions.
    pub fn path(&self, path: &[Option<String>]) -> Option<&Node> {
        let mut at = self;
        for step in path {
            let step = step.as_deref()?;
            at = match &at.value {
                Value::Obj(_) => at.field(step)?,
                Value::Arr(_) => at.index(step.trim().parse().ok()?)?,
                _ => return None,
            };
        }
        Some(at)
    }

    /// `?`: a key of an object, a string element of an array, or the string itself.
    pub fn has_key(&self, key: &str) -> bool {
        match &self.value {
            Value::Obj(pairs) => pairs.iter().any(|(k, _)| k == key),
            Value::Arr(items) => items
                .iter()
                .any(|v| matches!(&v.value, Value::Str(s) if s == key)),
            Value::Str(s) => s == key,
            _ => false,
        }
    }

    /// `@>`: whether `other` is contained in this value, PostgreSQL's rules (an
    /// array contains a scalar it holds at its top level).
    pub fn contains(&self, other: &Node) -> bool {
        match (&self.value, &other.value) {
            (Value::Obj(a), Value::Obj(b)) => b.iter().all(|(k, bv)| {
                a.iter()
                    .find(|(ak, _)| ak == k)
                    .is_some_and(|(_, av)| av.contains_nested(bv))
            }),
            (Value::Arr(_), Value::Arr(_)) => self.contains_nested(other),
            (Value::Arr(a), _) if !matches!(other.value, Value::Obj(_)) => {
                a.iter().any(|v| scalar_eq(v, other))
            }
            (Value::Obj(_) | Value::Arr(_), _) | (_, Value::Obj(_) | Value::Arr(_)) => false,
            _ => scalar_eq(self, other),
        }
    }

    fn contains_nested(&self, other: &Node) -> bool {
        match (&self.value, &other.value) {
            (Value::Arr(a), Value::Arr(b)) => b.iter().all(|bv| match &bv.value {
                Value::Arr(_) | Value::Obj(_) => a.iter().any(|av| av.contains_nested(bv)),
                _ => a.iter().any(|av| scalar_eq(av, bv)),
            }),
            (Value::Obj(_), Value::Obj(_)) => self.contains(other),
            (Value::Arr(_) | Value::Obj(_), _) | (_, Value::Arr(_) | Value::Obj(_)) => false,
            _ => scalar_eq(self, other),
        }
    }

    /// `jsonb_set(target, path, new, create_missing)`.
    pub fn set(&mut self, path: &[Option<String>], new: &Node, create: bool) -> Result<()> {
        let Some((step, rest)) = path.split_first() else {
            *self = new.clone();
            return Ok(());
        };
        let Some(step) = step.as_deref() else {
            return Err(Error::sql(
                "22004",
                "path element at position 1 is null".to_string(),
            ));
        };
        match &mut self.value {
            Value::Obj(pairs) => {
                if let Some((_, v)) = pairs.iter_mut().find(|(k, _)| k == step) {
                    v.set(rest, new, create)?;
                } else if create && rest.is_empty() {
                    pairs.push((step.to_string(), new.clone()));
                    let taken = std::mem::take(pairs);
                    *self = Node::from(Value::Obj(taken)).normalized();
                }
            }
            Value::Arr(items) => {
                let Ok(i) = step.trim().parse::<i64>() else {
                    return Err(Error::sql(
                        "22P02",
                        format!("path element at position 1 is not an integer: \"{step}\""),
                    ));
                };
                let len = items.len() as i64;
                let at = if i < 0 { len + i } else { i };
                if (0..len).contains(&at) {
                    items[at as usize].set(rest, new, create)?;
                } else if create && rest.is_empty() {
                    if at < 0 {
                        items.insert(0, new.clone());
                    } else {
                        items.push(new.clone());
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// PostgreSQL's `jsonb` ordering (of normalized values): object > array >
/// boolean > number > string > null; objects by their number of pairs, arrays by
/// their length, then member by member (keys in stored order, by bytes); numbers
/// by value, strings by bytes (the `C` collation).
pub fn compare(a: &Node, b: &Node) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    // A scalar at the top level is stored as a one-element array: against an
    // array, the lengths decide, then the scalar is the smaller.
    let scalar = |v: &Value| !matches!(v, Value::Arr(_) | Value::Obj(_));
    match (&a.value, &b.value) {
        (x, Value::Arr(y)) if scalar(x) => {
            return 1.cmp(&y.len()).then(Ordering::Less);
        }
        (Value::Arr(x), y) if scalar(y) => {
            return x.len().cmp(&1).then(Ordering::Greater);
        }
        _ => {}
    }
    compare_values(a, b)
}

fn compare_values(a: &Node, b: &Node) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Str(_) | Value::Raw(_) => 1,
            Value::Num(_) => 2,
            Value::Bool(_) => 3,
            Value::Arr(_) => 4,
            Value::Obj(_) => 5,
        }
    }
    match (&a.value, &b.value) {
        (Value::Obj(x), Value::Obj(y)) => x.len().cmp(&y.len()).then_with(|| {
            for ((ka, va), (kb, vb)) in x.iter().zip(y) {
                let o = ka
                    .as_bytes()
                    .cmp(kb.as_bytes())
                    .then_with(|| compare_values(va, vb));
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        }),
        (Value::Arr(x), Value::Arr(y)) => x.len().cmp(&y.len()).then_with(|| {
            for (va, vb) in x.iter().zip(y) {
                let o = compare_values(va, vb);
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        }),
        (Value::Num(x), Value::Num(y)) => num_cmp(x, y),
        (Value::Str(x), Value::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (x, y) => rank(x).cmp(&rank(y)),
    }
}

/// Two numbers' texts by value, exactly (digit strings, no float rounding).
fn num_cmp(x: &str, y: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let split = |s: &str| -> (bool, String, String) {
        let t = numeric_text(s);
        let (neg, t) = match t.strip_prefix('-') {
            Some(r) => (true, r.to_string()),
            None => (false, t),
        };
        let (i, f) = t.split_once('.').unwrap_or((&t, ""));
        (
            neg,
            i.trim_start_matches('0').to_string(),
            f.trim_end_matches('0').to_string(),
        )
    };
    let (nx, ix, fx) = split(x);
    let (ny, iy, fy) = split(y);
    let zero = |i: &str, f: &str| i.is_empty() && f.is_empty();
    let (nx, ny) = (nx && !zero(&ix, &fx), ny && !zero(&iy, &fy));
    let mag = ix
        .len()
        .cmp(&iy.len())
        .then_with(|| ix.cmp(&iy))
        .then_with(|| fx.cmp(&fy));
    match (nx, ny) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (true, true) => mag.reverse(),
        (false, false) => mag,
    }
}

/// `jsonb || jsonb`: objects merge (the right side's keys win), arrays
/// concatenate, anything else becomes an array of both sides' elements.
pub fn concat(a: &Node, b: &Node) -> Node {
    let items = |n: &Node| match &n.value {
        Value::Arr(items) => items.clone(),
        _ => vec![n.clone()],
    };
    match (&a.value, &b.value) {
        (Value::Obj(x), Value::Obj(y)) => {
            let mut pairs = x.clone();
            pairs.extend(y.iter().cloned());
            Node::from(Value::Obj(pairs)).normalized()
        }
        _ => {
            let mut all = items(a);
            all.extend(items(b));
            Node::from(Value::Arr(all))
        }
    }
}

/// `jsonb - key`: an object without `key`, or an array without the strings equal
/// to it.
pub fn remove_key(a: &Node, key: &str) -> Result<Node> {
    Ok(match &a.value {
        Value::Obj(pairs) => Value::Obj(pairs.iter().filter(|(k, _)| k != key).cloned().collect()),
        Value::Arr(items) => Value::Arr(
            items
                .iter()
                .filter(|v| !matches!(&v.value, Value::Str(s) if s == key))
                .cloned()
                .collect(),
        ),
        _ => return Err(Error::sql("22023", "cannot delete from scalar")),
    }
    .into())
}

/// `jsonb - integer`: an array without the element at `i` (from the end when
/// negative).
pub fn remove_index(a: &Node, i: i64) -> Result<Node> {
    match &a.value {
        Value::Arr(items) => {
            let len = items.len() as i64;
            let at = if i < 0 { len + i } else { i };
            Ok(Value::Arr(
                items
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j as i64 != at)
                    .map(|(_, v)| v.clone())
                    .collect(),
            )
            .into())
        }
        Value::Obj(_) => Err(Error::sql(
            "22023",
            "cannot delete from object using integer index",
        )),
        _ => Err(Error::sql("22023", "cannot delete from scalar")),
    }
}

/// `jsonb #- path`: the value without what the path names.
pub fn remove_path(a: &Node, path: &[Option<String>]) -> Result<Node> {
    let Some((step, rest)) = path.split_first() else {
        return Ok(a.clone());
    };
    let Some(step) = step.as_deref() else {
        return Err(Error::sql("22004", "path element at position 1 is null"));
    };
    if rest.is_empty() {
        return match &a.value {
            Value::Obj(_) => remove_key(a, step),
            Value::Arr(_) => match step.trim().parse::<i64>() {
                Ok(i) => remove_index(a, i),
                Err(_) => Err(Error::sql(
                    "22P02",
                    format!("path element at position 1 is not an integer: \"{step}\""),
                )),
            },
            _ => Err(Error::sql("22023", "cannot delete path in scalar")),
        };
    }
    let mut out = a.clone();
    match &mut out.value {
        Value::Obj(pairs) => {
            if let Some((_, v)) = pairs.iter_mut().find(|(k, _)| k == step) {
                *v = remove_path(v, rest)?;
            }
        }
        Value::Arr(items) => {
            if let Ok(i) = step.trim().parse::<i64>() {
                let len = items.len() as i64;
                let at = if i < 0 { len + i } else { i };
                if (0..len).contains(&at) {
                    items[at as usize] = remove_path(&items[at as usize], rest)?;
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

/// A byte string whose order is PostgreSQL's `jsonb` ordering ([`compare`]): what
/// `ORDER BY` a `jsonb` sorts by.
pub fn sort_key(a: &Node) -> Vec<u8> {
    let mut out = vec![];
    match &a.value {
        // A scalar at the top level is a one-element array below any real one.
        Value::Arr(items) => {
            out.push(4);
            out.extend_from_slice(&(items.len() as u32).to_be_bytes());
            out.push(1);
            for v in items {
                key_into(&mut out, v);
            }
        }
        Value::Obj(_) => key_into(&mut out, a),
        _ => {
            out.push(4);
            out.extend_from_slice(&1u32.to_be_bytes());
            out.push(0);
            key_into(&mut out, a);
        }
    }
    out
}

fn key_into(out: &mut Vec<u8>, v: &Node) {
    let string = |out: &mut Vec<u8>, s: &str| {
        for b in s.bytes() {
            out.push(b);
            if b == 0 {
                out.push(0xff);
            }
        }
        out.extend_from_slice(&[0, 0]);
    };
    match &v.value {
        Value::Null => out.push(0),
        Value::Str(s) | Value::Raw(s) => {
            out.push(1);
            string(out, s);
        }
        Value::Num(n) => {
            out.push(2);
            number_key(out, n);
        }
        Value::Bool(b) => out.extend_from_slice(&[3, u8::from(*b)]),
        Value::Arr(items) => {
            out.push(4);
            out.extend_from_slice(&(items.len() as u32).to_be_bytes());
            out.push(1);
            for v in items {
                key_into(out, v);
            }
        }
        Value::Obj(pairs) => {
            out.push(5);
            out.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
            for (k, v) in pairs {
                string(out, k);
                key_into(out, v);
            }
        }
    }
}

/// A number's order-preserving bytes: sign, then the decimal exponent and the
/// significant digits (complemented when negative).
fn number_key(out: &mut Vec<u8>, n: &str) {
    let t = numeric_text(n);
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r.to_string()),
        None => (false, t),
    };
    let (i, f) = t.split_once('.').unwrap_or((&t, ""));
    let int = i.trim_start_matches('0');
    let digits: String = format!("{int}{f}");
    let lead = digits.bytes().take_while(|b| *b == b'0').count();
    let sig = digits[lead..].trim_end_matches('0');
    if sig.is_empty() {
        out.push(1);
        return;
    }
    // The position of the first significant digit relative to the point.
    let exp = int.len() as i64 - lead as i64;
    let biased = (exp + (1 << 31)) as u32;
    if neg {
        out.push(0);
        out.extend_from_slice(&(!biased).to_be_bytes());
        out.extend(sig.bytes().map(|d| b'9' - d + b'0'));
        out.push(0xff);
    } else {
        out.push(2);
        out.extend_from_slice(&biased.to_be_bytes());
        out.extend(sig.bytes());
        out.push(0);
    }
}

/// Scalars compare as values: numbers by value (`1.0` equals `1`).
fn scalar_eq(a: &Node, b: &Node) -> bool {
    match (&a.value, &b.value) {
        (Value::Num(x), Value::Num(y)) => num_cmp(x, y) == std::cmp::Ordering::Equal,
        (x, y) => x == y,
    }
}

/// A `text[]` written as PostgreSQL's array text (`{a,b}`, `{"a b",NULL}`): the
/// path of `#>` and `jsonb_set`, the keys of `?|` and `?&`.
pub fn text_array(s: &str) -> Result<Vec<Option<String>>> {
    let bad = || Error::sql("22P02", format!("malformed array literal: \"{s}\""));
    let inner = s
        .trim()
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(bad)?;
    let mut out = vec![];
    if inner.trim().is_empty() {
        return Ok(out);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        let mut quoted = false;
        if chars.peek() == Some(&'"') {
            quoted = true;
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => item.push(chars.next().ok_or_else(bad)?),
                    Some('"') => break,
                    Some(c) => item.push(c),
                    None => return Err(bad()),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if c == '\\' {
                    chars.next();
                    item.push(chars.next().ok_or_else(bad)?);
                    continue;
                }
                item.push(c);
                chars.next();
            }
            item = item.trim_end().to_string();
        }
        if !quoted && item.eq_ignore_ascii_case("null") {
            out.push(None);
        } else {
            out.push(Some(item));
        }
        match chars.next() {
            Some(',') => continue,
            None => break,
            Some(_) => return Err(bad()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonb_normalizes_as_postgres_prints() {
        let t = r#"{"b":1e2, "aa": 1.50, "a": -0.0, "c": [1E-3, "\u00e9\n"], "b": 3}"#;
        assert_eq!(
            Kind::Jsonb.input(t).unwrap(),
            r#"{"a": 0.0, "b": 3, "c": [0.001, "é\n"], "aa": 1.50}"#
        );
        assert_eq!(Kind::Json.input(" [1,  2] ").unwrap(), " [1,  2] ");
        assert!(Kind::Jsonb.input("{").is_err());
        assert!(Kind::Jsonb.input("NaN").is_err());
        assert!(Kind::Jsonb.input("1 2").is_err());
    }

    #[test]
    fn json_operators_answer_the_written_text() {
        let src = r#"{"b" :  [1,  2], "a": {"x" : 1}, "a": 7}"#;
        let n = parse(src).unwrap();
        assert_eq!(n.field("b").unwrap().text(Kind::Json, src), "[1,  2]");
        assert_eq!(n.field("a").unwrap().text(Kind::Json, src), "7");
        assert_eq!(
            n.path(&[Some("b".into()), Some("-1".into())])
                .unwrap()
                .text(Kind::Json, src),
            "2"
        );
    }

    #[test]
    fn containment_follows_postgres() {
        let j = |s: &str| parse(s).unwrap().normalized();
        assert!(j("[1,2]").contains(&j("1")));
        assert!(j(r#"{"a":{"b":1,"c":2}}"#).contains(&j(r#"{"a":{"b":1}}"#)));
        assert!(!j("[[1,2]]").contains(&j("[1]")));
        assert!(j("[[1,2]]").contains(&j("[[1]]")));
        assert!(!j(r#"{"a":1}"#).contains(&j("[]")));
    }

    #[test]
    fn ordering_follows_postgres() {
        use std::cmp::Ordering::*;
        let c = |a: &str, b: &str| {
            compare(
                &parse(a).unwrap().normalized(),
                &parse(b).unwrap().normalized(),
            )
        };
        assert_eq!(c("1.0", "1"), Equal);
        assert_eq!(c("-0.5", "0"), Less);
        assert_eq!(c("10", "9.99"), Greater);
        assert_eq!(c(r#"{"a":1}"#, "[1,2,3]"), Greater);
        assert_eq!(c("true", "2"), Greater);
        assert_eq!(c("[1,2]", "[1,3]"), Less);
        assert_eq!(c("[]", "1"), Less);
        assert_eq!(c("[1]", "1"), Greater);
        assert_eq!(c("[[]]", "[1]"), Greater);
        assert_eq!(c(r#"{"aa":1}"#, r#"{"b":1}"#), Less);
        assert_eq!(c("null", r#""""#), Less);
    }

    #[test]
    fn sort_keys_order_as_compare_does() {
        let docs = [
            "null",
            "\"\"",
            "\"a\"",
            "\"b\"",
            "-10",
            "-9.5",
            "-0.001",
            "0",
            "0.0",
            "0.001",
            "1",
            "1.0",
            "1.23",
            "9",
            "10",
            "100.5",
            "false",
            "true",
            "[]",
            "[1]",
            "[2]",
            "[\"x\"]",
            "[1,2]",
            "[[]]",
            "{}",
            "{\"a\":1}",
            "{\"b\":1}",
            "{\"aa\":1}",
            "{\"a\":2}",
            "{\"a\":1,\"b\":2}",
            "[1,2,3]",
            "[{\"a\":1}]",
        ];
        for a in docs {
            for b in docs {
                let (x, y) = (
                    parse(a).unwrap().normalized(),
                    parse(b).unwrap().normalized(),
                );
                assert_eq!(
                    sort_key(&x).cmp(&sort_key(&y)),
                    compare(&x, &y),
                    "{a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn arrays_and_pretty() {
        assert_eq!(
            text_array(r#"{a, "b c",NULL}"#).unwrap(),
            vec![Some("a".into()), Some("b c".into()), None]
        );
        let n = parse(r#"{"a":[1,{"b":2}],"c":{},"d":[]}"#)
            .unwrap()
            .normalized();
        assert_eq!(
            n.pretty(),
            "{\n    \"a\": [\n        1,\n        {\n            \"b\": 2\n        }\n    ],\n    \"c\": {\n    },\n    \"d\": [\n    ]\n}"
        );
    }
}
