//! The `ExecutionPlan` methods every leaf plan node of this layer shares, in a module
//! of their own so that any node can use them without importing the table provider.

/// The `ExecutionPlan` methods of a leaf whose inner reads stay hidden from the
/// physical optimizer: no children and no expressions to rewrite.
macro_rules! leaf_plan_methods {
    () => {
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![]
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }

        fn with_new_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> DfResult<Arc<dyn ExecutionPlan>> {
            Ok(self)
        }
    };
}
pub(crate) use leaf_plan_methods;
