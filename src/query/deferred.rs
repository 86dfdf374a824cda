//! A table whose rows are made when a plan runs, not when it is planned: the
//! management table functions (`show_chunks`, the size and compression stats) answer
//! from the catalog as it is at execution, so a prepared or kept plan never shows
//! chunks that a later `drop_chunks` removed.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::datasource::TableProvider;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::future::BoxFuture;

/// Makes the rows of one execution.
pub type MakeRows =
    Arc<dyn Fn() -> BoxFuture<'static, datafusion::error::Result<RecordBatch>> + Send + Sync>;

/// One partition whose single batch `make` builds when it is executed.
struct Deferred {
    schema: SchemaRef,
    make: MakeRows,
}

impl fmt::Debug for Deferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deferred")
            .field("schema", &self.schema)
            .finish()
    }
}

impl PartitionStream for Deferred {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rows = (self.make)();
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(rows),
        ))
    }
}

/// A table of `schema` whose rows `make` builds at each execution.
pub fn table(
    schema: SchemaRef,
    make: MakeRows,
) -> datafusion::error::Result<Arc<dyn TableProvider>> {
    let part: Arc<dyn PartitionStream> = Arc::new(Deferred {
        schema: schema.clone(),
        make,
    });
    Ok(Arc::new(StreamingTable::try_new(schema, vec![part])?))
}

/// [`table`] for rows made without waiting on anything.
pub fn sync_table(
    schema: SchemaRef,
    make: impl Fn() -> datafusion::error::Result<RecordBatch> + Send + Sync + 'static,
) -> datafusion::error::Result<Arc<dyn TableProvider>> {
    let make = Arc::new(make);
    table(
        schema,
        Arc::new(move || {
            let rows = make();
            Box::pin(async move { rows })
        }),
    )
}
