//! Criterion micro-benchmarks of the storage path: write-path appends (WAL with and
//! without fsync), memtable flush to Parquet, and a range query touching 1 of 100
//! chunks (plan kept per shape or per prepared statement, or planned every time)
//! against a full scan of the same 10M-row hypertable, and whole-table aggregates from
//! file statistics against reading the files.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sundial::catalog::TableDef;
use sundial::config::{Config, FsyncPolicy};
use sundial::sql::Session;
use sundial::{Engine, sql::Output};

/// The allocator the server binary uses, so these figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DAY: i64 = 86_400_000_000;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn open(dir: &std::path::Path, fsync: FsyncPolicy) -> (Arc<Engine>, Session) {
    let config = Config {
        data_dir: dir.to_path_buf(),
        wal_fsync: fsync,
        flush_size: 1 << 40,
        flush_age: Duration::from_secs(3600),
        ..Config::default()
    };
    let engine = Engine::open(config).await.expect("open");
    let s = Session::new(engine.clone(), "sundial", "bench", 1).expect("session");
    s.run_sql(
        "CREATE TABLE m (time timestamptz NOT NULL, host text, v double precision, n bigint) \
         WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day')",
    )
    .await
    .expect("create");
    (engine, s)
}

fn table(engine: &Engine) -> Arc<TableDef> {
    engine
        .catalog()
        .snapshot()
        .table("sundial", "m")
        .expect("table")
        .clone()
}

/// `rows` rows starting at `t0`, one every `step` µs.
fn batch(t0: i64, step: i64, rows: usize) -> RecordBatch {
    let t: Vec<i64> = (0..rows as i64).map(|i| t0 + i * step).collect();
    let host: Vec<String> = (0..rows).map(|i| format!("host_{}", i % 100)).collect();
    let v: Vec<f64> = (0..rows).map(|i| (i % 1000) as f64 * 0.5).collect();
    let n: Vec<i64> = (0..rows as i64).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(TimestampMicrosecondArray::from(t).with_timezone("UTC")),
        Arc::new(StringArray::from(host)),
        Arc::new(Float64Array::from(v)),
        Arc::new(Int64Array::from(n)),
    ];
    RecordBatch::try_new(table_schema(), cols).expect("batch")
}

fn table_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("host", DataType::Utf8, true),
        Field::new("v", DataType::Float64, true),
        Field::new("n", DataType::Int64, true),
    ]))
}

fn write_path(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("write");
    g.sample_size(10);
    for (name, policy) in [
        ("fsync", FsyncPolicy::Fsync),
        ("nofsync", FsyncPolicy::None),
    ] {
        let dir = tempfile::tempdir().expect("tmp");
        let (engine, _s) = rt.block_on(open(dir.path(), policy));
        let t = table(&engine);
        let b = batch(0, 1_000_000, 5000);
        g.throughput(Throughput::Elements(5000 * 8));
        g.bench_function(
            BenchmarkId::new("append_5000_rows_x8_writers", name),
            |bench| {
                bench.iter(|| {
                    rt.block_on(async {
                        let mut tasks = vec![];
                        for _ in 0..8 {
                            let w = engine.clone();
                            let t = t.clone();
                            let b = b.clone();
                            tasks.push(tokio::spawn(async move { w.write(&t, b).await }));
                        }
                        for task in tasks {
                            task.await.expect("join").expect("write");
                        }
                    })
                })
            },
        );
        // keep memory bounded between policies
        rt.block_on(engine.flush()).expect("flush");
    }
    g.finish();
}

