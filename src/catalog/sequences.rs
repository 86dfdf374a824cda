//! Sequences (`CREATE SEQUENCE`, `serial`, identity columns): their definitions in
//! the catalog and the values they hand out. As PostgreSQL does, a sequence logs
//! values ahead of handing them out, so a restarted server never repeats one.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Catalog, Manifest, SqlType};
use crate::error::{Error, Result};

/// Values logged ahead of the last one handed out (PostgreSQL's `SEQ_LOG_VALS`).
const LOG_AHEAD: i64 = 32;

/// One sequence of a database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceDef {
    pub id: u64,
    pub name: String,
    /// `smallint`, `integer` or `bigint`.
    pub data_type: SqlType,
    pub start: i64,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub cache: i64,
    pub cycle: bool,
    /// `OWNED BY table.column`: dropped with the column's table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<(String, String)>,
    /// The last value handed out or logged ahead of handing out: a restarted
    /// server goes on after it.
    pub last_value: i64,
    /// Whether `last_value` was handed out (else `nextval` gives it next).
    pub is_called: bool,
}

/// An identity column: `GENERATED ALWAYS` or `BY DEFAULT AS IDENTITY`, fed by its
/// sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub always: bool,
    pub sequence: String,
}

/// The bounds of a sequence's type.
pub fn type_bounds(t: &SqlType) -> (i64, i64) {
    match t {
        SqlType::Int2 => (i16::MIN as i64, i16::MAX as i64),
        SqlType::Int4 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

/// What a sequence has handed out since the catalog last logged it.
#[derive(Debug, Clone, Copy)]
struct Position {
    last: i64,
    called: bool,
    /// The value the catalog logged: values up to it may be handed out without
    /// writing the catalog.
    logged: i64,
}

/// The sequences' positions, in memory between catalog writes.
#[derive(Debug, Default)]
pub struct Positions {
    by_id: parking_lot::Mutex<HashMap<u64, Position>>,
}

fn reached(name: &str, which: &str, v: i64) -> Error {
    Error::sql(
        "2200H",
        format!("nextval: reached {which} value of sequence \"{name}\" ({v})"),
    )
}

/// The `n` values after `p` (`n` ≥ 1) and whether a CYCLE sequence wrapped on the
/// way, or the bound a sequence without CYCLE hit.
fn advance(def: &SequenceDef, p: Position, n: usize) -> Result<(Vec<i64>, Position, bool)> {
    let mut wrapped = false;
    let mut out = Vec::with_capacity(n);
    let mut last = p.last;
    let mut called = p.called;
    for _ in 0..n {
        let next = if !called {
            last
        } else {
            match last.checked_add(def.increment) {
                Some(v) if v >= def.min && v <= def.max => v,
                _ if def.cycle => {
                    wrapped = true;
                    if def.increment > 0 { def.min } else { def.max }
                }
                _ if def.increment > 0 => return Err(reached(&def.name, "maximum", def.max)),
                _ => return Err(reached(&def.name, "minimum", def.min)),
            }
        };
        out.push(next);
        last = next;
        called = true;
    }
    Ok((
        out,
        Position {
            last,
            called,
            logged: p.logged,
        },
        wrapped,
    ))
}

impl Catalog {
    /// The next `n` values of sequence `name` of `db` (42P01 when there is none).
    /// Values are logged ahead in batches, so most calls write nothing.
    pub fn nextval(&self, db: &str, name: &str, n: usize) -> Result<Vec<i64>> {
        let mut positions = self.positions.by_id.lock();
        let m = self.snapshot();
        let def = sequence(&m, db, name)?.clone();
        let p = *positions.entry(def.id).or_insert(Position {
            last: def.last_value,
            called: def.is_called,
            logged: def.last_value,
        });
        let (values, mut next, wrapped) = advance(&def, p, n.max(1))?;
        let beyond = |v: i64| {
            if def.increment > 0 {
                v > next.logged
            } else {
                v < next.logged
            }
        };
        // After a wrap the logged value is behind: log again so a restart goes on
        // from here rather than repeating what the new cycle handed out.
        if !p.called || wrapped || beyond(next.last) {
            // Log ahead: values up to `ahead` may go out before the next write.
            let ahead = next
                .last
                .saturating_add(def.increment.saturating_mul(LOG_AHEAD))
                .clamp(def.min, def.max);
            self.set_sequence_position(db, &def.name, ahead, true)?;
            next.logged = ahead;
        }
        positions.insert(def.id, next);
        Ok(values.into_iter().take(n).collect())
    }

    /// `setval`: the sequence's last value is `value` (`called`: handed out, the
    /// next is one increment on). Checked against its bounds (22003).
    pub fn setval(&self, db: &str, name: &str, value: i64, called: bool) -> Result<i64> {
        let mut positions = self.positions.by_id.lock();
        let m = self.snapshot();
        let def = sequence(&m, db, name)?.clone();
        if value < def.min || value > def.max {
            return Err(Error::sql(
                "22003",
                format!(
                    "setval: value {value} is out of bounds for sequence \"{}\" ({}..{})",
                    def.name, def.min, def.max
                ),
            ));
        }
        self.set_sequence_position(db, &def.name, value, called)?;
        positions.insert(
            def.id,
            Position {
                last: value,
                called,
                logged: value,
            },
        );
        Ok(value)
    }

    /// Forgets the in-memory positions of sequences `ids` (after DDL changed them):
    /// the next `nextval` goes on from what the catalog logged.
    pub fn forget_sequence_positions(&self, ids: &[u64]) {
        let mut p = self.positions.by_id.lock();
        for id in ids {
            p.remove(id);
        }
    }

    /// `last_value` and `is_called` as `SELECT * FROM seq` shows them.
    pub fn sequence_state(&self, db: &str, name: &str) -> Result<(i64, bool)> {
        let positions = self.positions.by_id.lock();
        let m = self.snapshot();
        let def = sequence(&m, db, name)?;
        Ok(match positions.get(&def.id) {
            Some(p) => (p.last, p.called),
            None => (def.last_value, def.is_called),
        })
    }

    fn set_sequence_position(&self, db: &str, name: &str, last: i64, called: bool) -> Result<()> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            let s = d.sequences.get_mut(name).ok_or_else(|| undefined(name))?;
            s.last_value = last;
            s.is_called = called;
            Ok(())
        })
    }

    /// `CREATE SEQUENCE`: `Ok(false)` when a relation of that name exists and
    /// `if_not_exists`.
    pub fn create_sequence(
        &self,
        db: &str,
        mut def: SequenceDef,
        if_not_exists: bool,
    ) -> Result<bool> {
        self.update(|m| {
            def.id = m.alloc_id();
            let d = m.database_mut(db)?;
            if d.tables.contains_key(&def.name)
                || d.views.contains_key(&def.name)
                || d.sequences.contains_key(&def.name)
            {
                if if_not_exists {
                    return Ok(false);
                }
                return Err(Error::sql(
                    "42P07",
                    format!("relation \"{}\" already exists", def.name),
                ));
            }
            d.sequences.insert(def.name.clone(), def);
            Ok(true)
        })
    }

    /// `DROP SEQUENCE`: `Ok(false)` when it is absent and `if_exists`.
    pub fn drop_sequence(&self, db: &str, name: &str, if_exists: bool) -> Result<bool> {
        let dropped = self.update(|m| {
            let d = m.database_mut(db)?;
            match d.sequences.remove(name) {
                Some(q) => {
                    super::roles::forget_relation(m, db, name);
                    Ok(Some(q.id))
                }
                None if if_exists => Ok(None),
                None => Err(undefined(name)),
            }
        })?;
        if let Some(id) = dropped {
            self.forget_sequence_positions(&[id]);
        }
        Ok(dropped.is_some())
    }
}

impl Catalog {
    /// `DROP SEQUENCE … CASCADE`: the columns (table, column) lose the DEFAULT or
    /// identity that used the sequence.
    pub fn drop_column_defaults(&self, db: &str, columns: &[(String, String)]) -> Result<()> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            for (t, c) in columns {
                if let Some(table) = d.tables.get_mut(t)
                    && let Some(col) = std::sync::Arc::make_mut(table)
                        .columns
                        .iter_mut()
                        .find(|x| &x.name == c)
                {
                    col.default = None;
                    col.identity = None;
                }
            }
            Ok(())
        })
    }
}

fn undefined(name: &str) -> Error {
    Error::sql("42P01", format!("relation \"{name}\" does not exist"))
}

/// Sequence `name` of `db` in `m` (42P01 when absent, 42809 when `name` is a table).
pub fn sequence<'a>(m: &'a Manifest, db: &str, name: &str) -> Result<&'a SequenceDef> {
    let d = m.database(db)?;
    d.sequences.get(name).ok_or_else(|| {
        if d.tables.contains_key(name) || d.views.contains_key(name) {
            Error::sql("42809", format!("\"{name}\" is not a sequence"))
        } else {
            undefined(name)
        }
    })
}
