//! The typed operations that change the catalog: databases, tables, columns,
//! hypertable settings, retention policies and chunk files. Each one is a single
//! atomic manifest update; nothing outside this module edits a manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::sequences::SequenceDef;
use super::{
    Catalog, ColumnDef, DatabaseDef, FileMeta, Manifest, Retention, SqlType, TableDef, ViewDef,
};
use crate::error::{Error, Result};

/// Prefix of the name a table dropped in an open transaction block goes by until
/// COMMIT drops it.
pub const DROPPED_PREFIX: &str = "_sundial_dropped_";

/// A table to create: everything but the id, which the catalog assigns.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub time_column: Option<String>,
    pub chunk_interval_micros: Option<i64>,
    /// Line-protocol table (strict field types, last write wins per point).
    pub line_protocol: bool,
    /// A SQL table line protocol may add columns to.
    pub lp_columns: bool,
    /// PRIMARY KEY and UNIQUE constraints.
    pub keys: Vec<super::KeyDef>,
    pub checks: Vec<super::CheckDef>,
    pub foreign_keys: Vec<super::ForeignKeyDef>,
    pub compression: Option<super::CompressionDef>,
}

impl NewTable {
    pub(super) fn build(self, id: u64) -> TableDef {
        TableDef {
            id,
            name: self.name,
            columns: self.columns,
            time_column: self.time_column,
            chunk_interval_micros: self.chunk_interval_micros,
            files: vec![],
            series_key: vec![],
            line_protocol: self.line_protocol,
            retention: None,
            lp_columns: self.lp_columns,
            cagg: None,
            invalidations: vec![],
            dropped: vec![],
            keys: self.keys,
            checks: self.checks,
            foreign_keys: self.foreign_keys,
            compression: self.compression,
        }
    }
}

/// Columns one line-protocol measurement needs, for [`Catalog::ensure_columns`].
#[derive(Debug, Clone)]
pub struct ColumnsWanted {
    /// Created with this definition when the table does not exist.
    pub table: NewTable,
    /// Columns to add when missing; `true` marks a tag (part of the series key).
    /// None: the table must exist already (it is only looked up, never created).
    pub columns: Vec<(ColumnDef, bool)>,
}

/// What [`Catalog::ensure_columns`] asks about a wanted column the table already
/// has: `Some(reason)` rejects the measurement.
pub type ColumnCheck<'a> = &'a dyn Fn(&TableDef, usize, usize, &ColumnDef) -> Option<String>;

/// One change to the files of a table: file `old` is removed, or replaced by a new
/// file in its place.
pub type FileEdit = (u64, Option<FileMeta>);

/// A hypertable's partitioning column must be a time type.
pub fn check_time_column(col: &ColumnDef) -> Result<()> {
    if col.sql_type.is_time() {
        Ok(())
    } else if matches!(col.sql_type, SqlType::Int2 | SqlType::Int4 | SqlType::Int8) {
        Err(Error::NotSupported(format!(
            "integer time column \"{}\" is not supported yet; use timestamptz",
            col.name
        )))
    } else {
        Err(Error::sql(
            "22023",
            format!(
                "invalid type for dimension \"{}\": {} is not a time type",
                col.name,
                col.sql_type.pg_name()
            ),
        ))
    }
}

/// Table `table` of database `db` in a manifest being changed.
fn table_mut<'a>(m: &'a mut Manifest, db: &str, table: &str) -> Result<&'a mut Arc<TableDef>> {
    m.database_mut(db)?
        .tables
        .get_mut(table)
        .ok_or_else(|| Error::UndefinedTable(table.to_string()))
}

/// PostgreSQL's 42809 for DROP TABLE on a view and the reverse.
fn wrong_kind(name: &str, kind: &str, hint: &str) -> Error {
    Error::sql(
        "42809",
        format!("\"{name}\" is not {kind}; use {hint} to remove it"),
    )
}

fn not_hypertable(name: &str) -> Error {
    Error::sql("TS102", format!("table \"{name}\" is not a hypertable"))
}

impl Catalog {
    /// Creates database `name`; `Ok(false)` when it exists and `if_not_exists`.
    pub fn create_database(&self, name: &str, if_not_exists: bool) -> Result<bool> {
        self.update(|m| {
            if m.databases.contains_key(name) {
                if if_not_exists {
                    return Ok(false);
                }
                return Err(Error::DuplicateDatabase(name.to_string()));
            }
            let id = m.alloc_id();
            m.databases.insert(
                name.to_string(),
                DatabaseDef {
                    id,
                    tables: Default::default(),
                    views: Default::default(),
                    owners: Default::default(),
                    connect_revoked: false,
                    sequences: Default::default(),
                    comments: Default::default(),
                },
            );
            Ok(true)
        })
    }

    /// Removes database `name` and returns it (`None`: absent and `if_exists`).
    pub fn drop_database(&self, name: &str, if_exists: bool) -> Result<Option<DatabaseDef>> {
        self.update(|m| match m.databases.remove(name) {
            Some(d) => Ok(Some(d)),
            None if if_exists => Ok(None),
            None => Err(Error::UndefinedDatabase(name.to_string())),
        })
    }

