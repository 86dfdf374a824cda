//! Keeps the layer rules of DESIGN.md true: reads every file under `src/`, finds
//! what it imports from the crate (`use crate::…`, `super::…`, inline paths) and
//! fails when a module imports from a layer above its own, when files import each
//! other in a cycle, or when a layer uses a crate that belongs to another one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first (DESIGN.md, "Layers").
const LAYERS: &[(&str, u8)] = &[
    ("config", 0),
    ("error", 0),
    ("metrics", 0),
    ("interval", 0),
    ("numeric_text", 0),
    ("json", 0),
    ("pgident", 0),
    ("catalog", 1),
    ("wal", 2),
    ("storage", 2),
    ("write", 3),
    ("engine", 4),
    ("query", 5),
    ("lineproto", 5),
    ("sql", 6),
    ("server", 7),
    // The benchmark load tool is a client of the server: it may use anything.
    ("loadgen", 8),
];

/// External crates a top-level module must not use.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("server", &["parquet", "object_store"]),
    // SQL asks the engine for storage work ("delete rows matching P in these files").
    ("sql", &["parquet", "object_store"]),
    ("storage", &["pgwire", "sqlparser", "axum"]),
    ("wal", &["pgwire", "sqlparser", "axum", "parquet"]),
    ("catalog", &["pgwire", "sqlparser", "axum", "parquet"]),
];

type Module = Vec<String>;

fn layer(top: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == top).map(|(_, l)| *l)
}

/// Every `.rs` file under `src/` by module path (`src/sql/mod.rs` → `sql`).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().map(String::as_str) == Some("mod") {
                parts.pop();
            }
            match parts.as_slice() {
                [one] if one == "lib" => parts.clear(),
                [one] if one == "main" => parts = vec!["<main>".into()],
                _ => {}
            }
            out.insert(parts, p);
        }
    }
    out
}

/// The source with comments, string and char literals blanked out, and without a
/// trailing `#[cfg(test)] mod tests`.
fn code_of(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            i += rest.iter().position(|c| *c == b'\n').unwrap_or(rest.len());
            continue;
        }
        if rest.starts_with(b"/*") {
            i += rest
                .windows(2)
                .skip(2)
                .position(|w| w == b"*/")
                .map(|p| p + 4)
                .unwrap_or(rest.len());
            continue;
        }
        let word_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i] == b'r' && !word_before && matches!(b.get(i + 1), Some(b'#') | Some(b'"')) {
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) == Some(&b'"') {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let end = b[j + 1..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map(|p| j + 1 + p + close.len())
                    .unwrap_or(b.len());
                out.push_str("\"\"");
                i = end;
                continue;
            }
        }
        if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'); a lifetime has no closing quote.
            if b.get(i + 1) == Some(&b'\\') {
                if let Some(p) = b[i + 2..].iter().position(|c| *c == b'\'') {
                    out.push_str("' '");
                    i += p + 3;
                    continue;
                }
            } else if let Some(ch) = src[i + 1..].chars().next()
                && b.get(i + 1 + ch.len_utf8()) == Some(&b'\'')
            {
                out.push_str("' '");
                i += 2 + ch.len_utf8();
                continue;
            }
        }
        let ch = src[i..].chars().next().expect("char");
        out.push(ch);
        i += ch.len_utf8();
    }
    match out.find("#[cfg(test)]\nmod tests") {
        Some(p) => out[..p].to_string(),
        None => out,
    }
}

/// Splits `a, b::{c, d}` at top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, vec![]);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The paths a use tree names (`crate::{a::B, c}` → `crate::a::B`, `crate::c`).
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let leaf = tree.split(" as ").next().unwrap_or(tree);
        return vec![leaf.split("::").map(str::to_string).collect()];
    };
    let prefix: Vec<String> = tree[..open]
        .trim_end_matches("::")
        .split("::")
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    split_top(inner)
        .into_iter()
        .flat_map(expand)
        .map(|p| prefix.iter().cloned().chain(p).collect())
        .collect()
}

