//! SQL cursors as PostgreSQL has them for clients that page through a result:
//! `DECLARE name CURSOR FOR query` (in a transaction block unless `WITH HOLD`),
//! `FETCH [FORWARD] n | NEXT | ALL FROM name`, `CLOSE name | ALL`. Cursors scan
//! forward only; those without HOLD close when the block ends.

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
        Statement::Fetch { name, .. } => Some(name.value.clone()),
        _ => None,
    }
}

fn no_cursor(name: &str) -> Error {
    Error::sql("34000", format!("cursor \"{name}\" does not exist"))
}

fn count_of(v: &ast::ValueWithSpan) -> Result<Option<usize>> {
    match &v.value {
        ast::Value::Number(n, _) => n
            .parse::<i64>()
            .map_err(|_| Error::sql("22023", format!("invalid FETCH count {n}")))
            .and_then(|n| {
                usize::try_from(n).map(Some).map_err(|_| {
                    Error::sql(
                        "55000",
                        "cursor can only scan forward (a negative count fetches backward)",
                    )
                })
            }),
        other => Err(Error::sql("22023", format!("invalid FETCH count {other}"))),
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
                name, direction, ..
            } => {
                let n = match direction {
                    FetchDirection::Count { limit } => count_of(limit)?,
                    FetchDirection::Forward { limit: Some(l) } => count_of(l)?,
                    FetchDirection::Next | FetchDirection::Forward { limit: None } => Some(1),
                    FetchDirection::All | FetchDirection::ForwardAll => None,
                    other => {
                        return Err(Error::sql(
                            "55000",
                            format!(
                                "cursor can only scan forward (FETCH {other} is not supported)"
                            ),
                        ));
                    }
                };
                self.fetch(&name.value, n).await?
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
        if d.scroll == Some(true) {
            return Err(Error::sql(
                "0A000",
                "SCROLL cursors are not supported (cursors scan forward only)",
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
            let Output::Rows(schema, stream) = Box::pin(self.execute(&p, None)).await? else {
                return Err(Error::sql(
                    "42601",
                    "a cursor needs a query that returns rows",
                ));
            };
            self.cursors.open.lock().await.insert(
                name.value.clone(),
                Cursor {
                    schema,
                    stream,
                    pending: None,
                    hold,
                },
            );
        }
        Ok(())
    }

    /// The next `n` rows of cursor `name` (`None`: all that are left).
    async fn fetch(&self, name: &str, n: Option<usize>) -> Result<Output> {
        let mut open = self.cursors.open.lock().await;
        let c = open.get_mut(name).ok_or_else(|| no_cursor(name))?;
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
            out.push(Ok(batch.slice(0, take)));
        }
        let schema = c.schema.clone();
        // Batches carry the plan's column names; the cursor's schema has the result's.
        let out: Vec<_> = out
            .into_iter()
            .map(|b: Result<RecordBatch>| {
                b.and_then(|b| Ok(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?))
                    .map_err(datafusion::error::DataFusionError::from)
            })
            .collect();
        let stream = RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter(out));
        Ok(Output::Fetched(schema, Box::pin(stream)))
    }
}