    /// Creates a table; `Ok(false)` when it exists and `if_not_exists`.
    pub fn create_table(&self, db: &str, table: NewTable, if_not_exists: bool) -> Result<bool> {
        self.create_table_with_sequences(db, table, vec![], if_not_exists)
    }

    /// Creates a table and the sequences of its serial and identity columns in
    /// one step; `Ok(false)` when it exists and `if_not_exists`.
    pub fn create_table_with_sequences(
        &self,
        db: &str,
        table: NewTable,
        sequences: Vec<SequenceDef>,
        if_not_exists: bool,
    ) -> Result<bool> {
        self.update(|m| {
            let id = m.alloc_id();
            let ids: Vec<u64> = sequences.iter().map(|_| m.alloc_id()).collect();
            let d = m.database_mut(db)?;
            let taken = |n: &str| {
                d.tables.contains_key(n) || d.views.contains_key(n) || d.sequences.contains_key(n)
            };
            if taken(&table.name) {
                if if_not_exists {
                    return Ok(false);
                }
                return Err(Error::DuplicateTable(table.name));
            }
            if let Some(s) = sequences.iter().find(|s| taken(&s.name)) {
                return Err(Error::DuplicateTable(s.name.clone()));
            }
            for (mut s, id) in sequences.into_iter().zip(ids) {
                s.id = id;
                d.sequences.insert(s.name.clone(), s);
            }
            d.tables
                .insert(table.name.clone(), Arc::new(table.build(id)));
            Ok(true)
        })
    }