/// Every path a file names: use trees, and inline `crate::`/`super::` paths.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = vec![];
    let mut rest = code;
    while let Some(p) = rest.find("use ") {
        let before_ok = p == 0 || !rest.as_bytes()[p - 1].is_ascii_alphanumeric();
        let tail = &rest[p + 4..];
        let Some(end) = tail.find(';') else { break };
        if before_ok {
            let mut tree = tail[..end].split_whitespace().collect::<Vec<_>>().join(" ");
            for (from, to) in [(":: ", "::"), (" ::", "::"), ("{ ", "{"), (" }", "}")] {
                tree = tree.replace(from, to);
            }
            out.extend(expand(&tree));
        }
        rest = &tail[end..];
    }
    let b = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(p) = code[from..].find(start) {
            let at = from + p;
            from = at + start.len();
            if at > 0
                && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b':')
            {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map(|e| at + e)
                .unwrap_or(code.len());
            out.push(
                code[at..end]
                    .trim_end_matches(':')
                    .split("::")
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    out
}

/// The module file that `path`, named inside `module`, refers to.
fn resolve(module: &Module, path: &[String], known: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let first = path.first()?;
    let abs: Module = match first.as_str() {
        "crate" => path[1..].to_vec(),
        "super" | "self" => {
            let mut base = module.clone();
            let mut i = 0;
            while let Some(p) = path.get(i).filter(|p| *p == "super" || *p == "self") {
                if p == "super" {
                    base.pop();
                }
                i += 1;
            }
            base.extend(path[i..].iter().cloned());
            base
        }
        child => {
            let mut m = module.clone();
            m.push(child.to_string());
            if !known.contains_key(&m) {
                return None;
            }
            m.extend(path[1..].iter().cloned());
            m
        }
    };
    (0..=abs.len())
        .rev()
        .map(|k| abs[..k].to_vec())
        .find(|m| known.contains_key(m))
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T, v: &Module) {
        let i = t.index.len();
        t.index.insert(v.clone(), i);
        t.low.insert(v.clone(), i);
        t.stack.push(v.clone());
        t.on.insert(v.clone());
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("low");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("low");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = &w == v;
                comp.push(name(&w));
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn modules_import_only_from_their_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    assert!(
        known.len() > 20,
        "found only {} files under src/",
        known.len()
    );
    let mut problems = vec![];
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &known {
        let text = std::fs::read_to_string(file).expect("read source");
        let code = code_of(&text);
        let top = module.first().map(String::as_str).unwrap_or("");
        if let Some((_, crates)) = FORBIDDEN.iter().find(|(m, _)| *m == top) {
            for c in *crates {
                if code.contains(&format!("{c}::")) {
                    problems.push(format!("{}: uses the {c} crate", file.display()));
                }
            }
        }
        for path in paths(&code) {
            let Some(target) = resolve(module, &path, &known) else {
                continue;
            };
            if &target == module || target.is_empty() {
                continue;
            }
            // A module's own submodules are part of it: `mod` items and dispatch
            // into them are not imports between peers.
            if !target.starts_with(module) {
                graph
                    .entry(module.clone())
                    .or_default()
                    .insert(target.clone());
            }
            let (Some(from), Some(to)) = (layer(top), layer(&target[0])) else {
                continue;
            };
            if to > from {
                problems.push(format!(
                    "{}: imports {} (layer {to}) from layer {from}",
                    file.display(),
                    name(&target)
                ));
            }
        }
        if !module.is_empty() && top != "<main>" && layer(top).is_none() {
            problems.push(format!(
                "{}: top-level module `{top}` has no layer in tests/it/layers.rs",
                file.display()
            ));
        }
    }
    for c in cycles(&graph) {
        problems.push(format!("import cycle between files: {}", c.join(" → ")));
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "layer rules broken:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_checker_sees_imports_cycles_and_strings() {
    let code = code_of(
        "use crate::{a::B, c as d};\n// use crate::hidden;\nlet s = \"crate::in_string\";\nfn f() { crate::e::g(); super::h::I; }\n",
    );
    let p = paths(&code);
    let names: Vec<String> = p.iter().map(|x| x.join("::")).collect();
    assert!(names.contains(&"crate::a::B".to_string()), "{names:?}");
    assert!(names.contains(&"crate::c".to_string()), "{names:?}");
    assert!(names.contains(&"crate::e::g".to_string()), "{names:?}");
    assert!(names.contains(&"super::h::I".to_string()), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.contains("hidden") || n.contains("in_string"))
    );
    let m = |s: &str| -> Module { s.split("::").map(str::to_string).collect() };
    let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    g.entry(m("a")).or_default().insert(m("b"));
    g.entry(m("b")).or_default().insert(m("c"));
    g.entry(m("c")).or_default().insert(m("a"));
    g.entry(m("d")).or_default().insert(m("a"));
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
}
