//! SQL cursors as PostgreSQL has them for clients that page through a result:
//! `DECLARE name [SCROLL] CURSOR FOR query` (in a transaction block unless `WITH
//! HOLD`), `FETCH` / `MOVE` in every direction, `CLOSE name | ALL`. A cursor scans
//! its result forward as it is read; a SCROLL cursor holds the whole result and
//! moves both ways. Cursors without HOLD close when the block ends.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{self, FetchDirection, Statement};
use futures::StreamExt;

use super::{Output, Session};
use crate::error::{Error, Result};

/// One open cursor: the rest of its result.
pub struct Cursor {
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
    /// Rows read from the stream but not fetched yet.
    pending: Option<RecordBatch>,
    hold: bool,
    /// A SCROLL cursor's whole result and its position.
    scroll: Option<Scroll>,
}

/// A SCROLL cursor's rows and position: 0 is before the first row, `rows + 1`
/// after the last, as in PostgreSQL.
struct Scroll {
    rows: RecordBatch,
    pos: usize,
}

/// Where a FETCH or MOVE goes.
#[derive(Debug, Clone, Copy)]
enum Motion {
    /// The next n rows (`None`: all).
    Forward(Option<usize>),
    /// The previous n rows, nearest first (`None`: all).
    Backward(Option<usize>),
    Absolute(i64),
    Relative(i64),
}

/// A session's open cursors by name.
#[derive(Default)]
pub struct Cursors {
    open: tokio::sync::Mutex<HashMap<String, Cursor>>,
}

impl std::fmt::Debug for Cursors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursors").finish_non_exhaustive()
    }
}

impl Cursors {
    /// The result columns of cursor `name` (what its FETCH returns), if open.
    pub fn schema(&self, name: &str) -> Option<SchemaRef> {
        self.open
            .try_lock()
            .ok()
            .and_then(|m| m.get(name).map(|c| c.schema.clone()))
    }

    /// Closes the cursors that do not outlive a transaction block.
    pub async fn end_of_block(&self) {
        self.open.lock().await.retain(|_, c| c.hold);
    }
}

/// Whether `stmt` is DECLARE / FETCH / CLOSE.
pub fn handles(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Declare { .. } | Statement::Fetch { .. } | Statement::Close { .. }
    )
}

/// The cursor a FETCH reads.
pub fn fetch_target(stmt: &Statement) -> Option<String> {
    match stmt {
        Statement::Fetch { name, into, .. }
            if !into
                .as_ref()
                .is_some_and(|i| i.to_string().starts_with(super::prepass::MOVE_MARK)) =>
        {
            Some(name.value.clone())
        }
        _ => None,
    }
}

fn no_cursor(name: &str) -> Error {
    Error::sql("34000", format!("cursor \"{name}\" does not exist"))
}

fn count_of(v: &ast::ValueWithSpan) -> Result<i64> {
    match &v.value {
        ast::Value::Number(n, _) => n
            .parse::<i64>()
            .map_err(|_| Error::sql("22023", format!("invalid FETCH count {n}"))),
        other => Err(Error::sql("22023", format!("invalid FETCH count {other}"))),
    }
}

impl Motion {
    /// The motion with its count's sign flipped (`FETCH -2`, `ABSOLUTE -1`).
    fn negated(self) -> Motion {
        match self {
            Motion::Forward(Some(n)) => Motion::Backward(Some(n)),
            Motion::Backward(Some(n)) => Motion::Forward(Some(n)),
            Motion::Absolute(a) => Motion::Absolute(-a),
            Motion::Relative(r) => Motion::Relative(-r),
            all => all,
        }
    }
}

/// `n` rows forward (negative: backward; 0: the current row again).
fn steps(n: i64) -> Motion {
    match n {
        0 => Motion::Relative(0),
        n if n > 0 => Motion::Forward(Some(n as usize)),
        n => Motion::Backward(Some(n.unsigned_abs() as usize)),
    }
}