    /// Removes a table and returns it (`None`: absent and `if_exists`).
    pub fn drop_table(
        &self,
        db: &str,
        name: &str,
        if_exists: bool,
    ) -> Result<Option<Arc<TableDef>>> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            if d.views.contains_key(name) {
                return Err(wrong_kind(name, "a table", "DROP VIEW"));
            }
            match d.tables.remove(name) {
                Some(t) => {
                    forget_comments(d, name);
                    // Sequences its columns own go with it.
                    d.sequences
                        .retain(|_, s| s.owned_by.as_ref().is_none_or(|(owner, _)| owner != name));
                    super::roles::forget_relation(m, db, name);
                    Ok(Some(t))
                }
                None if if_exists => Ok(None),
                None => Err(Error::UndefinedTable(name.to_string())),
            }
        })
    }

    /// Creates (or with `or_replace`, redefines) a view.
    pub fn create_view(&self, db: &str, mut view: ViewDef, or_replace: bool) -> Result<()> {
        self.update(|m| {
            let fresh = m.alloc_id();
            let d = m.database_mut(db)?;
            view.id = d.views.get(&view.name).map_or(fresh, |old| old.id);
            if d.tables.contains_key(&view.name) && or_replace {
                return Err(wrong_kind(&view.name, "a view", "DROP TABLE"));
            }
            if d.tables.contains_key(&view.name)
                || (d.views.contains_key(&view.name) && !or_replace)
            {
                return Err(Error::DuplicateTable(view.name));
            }
            d.views.insert(view.name.clone(), view);
            Ok(())
        })
    }

    /// Removes a view; `Ok(false)` when it is absent and `if_exists`.
    pub fn drop_view(&self, db: &str, name: &str, if_exists: bool) -> Result<bool> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            if d.tables.contains_key(name) {
                return Err(wrong_kind(name, "a view", "DROP TABLE"));
            }
            match d.views.remove(name) {
                Some(_) => {
                    forget_comments(d, name);
                    super::roles::forget_relation(m, db, name);
                    Ok(true)
                }
                None if if_exists => Ok(false),
                None => Err(Error::sql(
                    "42P01",
                    format!("view \"{name}\" does not exist"),
                )),
            }
        })
    }

    /// Gives tables an open transaction block had dropped (renamed to
    /// [`DROPPED_PREFIX`]`<id>_<name>`) their names back: the block never
    /// committed. Run at start-up; returns how many were restored.
    pub fn restore_dropped(&self) -> Result<usize> {
        let m = self.snapshot();
        let mut n = 0;
        for (db, d) in &m.databases {
            for name in d.tables.keys() {
                let Some(rest) = name.strip_prefix(DROPPED_PREFIX) else {
                    continue;
                };
                let Some((_, orig)) = rest.split_once('_') else {
                    continue;
                };
                match self.rename_table(db, name, orig) {
                    Ok(()) => n += 1,
                    Err(e) => {
                        tracing::warn!(table = %name, error = %e, "cannot restore a table dropped by an uncommitted block")
                    }
                }
            }
        }
        Ok(n)
    }

    /// Renames table `from` of `db` to `to` (42P07 if `to` exists).
    pub fn rename_table(&self, db: &str, from: &str, to: &str) -> Result<()> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            if d.tables.contains_key(to) {
                return Err(Error::sql(
                    "42P07",
                    format!("relation \"{to}\" already exists"),
                ));
            }
            let mut t = d
                .tables
                .remove(from)
                .ok_or_else(|| Error::UndefinedTable(from.to_string()))?;
            Arc::make_mut(&mut t).name = to.to_string();
            let table_id = t.id;
            d.tables.insert(to.to_string(), t);
            // Sequences the table's columns own follow it; while a block holds it
            // dropped they go out of the way too (a new table may take the name).
            let owned: Vec<String> = d
                .sequences
                .values()
                .filter(|q| q.owned_by.as_ref().is_some_and(|(o, _)| o == from))
                .map(|q| q.name.clone())
                .collect();
            for name in owned {
                let Some(mut q) = d.sequences.remove(&name) else {
                    continue;
                };
                if let Some((owner, _)) = q.owned_by.as_mut() {
                    *owner = to.to_string();
                }
                let hidden = format!("{DROPPED_PREFIX}{table_id}_");
                if to.starts_with(DROPPED_PREFIX) {
                    q.name = format!("{hidden}{}", q.name);
                } else if let Some(orig) = q.name.strip_prefix(&hidden) {
                    q.name = orig.to_string();
                }
                if d.sequences.contains_key(&q.name) {
                    return Err(Error::sql(
                        "42P07",
                        format!("relation \"{}\" already exists", q.name),
                    ));
                }
                d.sequences.insert(q.name.clone(), q);
            }
            let prefix = super::comment_key(from, Some(""));
            let moved: Vec<(String, String)> = d
                .comments
                .iter()
                .filter(|(k, _)| *k == from || k.starts_with(&prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in moved {
                d.comments.remove(&k);
                let rest = k.strip_prefix(from).unwrap_or_default();
                d.comments.insert(format!("{to}{rest}"), v);
            }
            super::roles::rename_relation(m, db, from, to);
            Ok(())
        })
    }

    /// `ALTER TABLE ... ADD COLUMN`: adds `columns` (`(definition, if_not_exists)`,
    /// or the error the statement's operation gave, checked in statement order) in
    /// one step: nothing changes unless all succeed. A NOT NULL column cannot join a
    /// table that has rows (`has_rows_in_memory` tells about rows not yet in files).
    /// `Ok(false)`: the table is absent and `if_exists`.
    pub fn add_columns(
        &self,
        db: &str,
        table: &str,
        if_exists: bool,
        columns: Vec<Result<(ColumnDef, bool)>>,
        has_rows_in_memory: bool,
    ) -> Result<bool> {
        self.update(|m| {
            let Some(t) = m.database_mut(db)?.tables.get_mut(table) else {
                if if_exists {
                    return Ok(false);
                }
                return Err(Error::UndefinedTable(table.to_string()));
            };
            for col in columns {
                let (mut c, if_not_exists) = col?;
                if t.column(&c.name).is_some() {
                    if if_not_exists {
                        continue;
                    }
                    return Err(Error::DuplicateColumn(c.name));
                }
                let has_rows = !t.files.is_empty() || has_rows_in_memory;
                let fills = c.default.is_some() || c.identity.is_some();
                if !c.nullable && has_rows && !fills {
                    return Err(Error::sql(
                        "23502",
                        format!(
                            "column \"{}\" of relation \"{}\" contains null values",
                            c.name, t.name
                        ),
                    ));
                }
                // Rows there are read NULL until the default fills them; NOT NULL
                // follows ([`Catalog::set_not_null`]).
                if has_rows {
                    c.nullable = true;
                }
                Arc::make_mut(t).columns.push(c);
            }
            Ok(true)
        })
    }

    /// `create_hypertable`: makes an empty plain table a hypertable partitioned by
    /// `column`. Returns the table id and whether it changed (`false`: already a
    /// hypertable and `if_not_exists`).
    pub fn make_hypertable(
        &self,
        db: &str,
        table: &str,
        column: &str,
        interval_micros: i64,
        if_not_exists: bool,
        has_rows_in_memory: bool,
    ) -> Result<(u64, bool)> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            if t.is_hypertable() {
                if if_not_exists {
                    return Ok((t.id, false));
                }
                return Err(Error::sql(
                    "TS110",
                    format!("table \"{table}\" is already a hypertable"),
                ));
            }
            if !t.files.is_empty() || has_rows_in_memory {
                return Err(Error::sql(
                    "0A000",
                    format!(
                        "table \"{table}\" is not empty (you can migrate data by specifying 'migrate_data => true' when calling this function)"
                    ),
                ));
            }
            super::check_keys_partitioned(&t.keys, column)?;
            let tm = Arc::make_mut(t);
            let col = tm
                .columns
                .iter_mut()
                .find(|c| c.name == column)
                .ok_or_else(|| Error::UndefinedColumn(column.to_string()))?;
            check_time_column(col)?;
            col.nullable = false;
            tm.time_column = Some(column.to_string());
            tm.chunk_interval_micros = Some(interval_micros);
            Ok((tm.id, true))
        })
    }

    /// Undoes [`Catalog::make_hypertable`] of a rolled-back transaction block: the
    /// table is plain again, `column` nullable as before. Refused once the table
    /// has files (rows written meanwhile are in chunks).
    pub fn unmake_hypertable(
        &self,
        db: &str,
        table: &str,
        column: &str,
        nullable: bool,
    ) -> Result<()> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            if !t.files.is_empty() {
                return Err(Error::sql(
                    "55000",
                    format!("hypertable \"{table}\" has rows: it stays a hypertable"),
                ));
            }
            let tm = Arc::make_mut(t);
            if let Some(c) = tm.columns.iter_mut().find(|c| c.name == column) {
                c.nullable = nullable;
            }
            tm.time_column = None;
            tm.chunk_interval_micros = None;
            Ok(())
        })
    }

    /// `create_hypertable(…, migrate_data => true)`: plain table `table`, still
    /// holding exactly the files `old`, becomes a hypertable on `column` whose
    /// files are `new` (its rows cut into chunks). Returns the table id.
    pub fn migrate_hypertable(
        &self,
        db: &str,
        table: &str,
        column: &str,
        interval_micros: i64,
        old: &[u64],
        new: Vec<FileMeta>,
    ) -> Result<u64> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            let mut have: Vec<u64> = t.files.iter().map(|f| f.id).collect();
            let mut want = old.to_vec();
            have.sort_unstable();
            want.sort_unstable();
            if t.is_hypertable() || have != want {
                return Err(Error::Catalog(format!(
                    "table \"{table}\" changed while its rows were migrated"
                )));
            }
            let tm = Arc::make_mut(t);
            let col = tm
                .columns
                .iter_mut()
                .find(|c| c.name == column)
                .ok_or_else(|| Error::UndefinedColumn(column.to_string()))?;
            col.nullable = false;
            tm.time_column = Some(column.to_string());
            tm.chunk_interval_micros = Some(interval_micros);
            tm.files = new;
            Ok(tm.id)
        })
    }

    /// `set_chunk_time_interval`: new chunks use `micros`; every existing file keeps
    /// the range it was cut with.
    pub fn set_chunk_interval(&self, db: &str, table: &str, micros: i64) -> Result<()> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            if !t.is_hypertable() {
                return Err(not_hypertable(table));
            }
            let tm = Arc::make_mut(t);
            for i in 0..tm.files.len() {
                let end = tm.file_chunk_end(&tm.files[i]);
                tm.files[i].chunk_end.get_or_insert(end);
            }
            tm.chunk_interval_micros = Some(micros);
            Ok(())
        })
    }

    /// Adds a PRIMARY KEY or UNIQUE constraint to `table` (a primary key's columns
    /// become NOT NULL). The caller checked the stored rows; `name` must be new
    /// among the database's keys, `index` telling the error to give (an index
    /// name is a relation name).
    pub fn add_key(&self, db: &str, table: &str, key: super::KeyDef, index: bool) -> Result<()> {
        self.update(|m| {
            let d = m.database(db)?;
            if d.tables
                .values()
                .any(|t| t.keys.iter().any(|k| k.name == key.name))
                || (index && (d.tables.contains_key(&key.name) || d.views.contains_key(&key.name)))
            {
                return Err(if index {
                    Error::DuplicateTable(key.name.clone())
                } else {
                    Error::sql(
                        "42710",
                        format!(
                            "constraint \"{}\" for relation \"{table}\" already exists",
                            key.name
                        ),
                    )
                });
            }
            let t = table_mut(m, db, table)?;
            for c in &key.columns {
                if t.column(c).is_none() {
                    return Err(Error::UndefinedColumn(c.clone()));
                }
            }
            if key.primary && t.keys.iter().any(|k| k.primary) {
                return Err(Error::sql(
                    "42P16",
                    format!("multiple primary keys for table \"{table}\" are not allowed"),
                ));
            }
            if let Some(tc) = &t.time_column
                && t.is_hypertable()
            {
                super::check_keys_partitioned(std::slice::from_ref(&key), tc)?;
            }
            let tm = Arc::make_mut(t);
            if key.primary {
                for c in tm.columns.iter_mut() {
                    if key.columns.contains(&c.name) {
                        c.nullable = false;
                    }
                }
                tm.keys.insert(0, key);
            } else {
                tm.keys.push(key);
            }
            Ok(())
        })
    }

    /// Drops the key `name` of `table` (any table of the database when `None`).
    /// Returns the table it belonged to; `None` when there is no such key.
    /// Adds a CHECK constraint to `table` (42710 when the table has a
    /// constraint of that name). The caller tests the stored rows.
    pub fn add_check(&self, db: &str, table: &str, check: super::CheckDef) -> Result<()> {
        self.update(|m| {
            let t = Arc::make_mut(table_mut(m, db, table)?);
            if t.keys.iter().any(|k| k.name == check.name)
                || t.checks.iter().any(|c| c.name == check.name)
            {
                return Err(Error::sql(
                    "42710",
                    format!(
                        "constraint \"{}\" for relation \"{table}\" already exists",
                        check.name
                    ),
                ));
            }
            t.checks.push(check);
            Ok(())
        })
    }

    /// Removes the CHECK constraint `name` of `table`; whether there was one.
    pub fn drop_check(&self, db: &str, table: &str, name: &str) -> Result<bool> {
        self.update(|m| {
            let t = Arc::make_mut(table_mut(m, db, table)?);
            let before = t.checks.len();
            t.checks.retain(|c| c.name != name);
            Ok(t.checks.len() != before)
        })
    }

    /// Marks the CHECK constraint `name` of `table` valid (its rows were tested).
    pub fn validate_check(&self, db: &str, table: &str, name: &str) -> Result<()> {
        self.update(|m| {
            let t = Arc::make_mut(table_mut(m, db, table)?);
            if let Some(c) = t.checks.iter_mut().find(|c| c.name == name) {
                c.validated = true;
            }
            Ok(())
        })
    }

    /// Adds a FOREIGN KEY to `table` (42710 when the table has a constraint of
    /// that name). The caller tests the stored rows.
    pub fn add_foreign_key(&self, db: &str, table: &str, fk: super::ForeignKeyDef) -> Result<()> {
        self.update(|m| {
            let t = Arc::make_mut(table_mut(m, db, table)?);
            if t.keys.iter().any(|k| k.name == fk.name)
                || t.checks.iter().any(|c| c.name == fk.name)
                || t.foreign_keys.iter().any(|c| c.name == fk.name)
            {
                return Err(Error::sql(
                    "42710",
                    format!(
                        "constraint \"{}\" for relation \"{table}\" already exists",
                        fk.name
                    ),
                ));
            }
            t.foreign_keys.push(fk);
            Ok(())
        })
    }

    /// Removes the FOREIGN KEY `name` of `table`; whether there was one.
    pub fn drop_foreign_key(&self, db: &str, table: &str, name: &str) -> Result<bool> {
        self.update(|m| {
            let t = Arc::make_mut(table_mut(m, db, table)?);
            let before = t.foreign_keys.len();
            t.foreign_keys.retain(|c| c.name != name);
            Ok(t.foreign_keys.len() != before)
        })
    }

    /// Marks the FOREIGN KEY `name` of `table` valid (its rows were tested).
    pub fn validate_foreign_key(&self, db: &str, table: &str, name: &str) -> Result<()> {
        self.update(|m| {
            let t = Arc::make_mut(table_mut(m, db, table)?);
            if let Some(c) = t.foreign_keys.iter_mut().find(|c| c.name == name) {
                c.validated = true;
            }
            Ok(())
        })
    }

    pub fn drop_key(&self, db: &str, table: Option<&str>, name: &str) -> Result<Option<String>> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            for (tn, t) in d.tables.iter_mut() {
                if table.is_some_and(|w| w != tn) {
                    continue;
                }
                if let Some(i) = t.keys.iter().position(|k| k.name == name) {
                    Arc::make_mut(t).keys.remove(i);
                    return Ok(Some(tn.clone()));
                }
            }
            Ok(None)
        })
    }

    /// Changes a hypertable's compression settings or policy: `f` gets them and a
    /// fresh job id (for a new policy). Not a hypertable: TimescaleDB's error.
    pub fn update_compression<T>(
        &self,
        db: &str,
        table: &str,
        f: impl FnOnce(&mut Option<super::CompressionDef>, i64) -> Result<T>,
    ) -> Result<T> {
        self.update(|m| {
            let job = 1000 + m.alloc_id() as i64;
            let t = table_mut(m, db, table)?;
            if !t.is_hypertable() {
                return Err(Error::sql(
                    "22023",
                    "unrecognized parameter namespace \"timescaledb\"",
                ));
            }
            f(&mut Arc::make_mut(t).compression, job)
        })
    }

    /// Marks chunk `start` of table `table_id` compressed or not (`compress_chunk`,
    /// `decompress_chunk`); a table without compression settings keeps none.
    pub fn set_chunk_compressed(&self, table_id: u64, start: i64, compressed: bool) -> Result<()> {
        self.update(|m| {
            let t = table_by_id(m, table_id)?;
            if let Some(c) = Arc::make_mut(t).compression.as_mut() {
                if compressed {
                    c.compressed_chunks.insert(start);
                } else {
                    c.compressed_chunks.remove(&start);
                }
            }
            Ok(())
        })
    }

    /// `add_retention_policy`: returns the job id, or -1 when a policy exists and
    /// `if_not_exists` (TimescaleDB's answer, with a notice).
    pub fn set_retention(
        &self,
        db: &str,
        table: &str,
        policy: Retention,
        if_not_exists: bool,
    ) -> Result<i64> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            if let Some(old) = &t.retention {
                if if_not_exists {
                    tracing::info!(table = %t.name, same = old.drop_after_micros == policy.drop_after_micros,
                        "retention policy already exists, skipping");
                    return Ok(-1);
                }
                return Err(Error::sql(
                    "42710",
                    format!(
                        "retention policy already exists for hypertable \"{}\"",
                        t.name
                    ),
                ));
            }
            Arc::make_mut(t).retention = Some(policy);
            Ok(t.retention_job_id())
        })
    }

    /// `remove_retention_policy`.
    pub fn remove_retention(&self, db: &str, table: &str, if_exists: bool) -> Result<()> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            if t.retention.is_none() && !if_exists {
                return Err(Error::sql(
                    "42704",
                    format!("retention policy not found for hypertable \"{table}\""),
                ));
            }
            Arc::make_mut(t).retention = None;
            Ok(())
        })
    }

    /// Creates or widens the tables of line-protocol measurements in one step. For
    /// each wanted table: `Ok(table)` as it is now, or `Err(reason)` when `check`
    /// rejects a column it already has or it would pass `max_columns` columns; a
    /// rejected table is left as it was.
    pub fn ensure_columns(
        &self,
        db: &str,
        wanted: &[ColumnsWanted],
        max_columns: usize,
        check: ColumnCheck<'_>,
    ) -> Result<Vec<std::result::Result<Arc<TableDef>, String>>> {
        self.update(|man| {
            let mut out = Vec::with_capacity(wanted.len());
            for (wi, w) in wanted.iter().enumerate() {
                let id_if_new = man.next_id;
                let d = man.database_mut(db)?;
                // A table that needs nothing is only looked up: one dropped since the
                // caller saw it is not brought back.
                if w.columns.is_empty() && !d.tables.contains_key(&w.table.name) {
                    out.push(Err(format!(
                        "table \"{}\" was dropped during the write",
                        w.table.name
                    )));
                    continue;
                }
                let mut allocated = false;
                let t = d.tables.entry(w.table.name.clone()).or_insert_with(|| {
                    allocated = true;
                    Arc::new(w.table.clone().build(id_if_new))
                });
                // Check everything first so a rejected measurement changes nothing.
                let mut problem = None;
                let mut adding = 0;
                for (ci, (c, _)) in w.columns.iter().enumerate() {
                    match t.column(&c.name) {
                        Some(def) => {
                            if let Some(p) = check(t, wi, ci, def) {
                                problem = Some(p);
                            }
                        }
                        None => adding += 1,
                    }
                }
                if problem.is_none() && t.columns.len() + adding > max_columns {
                    problem = Some(format!(
                        "table \"{}\" would have more than {max_columns} columns",
                        w.table.name
                    ));
                }
                if problem.is_none() {
                    for (c, tag) in &w.columns {
                        if t.column(&c.name).is_none() {
                            let tm = Arc::make_mut(t);
                            tm.columns.push(c.clone());
                            if *tag {
                                tm.series_key.push(c.name.clone());
                            }
                        }
                    }
                }
                let t = t.clone();
                if allocated {
                    man.next_id += 1;
                }
                out.push(match problem {
                    None => Ok(t),
                    Some(p) => Err(p),
                });
            }
            Ok(out)
        })
    }

    /// Hands out `n` consecutive ids (for files about to be written); returns the first.
    pub fn alloc_ids(&self, n: u64) -> Result<u64> {
        self.update(|m| {
            let first = m.next_id;
            m.next_id += n;
            Ok(first)
        })
    }

    /// Records flushed files (`(table id, file)`) and that every WAL record up to
    /// `flushed_wal_seq` is in files, in one step, with the time ranges the flushed
    /// rows cover (`(table id, range)`, for continuous aggregates over the tables).
    /// Files of dropped tables are ignored.
    pub fn add_files(
        &self,
        files: Vec<(u64, FileMeta)>,
        flushed_wal_seq: u64,
        invalidated: &[(u64, super::cagg::Range)],
    ) -> Result<()> {
        self.update(|m| {
            // Only tables continuous aggregates read keep a log (usually none).
            let sources = super::cagg::sources(m);
            for (id, r) in invalidated {
                if sources.contains(id) {
                    super::cagg::invalidate(m, *id, std::slice::from_ref(r));
                }
            }
            for db in m.databases.values_mut() {
                for t in db.tables.values_mut() {
                    let mine: Vec<FileMeta> = files
                        .iter()
                        .filter(|(id, _)| *id == t.id)
                        .map(|(_, f)| f.clone())
                        .collect();
                    if !mine.is_empty() {
                        Arc::make_mut(t).files.extend(mine);
                    }
                }
            }
            m.flushed_wal_seq = m.flushed_wal_seq.max(flushed_wal_seq);
            Ok(())
        })
    }

    /// Removes or replaces files of a table in one step (compaction, DELETE,
    /// drop_chunks, TRUNCATE); a replacement takes its old file's place, so files
    /// stay in arrival order. Fails, changing nothing, when any old file is gone.
    /// `invalidated`: the time ranges whose rows changed (none for compaction).
    /// `dropped`: the time ranges whose chunks were dropped (drop_chunks).
    pub fn edit_files(
        &self,
        table_id: u64,
        edits: &[FileEdit],
        invalidated: &[super::cagg::Range],
        dropped: &[super::cagg::Range],
    ) -> Result<()> {
        self.update(|m| {
            super::cagg::invalidate(m, table_id, invalidated);
            super::cagg::dropped(m, table_id, dropped);
            apply_edits(m, table_id, edits, vec![])
        })
    }

    /// Applies a committed transaction's file changes, for several tables, in one
    /// step: all of them or (when a table or an old file is gone) none.
    pub fn commit_files(&self, changes: &[FilesChange]) -> Result<()> {
        self.update(|m| {
            for c in changes {
                apply_edits(m, c.table_id, &c.edits, c.added.clone())?;
                super::cagg::invalidate(m, c.table_id, &c.invalidated);
                super::cagg::refreshed(m, c.table_id, &c.refreshed);
            }
            Ok(())
        })
    }
}

