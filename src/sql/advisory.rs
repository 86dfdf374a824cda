//! PostgreSQL's advisory locks, which migration tools (Flyway, Prisma, Rails,
//! golang-migrate) take before migrating: `pg_advisory_lock` and its `try`,
//! `shared` and `xact` forms, `pg_advisory_unlock[_shared|_all]`. Exclusive
//! between sessions of one server; a session's locks go when it ends, a
//! transaction's when it commits or rolls back.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, new_null_array};
use arrow::datatypes::DataType;
use async_trait::async_trait;
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};

use crate::engine::Engine;
use crate::engine::tx::Staging;
use crate::error::Error;

/// A lock's name: one bigint, or two integers (PostgreSQL keeps the two apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    value: i64,
    pair: bool,
}

/// Who holds one lock, with how many acquisitions each.
#[derive(Debug, Default)]
struct Held {
    exclusive: HashMap<u64, u32>,
    shared: HashMap<u64, u32>,
}

impl Held {
    /// Whether `owner` may take it: no other session holds it exclusively, and for
    /// an exclusive lock none holds it shared either.
    fn grantable(&self, owner: u64, shared: bool) -> bool {
        let others = |m: &HashMap<u64, u32>| m.keys().any(|o| *o != owner);
        !others(&self.exclusive) && (shared || !others(&self.shared))
    }
}

/// The server's advisory locks (one per engine).
#[derive(Debug, Default)]
pub struct Locks {
    held: parking_lot::Mutex<HashMap<Key, Held>>,
    released: tokio::sync::Notify,
    next_owner: AtomicU64,
}

impl Locks {
    fn try_lock(&self, owner: u64, key: Key, shared: bool) -> bool {
        let mut held = self.held.lock();
        let h = held.entry(key).or_default();
        if !h.grantable(owner, shared) {
            return false;
        }
        let m = if shared {
            &mut h.shared
        } else {
            &mut h.exclusive
        };
        *m.entry(owner).or_default() += 1;
        true
    }

    async fn lock(&self, owner: u64, key: Key, shared: bool) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.try_lock(owner, key, shared) {
                return;
            }
            released.await;
        }
    }

    fn unlock(&self, owner: u64, key: Key, shared: bool) -> bool {
        let mut held = self.held.lock();
        let Some(h) = held.get_mut(&key) else {
            return false;
        };
        let m = if shared {
            &mut h.shared
        } else {
            &mut h.exclusive
        };
        let Some(n) = m.get_mut(&owner) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            m.remove(&owner);
        }
        if h.exclusive.is_empty() && h.shared.is_empty() {
            held.remove(&key);
        }
        drop(held);
        self.released.notify_waiters();
        true
    }

    fn unlock_all(&self, owner: u64) {
        let mut held = self.held.lock();
        for h in held.values_mut() {
            h.exclusive.remove(&owner);
            h.shared.remove(&owner);
        }
        held.retain(|_, h| !(h.exclusive.is_empty() && h.shared.is_empty()));
        drop(held);
        self.released.notify_waiters();
    }
}

/// One session's hold on the advisory locks: released when the session ends.
#[derive(Debug)]
pub struct Holder {
    locks: Arc<Locks>,
    id: u64,
    /// Transaction-level locks taken in the open block.
    xact: parking_lot::Mutex<Vec<(Key, bool)>>,
}

impl Holder {
    pub fn new(engine: &Engine) -> Holder {
        let locks = engine.shared::<Locks>();
        let id = locks.next_owner.fetch_add(1, Ordering::Relaxed);
        Holder {
            locks,
            id,
            xact: Default::default(),
        }
    }

    /// At the end of a transaction block: its transaction-level locks go.
    pub fn end_of_block(&self) {
        let taken = std::mem::take(&mut *self.xact.lock());
        for (key, shared) in taken {
            self.locks.unlock(self.id, key, shared);
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.locks.unlock_all(self.id);
    }
}

/// Which function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Lock,
    TryLock,
    Unlock,
    UnlockAll,
}

#[derive(Debug)]
struct LockFn {
    name: &'static str,
    op: Op,
    shared: bool,
    xact: bool,
    holder: Arc<Holder>,
    staging: Arc<Staging>,
    signature: Signature,
}

impl PartialEq for LockFn {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name && Arc::ptr_eq(&self.holder, &o.holder)
    }
}
impl Eq for LockFn {}
impl std::hash::Hash for LockFn {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name.hash(h)
    }
}

impl ScalarUDFImpl for LockFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(match self.op {
            Op::Lock | Op::UnlockAll => DataType::Utf8,
            Op::TryLock | Op::Unlock => DataType::Boolean,
        })
    }
    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> datafusion::error::Result<arrow::datatypes::FieldRef> {
        let f = arrow::datatypes::Field::new(self.name, self.return_type(&[])?, true);
        Ok(Arc::new(match self.op {
            Op::Lock | Op::UnlockAll => f.with_metadata(HashMap::from([(
                crate::query::system::PG_TYPE_KEY.to_string(),
                "void".to_string(),
            )])),
            _ => f,
        }))
    }
    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        Err(Error::Internal(format!("{} runs only asynchronously", self.name)).into())
    }
}

