//! The manifest's change log: each catalog change appends one checksummed record of
//! what it changed (the tables, databases and roles that differ) to
//! `catalog/manifest-<generation>.log` and fsyncs it, so a change costs its own size,
//! not the whole catalog's. The log is folded into a new `manifest.json` checkpoint
//! when it outgrows it, and at start-up.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::roles::RoleDef;
use super::{DatabaseDef, Manifest, TableDef, ViewDef, sync_dir};
use crate::error::{Error, Result};

/// Record header: payload length (u32 LE) then CRC-32C of the payload (u32 LE).
const HEADER: usize = 8;

/// A log smaller than this is never folded into a checkpoint early.
const MIN_FOLD_BYTES: u64 = 4 << 20;

/// One catalog change: the new values of whatever differs from the state before.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Delta {
    next_id: u64,
    flushed_wal_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    roles: Option<BTreeMap<String, RoleDef>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dropped_databases: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    databases: Vec<DatabaseDelta>,
}

/// The changes within one database (created when `head` is set and it was absent).
#[derive(Debug, Serialize, Deserialize)]
struct DatabaseDelta {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    head: Option<DatabaseHead>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tables: BTreeMap<String, Arc<TableDef>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dropped_tables: Vec<String>,
}

/// A database's own fields (everything but its tables).
#[derive(Debug, Serialize, Deserialize)]
struct DatabaseHead {
    id: u64,
    views: BTreeMap<String, ViewDef>,
    owners: BTreeMap<String, String>,
    connect_revoked: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    sequences: BTreeMap<String, super::sequences::SequenceDef>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    comments: BTreeMap<String, String>,
}

impl DatabaseHead {
    fn of(d: &DatabaseDef) -> DatabaseHead {
        DatabaseHead {
            id: d.id,
            views: d.views.clone(),
            owners: d.owners.clone(),
            connect_revoked: d.connect_revoked,
            sequences: d.sequences.clone(),
            comments: d.comments.clone(),
        }
    }

    fn same(a: &DatabaseDef, b: &DatabaseDef) -> bool {
        a.id == b.id
            && a.views == b.views
            && a.owners == b.owners
            && a.connect_revoked == b.connect_revoked
            && a.sequences == b.sequences
            && a.comments == b.comments
    }
}