/// A committed transaction's changes to one table's files: `edits` replace or
/// remove files, `added` come after the others (newest).
#[derive(Debug, Clone)]
pub struct FilesChange {
    pub table_id: u64,
    pub edits: Vec<FileEdit>,
    pub added: Vec<FileMeta>,
    /// Time ranges whose rows changed (for continuous aggregates over the table).
    pub invalidated: Vec<super::cagg::Range>,
    /// Source ranges the table's continuous aggregate re-materialized with this
    /// change: they leave its invalidation log.
    pub refreshed: Vec<super::cagg::Range>,
}

/// The table with id `table_id`, in whichever database holds it.
fn table_by_id(m: &mut Manifest, table_id: u64) -> Result<&mut Arc<TableDef>> {
    m.databases
        .values_mut()
        .flat_map(|d| d.tables.values_mut())
        .find(|t| t.id == table_id)
        .ok_or_else(|| Error::UndefinedTable(format!("table id {table_id}")))
}

fn apply_edits(
    m: &mut Manifest,
    table_id: u64,
    edits: &[FileEdit],
    added: Vec<FileMeta>,
) -> Result<()> {
    let t = table_by_id(m, table_id)?;
    if !edits
        .iter()
        .all(|(id, _)| t.files.iter().any(|f| f.id == *id))
    {
        return Err(Error::Catalog(
            "chunk files changed concurrently; retry".into(),
        ));
    }
    let tm = Arc::make_mut(t);
    let mut files = Vec::with_capacity(tm.files.len() + added.len());
    for f in std::mem::take(&mut tm.files) {
        match edits.iter().find(|(id, _)| *id == f.id) {
            Some((_, Some(new))) => files.push(new.clone()),
            Some((_, None)) => {}
            None => files.push(f),
        }
    }
    files.extend(added);
    tm.files = files;
    Ok(())
}