fn motion(d: &FetchDirection) -> Result<Motion> {
    Ok(match d {
        FetchDirection::Count { limit } => steps(count_of(limit)?),
        FetchDirection::Forward { limit: Some(l) } => steps(count_of(l)?),
        FetchDirection::Next | FetchDirection::Forward { limit: None } => Motion::Forward(Some(1)),
        FetchDirection::All | FetchDirection::ForwardAll => Motion::Forward(None),
        FetchDirection::Prior | FetchDirection::Backward { limit: None } => {
            Motion::Backward(Some(1))
        }
        FetchDirection::Backward { limit: Some(l) } => steps(-count_of(l)?),
        FetchDirection::BackwardAll => Motion::Backward(None),
        FetchDirection::First => Motion::Absolute(1),
        FetchDirection::Last => Motion::Absolute(-1),
        FetchDirection::Absolute { limit } => Motion::Absolute(count_of(limit)?),
        FetchDirection::Relative { limit } => Motion::Relative(count_of(limit)?),
    })
}

/// The 0-based row indices `m` reads from position `pos` of `n` rows, and the
/// position after it.
fn scroll_to(m: Motion, pos: usize, n: usize) -> (Vec<usize>, usize) {
    let at = |p: i64| -> (Vec<usize>, usize) {
        if p < 1 {
            (vec![], 0)
        } else if p as usize > n {
            (vec![], n + 1)
        } else {
            (vec![p as usize - 1], p as usize)
        }
    };
    match m {
        Motion::Forward(k) => {
            let k = k.unwrap_or(usize::MAX);
            let last = pos.saturating_add(k);
            let rows: Vec<usize> = (pos + 1..=last.min(n)).map(|r| r - 1).collect();
            (rows, if last > n { n + 1 } else { last })
        }
        Motion::Backward(k) => {
            let k = k.unwrap_or(usize::MAX);
            let from = pos.min(n + 1);
            let rows: Vec<usize> = (1..from).rev().take(k).map(|r| r - 1).collect();
            (rows, from.saturating_sub(k))
        }
        Motion::Absolute(a) if a >= 0 => at(a),
        Motion::Absolute(a) => at(n as i64 + 1 + a),
        Motion::Relative(r) => at(pos as i64 + r),
    }
}

