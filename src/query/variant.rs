//! A hypertable scan read another way: what the optimizer rules that swap a scan's
//! source (`latest`, `newest_buckets`) share — finding the hypertable behind a
//! logical scan, the wrapping provider that falls back to the plain scan inside a
//! transaction that changed the table, and the scaffolding of a one-partition leaf.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    Expr, LogicalPlan, TableProviderFilterPushDown, TableScan, TableType,
};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{ExecutionPlan, PlanProperties};

use super::provider::{HypertableProvider, staged_ops};
use crate::catalog::TableDef;

/// The hypertable a logical scan reads, when it reads one.
pub(crate) fn hypertable_of(scan: &TableScan) -> Option<Arc<TableDef>> {
    let provider = source_as_provider(&scan.source).ok()?;
    let h = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<HypertableProvider>()?;
    Some(h.table().clone())
}

/// How a rule's path reads a hypertable instead of the plain scan.
#[async_trait]
pub(crate) trait ScanVariant: fmt::Debug + Send + Sync + 'static {
    /// The plan reading `h` this way, or `None` where the plain scan must answer.
    /// Never called while the session has staged changes to the table.
    async fn scan(
        &self,
        h: &HypertableProvider,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>>;
}

/// A hypertable's provider read through a [`ScanVariant`].
#[derive(Debug)]
pub(crate) struct VariantProvider<V> {
    inner: Arc<dyn TableProvider>,
    variant: V,
}

/// `plan` with every hypertable scan in it reading through the variant `make`
/// builds.
pub(crate) fn rewire_scans<V: ScanVariant>(
    plan: LogicalPlan,
    make: impl Fn() -> V,
) -> DfResult<Transformed<LogicalPlan>> {
    use datafusion::common::tree_node::TreeNode;
    plan.transform_up(|node| match node {
        LogicalPlan::TableScan(scan) if hypertable_of(&scan).is_some() => {
            let inner = source_as_provider(&scan.source)?;
            let source = provider_as_source(Arc::new(VariantProvider {
                inner,
                variant: make(),
            }));
            Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                source,
                ..scan
            })))
        }
        other => Ok(Transformed::no(other)),
    })
}

#[async_trait]
impl<V: ScanVariant> TableProvider for VariantProvider<V> {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(h) =
            (self.inner.as_ref() as &dyn std::any::Any).downcast_ref::<HypertableProvider>()
        {
            // A transaction's own changes to the table: the plain scan shows them.
            if staged_ops(state, h.table().id).is_empty()
                && let Some(plan) = self.variant.scan(h, state, projection, filters).await?
            {
                return Ok(plan);
            }
        }
        self.inner.scan(state, projection, filters, limit).await
    }
}

/// The properties of a leaf that yields `schema`'s rows in one partition, all at the
/// end.
pub(crate) fn one_partition(schema: SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

pub(crate) use super::leaf::leaf_plan_methods;