impl Catalog {
    /// `ALTER TABLE … ALTER COLUMN`: applies `f` to column `column` of `table`.
    pub fn alter_column(
        &self,
        db: &str,
        table: &str,
        column: &str,
        f: impl FnOnce(&mut ColumnDef),
    ) -> Result<()> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            let c = Arc::make_mut(t)
                .columns
                .iter_mut()
                .find(|c| c.name == column)
                .ok_or_else(|| Error::UndefinedColumn(column.to_string()))?;
            f(c);
            Ok(())
        })
    }

    /// Makes `columns` of `table` NOT NULL (after their defaults filled the rows).
    pub fn set_not_null(&self, db: &str, table: &str, columns: &[String]) -> Result<()> {
        self.update(|m| {
            let t = table_mut(m, db, table)?;
            for c in Arc::make_mut(t).columns.iter_mut() {
                if columns.contains(&c.name) {
                    c.nullable = false;
                }
            }
            Ok(())
        })
    }
}

/// Comments on relation `name` and its columns go with it.
fn forget_comments(d: &mut DatabaseDef, name: &str) {
    let col_prefix = super::comment_key(name, Some(""));
    d.comments
        .retain(|k, _| k != name && !k.starts_with(&col_prefix));
}

impl Catalog {
    /// `COMMENT ON`: sets (or with `None` removes) the comment under `key`.
    pub fn set_comment(&self, db: &str, key: String, comment: Option<String>) -> Result<()> {
        self.update(|m| {
            let d = m.database_mut(db)?;
            match comment {
                Some(c) => d.comments.insert(key, c),
                None => d.comments.remove(&key),
            };
            Ok(())
        })
    }
}

