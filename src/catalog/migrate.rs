//! Numbered, ordered migrations of the catalog manifest. Each one rewrites the
//! JSON of the previous format; `migrations/` holds a description of each and a
//! frozen sample data directory of every old format, which the tests upgrade.

use serde_json::Value;

use crate::error::{Error, Result};

/// The newest manifest format.
pub const LATEST: u32 = 3;

type Step = fn(&mut Value) -> Result<()>;

/// (number, name, step): step `n` turns format `n - 1` into format `n`.
const MIGRATIONS: &[(u32, &str, Step)] = &[
    (1, "initial catalog", |_| Ok(())),
    (
        2,
        "per-file null counts and chunk_interval_micros",
        v2_null_counts,
    ),
    // The JSON is unchanged; the number keeps binaries that know no change log
    // (and would ignore `manifest-<generation>.log`) away from the directory.
    (3, "catalog change log", |_| Ok(())),
];

/// Numbers of every migration this binary knows.
pub fn all_numbers() -> Vec<u32> {
    MIGRATIONS.iter().map(|m| m.0).collect()
}

/// Brings a manifest of any known format up to [`LATEST`]; returns the migrations run.
pub fn upgrade(mut v: Value) -> Result<(Value, Vec<u32>)> {
    let version =
        v.get("format_version")
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::Catalog("manifest has no format_version".into()))? as u32;
    if version > LATEST {
        return Err(Error::Catalog(format!(
            "data directory has catalog format {version}, newer than this binary's {LATEST}; upgrade sundial"
        )));
    }
    let mut ran = vec![];
    for (n, name, step) in MIGRATIONS {
        if *n > version {
            step(&mut v).map_err(|e| Error::Catalog(format!("migration {n} ({name}): {e}")))?;
            ran.push(*n);
        }
    }
    if let Some(obj) = v.as_object_mut() {
        obj.insert("format_version".into(), Value::from(LATEST));
        let mut applied: Vec<u32> = obj
            .get("migrations_applied")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_u64().map(|n| n as u32))
                    .collect()
            })
            .unwrap_or_else(|| (1..=version).collect());
        applied.extend(ran.iter().copied());
        applied.sort_unstable();
        applied.dedup();
        obj.insert("migrations_applied".into(), Value::from(applied));
    }
    Ok((v, ran))
}

/// Format 1 named the chunk interval `interval_micros`, kept the WAL checkpoint as
/// `wal_checkpoint`, and had no null counts in file statistics.
fn v2_null_counts(v: &mut Value) -> Result<()> {
    let root = v
        .as_object_mut()
        .ok_or_else(|| Error::Catalog("manifest is not an object".into()))?;
    if let Some(cp) = root.remove("wal_checkpoint") {
        root.insert("flushed_wal_seq".into(), cp);
    }
    root.entry("flushed_wal_seq").or_insert(Value::from(0));
    root.entry("migrations_applied")
        .or_insert(Value::from(vec![1u32]));
    let dbs = root
        .get_mut("databases")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Error::Catalog("manifest has no databases".into()))?;
    for db in dbs.values_mut() {
        let Some(tables) = db.get_mut("tables").and_then(Value::as_object_mut) else {
            continue;
        };
        for t in tables.values_mut() {
            let Some(t) = t.as_object_mut() else { continue };
            let iv = t.remove("interval_micros").unwrap_or(Value::Null);
            t.insert("chunk_interval_micros".into(), iv);
            let Some(files) = t.get_mut("files").and_then(Value::as_array_mut) else {
                continue;
            };
            for f in files {
                let Some(stats) = f.get_mut("stats").and_then(Value::as_array_mut) else {
                    continue;
                };
                for s in stats {
                    if let Some(s) = s.as_object_mut() {
                        s.entry("null_count").or_insert(Value::Null);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_upgrades() {
        let v1 = serde_json::json!({
            "format_version": 1, "next_id": 5, "wal_checkpoint": 7,
            "databases": {"sundial": {"id": 1, "tables": {"t": {
                "id": 3, "name": "t", "columns": [], "time_column": "time",
                "interval_micros": 86400000000i64,
                "files": [{"id": 4, "chunk_start": 0, "path": "p", "rows": 1, "bytes": 1,
                           "stats": [{"column": "time", "min": "1", "max": "2"}]}]}}}}
        });
        let (v, ran) = upgrade(v1).unwrap();
        assert_eq!(ran, vec![2, 3]);
        assert_eq!(v["flushed_wal_seq"], 7);
        let t = &v["databases"]["sundial"]["tables"]["t"];
        assert_eq!(t["chunk_interval_micros"], 86400000000i64);
        assert!(t["files"][0]["stats"][0]["null_count"].is_null());
        assert!(upgrade(serde_json::json!({"format_version": 99})).is_err());
    }
}