impl Delta {
    /// What turns `prev` into `next`. Tables are compared by pointer: the catalog's
    /// operations replace (or `make_mut`) exactly the tables they change.
    pub(super) fn between(prev: &Manifest, next: &Manifest) -> Delta {
        let mut databases = vec![];
        for (name, d) in &next.databases {
            let before = prev.databases.get(name);
            let head = match before {
                Some(b) if DatabaseHead::same(b, d) => None,
                _ => Some(DatabaseHead::of(d)),
            };
            let tables: BTreeMap<String, Arc<TableDef>> = d
                .tables
                .iter()
                .filter(|(k, t)| {
                    !before
                        .and_then(|b| b.tables.get(*k))
                        .is_some_and(|old| Arc::ptr_eq(old, t))
                })
                .map(|(k, t)| (k.clone(), t.clone()))
                .collect();
            let dropped_tables: Vec<String> = before
                .map(|b| {
                    b.tables
                        .keys()
                        .filter(|k| !d.tables.contains_key(*k))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if head.is_some() || !tables.is_empty() || !dropped_tables.is_empty() {
                databases.push(DatabaseDelta {
                    name: name.clone(),
                    head,
                    tables,
                    dropped_tables,
                });
            }
        }
        Delta {
            next_id: next.next_id,
            flushed_wal_seq: next.flushed_wal_seq,
            roles: (prev.roles != next.roles).then(|| next.roles.clone()),
            dropped_databases: prev
                .databases
                .keys()
                .filter(|k| !next.databases.contains_key(*k))
                .cloned()
                .collect(),
            databases,
        }
    }

    /// Replays the change onto `m`.
    fn apply(self, m: &mut Manifest) -> Result<()> {
        m.next_id = self.next_id;
        m.flushed_wal_seq = self.flushed_wal_seq;
        if let Some(roles) = self.roles {
            m.roles = roles;
        }
        for name in self.dropped_databases {
            m.databases.remove(&name);
        }
        for dd in self.databases {
            let d = match (m.databases.get_mut(&dd.name), dd.head) {
                (Some(d), head) => {
                    if let Some(h) = head {
                        d.id = h.id;
                        d.views = h.views;
                        d.owners = h.owners;
                        d.connect_revoked = h.connect_revoked;
                        d.sequences = h.sequences;
                        d.comments = h.comments;
                    }
                    d
                }
                (None, Some(h)) => m.databases.entry(dd.name).or_insert(DatabaseDef {
                    id: h.id,
                    tables: BTreeMap::new(),
                    views: h.views,
                    owners: h.owners,
                    connect_revoked: h.connect_revoked,
                    sequences: h.sequences,
                    comments: h.comments,
                }),
                (None, None) => {
                    return Err(Error::Catalog(format!(
                        "catalog log changes database {} that does not exist",
                        dd.name
                    )));
                }
            };
            for t in dd.dropped_tables {
                d.tables.remove(&t);
            }
            d.tables.extend(dd.tables);
        }
        Ok(())
    }

    fn is_empty(&self, prev: &Manifest) -> bool {
        self.next_id == prev.next_id
            && self.flushed_wal_seq == prev.flushed_wal_seq
            && self.roles.is_none()
            && self.dropped_databases.is_empty()
            && self.databases.is_empty()
    }
}

/// The open log of one generation, owned by the catalog's writer lock.
#[derive(Debug)]
pub(super) struct Log {
    dir: PathBuf,
    generation: u64,
    /// Bytes of the last full checkpoint (the fold threshold).
    checkpoint_bytes: u64,
    /// Bytes of valid records in the log file.
    len: u64,
    file: Option<std::fs::File>,
    /// An append failed and its bytes could not be cut off: the next change writes
    /// a checkpoint instead.
    broken: bool,
}

/// Path of the log of `generation`.
fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("manifest-{generation}.log"))
}

impl Log {
    /// Replays the log of `generation` onto `m` (a torn last record is ignored: it
    /// was never acknowledged) and removes logs of other generations. Gives the
    /// records applied and the bytes they take.
    pub(super) fn replay(dir: &Path, generation: u64, m: &mut Manifest) -> Result<(usize, u64)> {
        let path = log_path(dir, generation);
        let mut applied = 0;
        let mut kept = 0;
        if path.exists() {
            let mut bytes = vec![];
            std::fs::File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
            let mut at = 0;
            while let Some(payload) = record_at(&bytes, at) {
                let delta: Delta = serde_json::from_slice(payload).map_err(|e| {
                    Error::Catalog(format!("{} record at byte {at}: {e}", path.display()))
                })?;
                delta.apply(m)?;
                applied += 1;
                at += HEADER + payload.len();
            }
            kept = at as u64;
            if at < bytes.len() {
                tracing::warn!(
                    log = %path.display(),
                    kept = at,
                    ignored = bytes.len() - at,
                    "catalog log ends in a torn record; it was never acknowledged"
                );
            }
        }
        remove_other_logs(dir, generation);
        Ok((applied, kept))
    }

    pub(super) fn new(dir: &Path, generation: u64, checkpoint_bytes: u64) -> Log {
        Log {
            dir: dir.to_path_buf(),
            generation,
            checkpoint_bytes,
            len: 0,
            file: None,
            broken: false,
        }
    }

    /// A log whose first `len` bytes (the records replayed) stay: changes are
    /// appended after them (a checkpoint could not be written at start).
    pub(super) fn resume(dir: &Path, generation: u64, checkpoint_bytes: u64, len: u64) -> Log {
        Log {
            len,
            ..Log::new(dir, generation, checkpoint_bytes)
        }
    }