/// A table's definition as DDL changes it: everything but its rows' state (files,
/// the invalidation log, dropped ranges, which chunks are compressed).
fn definition(t: &TableDef) -> serde_json::Value {
    let mut d = t.without_files();
    d.invalidations.clear();
    d.dropped.clear();
    if let Some(c) = d.compression.as_mut() {
        c.compressed_chunks.clear();
    }
    serde_json::to_value(&d).unwrap_or(serde_json::Value::Null)
}

/// A table's definition with what one statement changed (`old` to `new`) taken
/// back and what else changed it since (`new` to `now`: a column line protocol
/// added, another session's DDL) kept: field by field, and column by column.
fn merge3(old: &TableDef, new: &TableDef, now: &TableDef) -> Result<TableDef> {
    let obj = |t: &TableDef| match definition(t) {
        serde_json::Value::Object(o) => o,
        _ => serde_json::Map::new(),
    };
    let (o, n, c) = (obj(old), obj(new), obj(now));
    let mut out = c.clone();
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).chain(c.keys()).collect();
    for k in keys {
        if k == "columns" || c.get(k) != n.get(k) {
            continue;
        }
        match o.get(k) {
            Some(v) => out.insert(k.clone(), v.clone()),
            None => out.remove(k),
        };
    }
    let mut t: TableDef = serde_json::from_value(serde_json::Value::Object(out))
        .map_err(|e| Error::Catalog(format!("cannot put back table {}: {e}", now.name)))?;
    t.columns = if now.columns == new.columns {
        old.columns.clone()
    } else {
        let mut cols = old.columns.clone();
        cols.extend(
            now.columns
                .iter()
                .filter(|c| !new.columns.iter().any(|x| x.name == c.name))
                .filter(|c| !old.columns.iter().any(|x| x.name == c.name))
                .cloned(),
        );
        cols
    };
    Ok(t)
}