fn ints(a: &ArrayRef) -> datafusion::error::Result<Int64Array> {
    let c = arrow::compute::cast(a, &DataType::Int64)?;
    c.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| Error::Internal("advisory lock key".into()).into())
}

#[async_trait]
impl AsyncScalarUDFImpl for LockFn {
    async fn invoke_async_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows.max(1);
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let keys = arrays
            .iter()
            .map(ints)
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let (locks, owner) = (&self.holder.locks, self.holder.id);
        if self.op == Op::UnlockAll {
            locks.unlock_all(owner);
            self.holder.xact.lock().clear();
            return Ok(ColumnarValue::Array(new_null_array(&DataType::Utf8, rows)));
        }
        let mut out: Vec<Option<bool>> = Vec::with_capacity(rows);
        for r in 0..rows {
            let key = match keys.as_slice() {
                [k] if k.is_valid(r) => Key {
                    value: k.value(r),
                    pair: false,
                },
                [a, b] if a.is_valid(r) && b.is_valid(r) => {
                    let (Ok(x), Ok(y)) = (i32::try_from(a.value(r)), i32::try_from(b.value(r)))
                    else {
                        return Err(Error::sql(
                            "42883",
                            format!("function {}(bigint, bigint) does not exist", self.name),
                        )
                        .into());
                    };
                    Key {
                        value: (i64::from(x) << 32) | i64::from(y as u32),
                        pair: true,
                    }
                }
                _ => {
                    out.push(None);
                    continue;
                }
            };
            let got = match self.op {
                Op::Lock => {
                    locks.lock(owner, key, self.shared).await;
                    true
                }
                Op::TryLock => locks.try_lock(owner, key, self.shared),
                Op::Unlock => {
                    let ok = locks.unlock(owner, key, self.shared);
                    if !ok {
                        tracing::warn!(
                            key = key.value,
                            "you don't own a lock of type {}",
                            if self.shared {
                                "ShareLock"
                            } else {
                                "ExclusiveLock"
                            }
                        );
                    }
                    out.push(Some(ok));
                    continue;
                }
                Op::UnlockAll => true,
            };
            if got && self.xact {
                if self.staging.in_block() {
                    self.holder.xact.lock().push((key, self.shared));
                } else {
                    // Outside a block the statement is the transaction: it ends now.
                    locks.unlock(owner, key, self.shared);
                }
            }
            out.push(Some(got));
        }
        Ok(ColumnarValue::Array(match self.op {
            Op::Lock => new_null_array(&DataType::Utf8, rows),
            _ => Arc::new(BooleanArray::from(out)),
        }))
    }
}

/// Registers the advisory lock functions of one session.
pub fn register(
    ctx: &datafusion::prelude::SessionContext,
    holder: &Arc<Holder>,
    staging: &Arc<Staging>,
) {
    let keys = || {
        Signature::one_of(
            vec![
                TypeSignature::Exact(vec![DataType::Int64]),
                TypeSignature::Exact(vec![DataType::Int32, DataType::Int32]),
                TypeSignature::Exact(vec![DataType::Int64, DataType::Int64]),
            ],
            Volatility::Volatile,
        )
    };
    let fns: [(&'static str, Op, bool, bool); 11] = [
        ("pg_advisory_lock", Op::Lock, false, false),
        ("pg_advisory_lock_shared", Op::Lock, true, false),
        ("pg_advisory_xact_lock", Op::Lock, false, true),
        ("pg_advisory_xact_lock_shared", Op::Lock, true, true),
        ("pg_try_advisory_lock", Op::TryLock, false, false),
        ("pg_try_advisory_lock_shared", Op::TryLock, true, false),
        ("pg_try_advisory_xact_lock", Op::TryLock, false, true),
        ("pg_try_advisory_xact_lock_shared", Op::TryLock, true, true),
        ("pg_advisory_unlock", Op::Unlock, false, false),
        ("pg_advisory_unlock_shared", Op::Unlock, true, false),
        ("pg_advisory_unlock_all", Op::UnlockAll, false, false),
    ];
    for (name, op, shared, xact) in fns {
        let signature = if op == Op::UnlockAll {
            Signature::exact(vec![], Volatility::Volatile)
        } else {
            keys()
        };
        let f = LockFn {
            name,
            op,
            shared,
            xact,
            holder: holder.clone(),
            staging: staging.clone(),
            signature,
        };
        ctx.register_udf(AsyncScalarUDF::new(Arc::new(f)).into_scalar_udf());
    }
}