impl Session {
    /// Runs DECLARE, FETCH or CLOSE; `None` if `stmt` is none of them.
    pub(crate) async fn cursor_statement(&self, stmt: &Statement) -> Result<Option<Output>> {
        Ok(Some(match stmt {
            Statement::Declare { stmts } => {
                for d in stmts {
                    self.declare(d).await?;
                }
                Output::Command("DECLARE CURSOR".into())
            }
            Statement::Fetch {
                name,
                direction,
                into,
                ..
            } => {
                use super::prepass::{MOVE_MARK, NEGATIVE_MARK};
                let mark = into.as_ref().map(|i| i.to_string()).unwrap_or_default();
                let is_move = mark.starts_with(MOVE_MARK);
                let negative = mark.ends_with(NEGATIVE_MARK);
                if into.is_some() && !is_move && !negative {
                    return Err(Error::NotSupported("FETCH ... INTO".into()));
                }
                let mut m = motion(direction)?;
                if negative {
                    m = m.negated();
                }
                let (schema, batches) = self.fetch(&name.value, m).await?;
                if is_move {
                    let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
                    Output::Command(format!("MOVE {n}"))
                } else {
                    let out: Vec<_> = batches
                        .into_iter()
                        .map(Ok::<_, datafusion::error::DataFusionError>)
                        .collect();
                    let stream =
                        RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter(out));
                    Output::Fetched(schema, Box::pin(stream))
                }
            }
            Statement::Close { cursor } => {
                let mut open = self.cursors.open.lock().await;
                match cursor {
                    ast::CloseCursor::All => {
                        open.clear();
                        Output::Command("CLOSE CURSOR ALL".into())
                    }
                    ast::CloseCursor::Specific { name } => {
                        if open.remove(&name.value).is_none() {
                            return Err(no_cursor(&name.value));
                        }
                        Output::Command("CLOSE CURSOR".into())
                    }
                }
            }
            _ => return Ok(None),
        }))
    }

    async fn declare(&self, d: &ast::Declare) -> Result<()> {
        let Some(query) = &d.for_query else {
            return Err(Error::sql("42601", "DECLARE needs CURSOR FOR a query"));
        };
        let hold = d.hold == Some(true);
        if !hold && !self.staging.in_block() {
            return Err(Error::sql(
                "25P01",
                "DECLARE CURSOR can only be used in transaction blocks",
            ));
        }
        for name in &d.names {
            if self.cursors.open.lock().await.contains_key(&name.value) {
                return Err(Error::sql(
                    "42P03",
                    format!("cursor \"{}\" already exists", name.value),
                ));
            }
            let p = self.prepare(Statement::Query(query.clone())).await?;
            // Boxed: execute is what runs DECLARE itself.
            let Output::Rows(schema, mut stream) = Box::pin(self.execute(&p, None)).await? else {
                return Err(Error::sql(
                    "42601",
                    "a cursor needs a query that returns rows",
                ));
            };
            let scroll = if d.scroll == Some(true) {
                let mut batches = vec![];
                while let Some(b) = stream.next().await {
                    let b = b?;
                    batches.push(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?);
                }
                Some(Scroll {
                    rows: arrow::compute::concat_batches(&schema, &batches)?,
                    pos: 0,
                })
            } else {
                None
            };
            self.cursors.open.lock().await.insert(
                name.value.clone(),
                Cursor {
                    schema,
                    stream,
                    pending: None,
                    hold,
                    scroll,
                },
            );
        }
        Ok(())
    }

    /// The rows motion `m` reads from cursor `name`, in its result's columns.
    async fn fetch(&self, name: &str, m: Motion) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let mut open = self.cursors.open.lock().await;
        let c = open.get_mut(name).ok_or_else(|| no_cursor(name))?;
        let schema = c.schema.clone();
        if let Some(sc) = c.scroll.as_mut() {
            let (rows, pos) = scroll_to(m, sc.pos, sc.rows.num_rows());
            sc.pos = pos;
            let idx = arrow::array::UInt32Array::from(
                rows.into_iter().map(|r| r as u32).collect::<Vec<_>>(),
            );
            let cols = sc
                .rows
                .columns()
                .iter()
                .map(|col| arrow::compute::take(col, &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            return Ok((schema.clone(), vec![RecordBatch::try_new(schema, cols)?]));
        }
        let Motion::Forward(n) = m else {
            return Err(Error::sql(
                "55000",
                "cursor can only scan forward (declare it SCROLL to move backward or to a position)",
            ));
        };
        let want = n.unwrap_or(usize::MAX);
        let mut got = 0usize;
        let mut out = vec![];
        while got < want {
            let batch = match c.pending.take() {
                Some(b) => b,
                None => match c.stream.next().await {
                    Some(b) => b?,
                    None => break,
                },
            };
            let take = (want - got).min(batch.num_rows());
            if take < batch.num_rows() {
                c.pending = Some(batch.slice(take, batch.num_rows() - take));
            }
            got += take;
            // Batches carry the plan's column names; the cursor's schema has the result's.
            out.push(RecordBatch::try_new(
                schema.clone(),
                batch.slice(0, take).columns().to_vec(),
            )?);
        }
        Ok((schema, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scroll_positions_follow_postgresql() {
        // 3 rows, positions 0 (before) ..= 4 (after).
        assert_eq!(scroll_to(Motion::Forward(Some(2)), 0, 3), (vec![0, 1], 2));
        assert_eq!(scroll_to(Motion::Forward(Some(5)), 2, 3), (vec![2], 4));
        assert_eq!(scroll_to(Motion::Forward(None), 4, 3), (vec![], 4));
        assert_eq!(scroll_to(Motion::Backward(Some(1)), 4, 3), (vec![2], 3));
        assert_eq!(scroll_to(Motion::Backward(None), 3, 3), (vec![1, 0], 0));
        assert_eq!(scroll_to(Motion::Backward(Some(5)), 2, 3), (vec![0], 0));
        assert_eq!(scroll_to(Motion::Absolute(-1), 0, 3), (vec![2], 3));
        assert_eq!(scroll_to(Motion::Absolute(5), 0, 3), (vec![], 4));
        assert_eq!(scroll_to(Motion::Absolute(-5), 2, 3), (vec![], 0));
        assert_eq!(scroll_to(Motion::Relative(0), 2, 3), (vec![1], 2));
        assert_eq!(scroll_to(Motion::Relative(-1), 2, 3), (vec![0], 1));
        assert_eq!(scroll_to(Motion::Relative(0), 0, 3), (vec![], 0));
    }
}