/// `before`'s definition of a table, with the rows' state `now` has.
fn with_state_of(before: &TableDef, now: &TableDef) -> TableDef {
    let mut t = before.clone();
    t.files = now.files.clone();
    t.invalidations = now.invalidations.clone();
    t.dropped = now.dropped.clone();
    // A continuous aggregate keeps its refresh state; its settings go back.
    t.cagg = match (&before.cagg, &now.cagg) {
        (Some(b), Some(n)) => {
            let mut c = n.clone();
            c.policy = b.policy.clone();
            c.materialized_only = b.materialized_only;
            Some(c)
        }
        (_, n) => n.clone(),
    };
    if let Some(c) = t.compression.as_mut() {
        c.compressed_chunks = now
            .compression
            .as_ref()
            .map(|n| n.compressed_chunks.clone())
            .unwrap_or_default();
    }
    t
}

/// Puts the entries of `now` that differ between `before` and `after` back as
/// `before` had them (absent there: removed), unless something else changed them
/// since (they differ from `after`): that change stays.
fn revert_entries<V: Clone + PartialEq>(
    now: &mut BTreeMap<String, V>,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
) {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for k in keys {
        if before.get(k) == after.get(k) || now.get(k) != after.get(k) {
            continue;
        }
        match before.get(k) {
            Some(v) => now.insert(k.clone(), v.clone()),
            None => now.remove(k),
        };
    }
}