    /// Makes the next change write a checkpoint.
    #[cfg(test)]
    pub(super) fn force_checkpoint(&mut self) {
        self.broken = true;
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the next change should write a checkpoint rather than a record.
    pub(super) fn wants_checkpoint(&self) -> bool {
        self.broken || self.len > self.checkpoint_bytes.max(MIN_FOLD_BYTES)
    }

    /// Appends the change from `prev` to `next` durably (nothing when they are equal).
    pub(super) fn append(&mut self, prev: &Manifest, next: &Manifest) -> Result<()> {
        let delta = Delta::between(prev, next);
        if delta.is_empty(prev) {
            return Ok(());
        }
        let payload = serde_json::to_vec(&delta).map_err(|e| Error::Catalog(e.to_string()))?;
        let len = u32::try_from(payload.len())
            .map_err(|_| Error::Catalog("catalog change over 4 GiB".into()))?;
        let mut record = Vec::with_capacity(HEADER + payload.len());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        let path = log_path(&self.dir, self.generation);
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
            f.set_len(self.len)
                .map_err(|e| Error::io(format!("cannot truncate {}", path.display()), e))?;
            sync_dir(&self.dir)?;
            self.file = Some(f);
        }
        let Some(f) = self.file.as_mut() else {
            return Err(Error::Catalog("catalog log is not open".into()));
        };
        if let Err(e) = f.write_all(&record).and_then(|_| f.sync_data()) {
            // Cut off what may have reached the file, so later records stay readable.
            if f.set_len(self.len).and_then(|_| f.sync_data()).is_err() {
                self.broken = true;
            }
            return Err(Error::io(format!("cannot append to {}", path.display()), e));
        }
        self.len += record.len() as u64;
        Ok(())
    }

    /// After a checkpoint of generation `generation` (and `bytes` long) was made
    /// durable: drops the old log and starts the new one empty.
    pub(super) fn checkpointed(&mut self, generation: u64, bytes: u64) {
        let old = log_path(&self.dir, self.generation);
        self.file = None;
        if let Err(e) = std::fs::remove_file(&old)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(log = %old.display(), error = %e, "cannot remove an old catalog log");
        }
        self.generation = generation;
        self.checkpoint_bytes = bytes;
        self.len = 0;
        self.broken = false;
    }
}

/// The payload of the record starting at `at`, if a whole one with a good checksum
/// is there.
fn record_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    let start = at + HEADER;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    (crc32c::crc32c(payload) == crc).then_some(payload)
}

/// Removes `manifest-*.log` files of generations other than `keep` (left by a crash
/// between a checkpoint and the removal of its old log).
fn remove_other_logs(dir: &Path, keep: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(g) = name
            .to_str()
            .and_then(|n| n.strip_prefix("manifest-"))
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if g != keep
            && let Err(err) = std::fs::remove_file(e.path())
        {
            tracing::warn!(log = %e.path().display(), error = %err, "cannot remove a stale catalog log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_a_torn_tail_ends_them() {
        let mut bytes = vec![];
        for p in [&b"{\"a\":1}"[..], b"{}"] {
            bytes.extend_from_slice(&(p.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32c::crc32c(p).to_le_bytes());
            bytes.extend_from_slice(p);
        }
        assert_eq!(record_at(&bytes, 0), Some(&b"{\"a\":1}"[..]));
        assert_eq!(record_at(&bytes, 15), Some(&b"{}"[..]));
        assert_eq!(record_at(&bytes, 25), None);
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 1);
        assert_eq!(record_at(&torn, 15), None);
        let mut flipped = bytes;
        flipped[20] ^= 1;
        assert_eq!(record_at(&flipped, 15), None);
        assert_eq!(record_at(&[0xff; 8], 0), None);
    }
}