fn flush(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("flush");
    g.sample_size(10);
    let rows = 1_000_000usize;
    g.throughput(Throughput::Elements(rows as u64));
    g.bench_function("flush_1M_rows_to_parquet", |bench| {
        bench.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tmp");
                let (engine, _s) = rt.block_on(open(dir.path(), FsyncPolicy::None));
                let t = table(&engine);
                rt.block_on(async {
                    for i in 0..(rows / 100_000) {
                        engine
                            .write(&t, batch(i as i64 * 100_000 * 1000, 1000, 100_000))
                            .await
                            .expect("write");
                    }
                });
                (dir, engine)
            },
            |(_dir, engine)| rt.block_on(engine.flush()).expect("flush"),
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();
}

async fn count(s: &Session, sql: &str) -> usize {
    let mut n = 0;
    for out in s.run_sql(sql).await.expect("query") {
        n += rows_of(out).await;
    }
    n
}

async fn rows_of(out: Output) -> usize {
    let mut n = 0;
    if let Output::Rows(_, mut stream) = out {
        use futures::StreamExt;
        while let Some(b) = stream.next().await {
            n += b.expect("batch").num_rows();
        }
    }
    n
}

fn pruning(c: &mut Criterion) {
    let rt = rt();
    let dir = tempfile::tempdir().expect("tmp");
    let (engine, s) = rt.block_on(open(dir.path(), FsyncPolicy::None));
    let t = table(&engine);
    // 10M rows over 100 daily chunks (100k rows a chunk).
    rt.block_on(async {
        for day in 0..100i64 {
            let step = DAY / 100_000;
            engine
                .write(&t, batch(day * DAY, step, 100_000))
                .await
                .expect("write");
            if day % 20 == 19 {
                engine.flush().await.expect("flush");
            }
        }
        engine.flush().await.expect("flush");
    });
    let mut g = c.benchmark_group("query_10M_rows_100_chunks");
    g.sample_size(10);
    g.bench_function("range_1_of_100_chunks", |b| {
        b.iter(|| {
            rt.block_on(count(
                &s,
                "SELECT avg(v), max(n) FROM m WHERE time >= '1970-02-01' AND time < '1970-02-02'",
            ))
        })
    });
    // The same query as text the session has not run before (a fresh comment each
    // time), so it is parsed, analyzed and optimized rather than taken from the cache.
    let runs = std::sync::atomic::AtomicU64::new(0);
    g.bench_function("range_1_of_100_chunks_uncached", |b| {
        b.iter(|| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(count(
                &s,
                &format!(
                    "SELECT avg(v), max(n) FROM m WHERE time >= '1970-02-01' AND time < '1970-02-02' /* {run} */"
                ),
            ))
        })
    });
    // New time literals each run, as dashboards and TSBS send them: the shape's kept
    // plan with the text's values bound (and, in a session that switched the cache
    // off, planned from the text every time).
    let day_text = |run: u64| {
        let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 11).expect("date")
            + chrono::Days::new(run % 80);
        (d.to_string(), (d + chrono::Days::new(1)).to_string())
    };
    let new_literals = |run: u64| {
        let (a, b) = day_text(run);
        format!("SELECT avg(v), max(n) FROM m WHERE time >= '{a}' AND time < '{b}'")
    };
    g.bench_function("range_1_of_100_chunks_new_literals", |b| {
        b.iter(|| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(count(&s, &new_literals(run)))
        })
    });
    let off = Session::new(engine.clone(), "sundial", "bench", 2).expect("session");
    rt.block_on(off.run_sql("SET sundial.plan_cache = off"))
        .expect("set");
    g.bench_function("range_1_of_100_chunks_new_literals_cache_off", |b| {
        b.iter(|| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(count(&off, &new_literals(run)))
        })
    });
    // A prepared statement executed with new values (the extended protocol).
    let prepared = rt
        .block_on(async {
            let stmt = sundial::sql::parse(
                "SELECT avg(v), max(n) FROM m WHERE time >= $1::timestamptz AND time < $2::timestamptz",
            )
            .expect("parse")
            .remove(0);
            s.prepare(stmt).await
        })
        .expect("prepare");
    g.bench_function("range_1_of_100_chunks_prepared", |b| {
        b.iter(|| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let from = (10 + (run % 80) as i64) * DAY;
            let at = |t: i64| {
                datafusion::common::ScalarValue::TimestampMicrosecond(Some(t), Some("UTC".into()))
            };
            let params = datafusion::common::ParamValues::from(vec![at(from), at(from + DAY)]);
            rt.block_on(async {
                let out = s.execute(&prepared, Some(params)).await.expect("execute");
                rows_of(out).await
            })
        })
    });
    // count/min/max/avg over every chunk: from the files' statistics, and read.
    const WHOLE: &str = "SELECT count(*), min(v), max(v), avg(v) FROM m";
    g.bench_function("aggregate_100_chunks_from_statistics", |b| {
        b.iter(|| rt.block_on(count(&s, WHOLE)))
    });
    rt.block_on(off.run_sql("SET sundial.stats_answers = off"))
        .expect("set");
    g.bench_function("aggregate_100_chunks_read", |b| {
        b.iter(|| rt.block_on(count(&off, WHOLE)))
    });
    g.bench_function("range_0_of_100_chunks_planning_only", |b| {
        b.iter(|| {
            rt.block_on(count(
                &s,
                "SELECT avg(v), max(n) FROM m WHERE time >= '1971-01-01'",
            ))
        })
    });
    g.bench_function("range_1_hour_in_1_chunk", |b| {
        b.iter(|| {
            rt.block_on(count(
                &s,
                "SELECT avg(v), max(n) FROM m WHERE time >= '1970-02-01 10:00:00' AND time < '1970-02-01 11:00:00'",
            ))
        })
    });
    const Q1: &str =
        "SELECT avg(v), max(n) FROM m WHERE time >= '1970-02-01' AND time < '1970-02-02'";
    if std::env::var("EXPLAIN").is_ok() {
        rt.block_on(async {
            for _ in 0..50 {
                count(&s, Q1).await;
            }
            for q in [
                Q1,
                "SELECT avg(v), max(n) FROM m WHERE time >= '1971-01-01'",
            ] {
                let b = s
                    .ctx
                    .sql(&format!("EXPLAIN ANALYZE {q}"))
                    .await
                    .expect("sql")
                    .collect()
                    .await
                    .expect("collect");
                println!(
                    "{}",
                    arrow::util::pretty::pretty_format_batches(&b).expect("fmt")
                );
            }
        });
    }
    g.bench_function("phase_sql_to_logical", |b| {
        b.iter(|| {
            rt.block_on(async {
                let stmt = sundial::sql::parse(Q1).expect("parse").remove(0);
                s.prepare(stmt).await.expect("prepare")
            })
        })
    });
    g.bench_function("phase_to_physical", |b| {
        b.iter(|| {
            rt.block_on(async {
                let df = s.ctx.sql(Q1).await.expect("sql");
                df.create_physical_plan().await.expect("physical")
            })
        })
    });
    g.bench_function("phase_df_sql_collect", |b| {
        b.iter(|| {
            rt.block_on(async {
                let df = s.ctx.sql(Q1).await.expect("sql");
                df.collect().await.expect("collect")
            })
        })
    });
    g.bench_function("full_scan", |b| {
        b.iter(|| rt.block_on(count(&s, "SELECT avg(v), max(n) FROM m")))
    });
    g.finish();
}

criterion_group!(benches, write_path, flush, pruning);
criterion_main!(benches);