/// [`revert_entries`] for sequences, compared without their positions: a
/// definition goes back, but a sequence never goes back to a value it may have
/// handed out since.
fn revert_sequences(
    now: &mut BTreeMap<String, SequenceDef>,
    before: &BTreeMap<String, SequenceDef>,
    after: &BTreeMap<String, SequenceDef>,
) {
    let def = |s: &SequenceDef| {
        let mut d = s.clone();
        d.last_value = 0;
        d.is_called = false;
        d
    };
    let keys: BTreeSet<String> = before.keys().chain(after.keys()).cloned().collect();
    for k in keys {
        let (b, a) = (before.get(&k).map(def), after.get(&k).map(def));
        if b == a || now.get(&k).map(def) != a {
            continue;
        }
        match before.get(&k) {
            Some(v) => {
                let mut v = v.clone();
                if let Some(c) = now.get(&k).filter(|c| c.id == v.id) {
                    let ahead = if v.increment > 0 {
                        c.last_value > v.last_value
                    } else {
                        c.last_value < v.last_value
                    };
                    if ahead {
                        v.last_value = c.last_value;
                        v.is_called = c.is_called;
                    }
                }
                now.insert(k, v);
            }
            None => {
                now.remove(&k);
            }
        }
    }
}

impl Catalog {
    /// ROLLBACK of DDL a transaction block ran: every definition a statement changed
    /// (from `before` to `after`: tables' definitions and names, views, owners,
    /// roles and their grants) is put back as `before` had it, while rows and files
    /// stay as they are now. Returns the tables the statement created, for the
    /// caller to drop with their files; a table it removed cannot come back (such
    /// DDL is not run in a block) and is only logged.
    pub fn revert_definitions(&self, db: &str, before: &Manifest, after: &Manifest) -> Result<()> {
        let (Ok(b), Ok(a)) = (before.database(db), after.database(db)) else {
            return Ok(());
        };
        let by_id = |d: &DatabaseDef| -> BTreeMap<u64, Arc<TableDef>> {
            d.tables.values().map(|t| (t.id, t.clone())).collect()
        };
        let (b_tables, a_tables) = (by_id(b), by_id(a));
        for (id, t) in &b_tables {
            if !a_tables.contains_key(id) {
                tracing::warn!(table = %t.name, "a rolled-back statement removed a table: it cannot come back");
            }
        }
        self.update(|m| {
            let current = by_id(m.database(db)?);
            for (id, old) in &b_tables {
                let Some(new) = a_tables.get(id) else {
                    continue;
                };
                if old.name == new.name && definition(old) == definition(new) {
                    continue;
                }
                let Some(now) = current.get(id) else { continue };
                let mut merged = merge3(old, new, now)?;
                let d = m.database_mut(db)?;
                // The old name taken meanwhile (line protocol made a new table of
                // it): the table keeps the name it has.
                let taken = d.tables.get(&merged.name).is_some_and(|x| x.id != *id)
                    || d.views.contains_key(&merged.name)
                    || d.sequences.contains_key(&merged.name);
                if merged.name != now.name && taken {
                    tracing::warn!(table = %now.name, wanted = %merged.name, "ROLLBACK cannot give a table its old name back: taken");
                    merged.name = now.name.clone();
                }
                let restored = Arc::new(with_state_of(&merged, now));
                let name = restored.name.clone();
                d.tables.remove(&now.name);
                d.tables.insert(name, restored);
            }
            let d = m.database_mut(db)?;
            revert_entries(&mut d.views, &b.views, &a.views);
            revert_entries(&mut d.owners, &b.owners, &a.owners);
            revert_sequences(&mut d.sequences, &b.sequences, &a.sequences);
            revert_entries(&mut d.comments, &b.comments, &a.comments);
            if b.connect_revoked != a.connect_revoked {
                d.connect_revoked = b.connect_revoked;
            }
            revert_entries(&mut m.roles, &before.roles, &after.roles);
            Ok(())
        })?;
        let changed: Vec<u64> = b
            .sequences
            .iter()
            .chain(a.sequences.iter())
            .filter(|(n, _)| b.sequences.get(*n) != a.sequences.get(*n))
            .map(|(_, q)| q.id)
            .collect();
        self.forget_sequence_positions(&changed);
        Ok(())
    }
}
