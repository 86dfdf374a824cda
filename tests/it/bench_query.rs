//! `sundial bench query` (the TSBS query benchmark) against a test server: a small
//! cpu-only data set goes in through line protocol, every devops query type runs through
//! the runner's library API, compared with itself, and lastpoint gives one row per host.

use sundial::loadgen::{self, LoadArgs, QueryArgs, UseCase};

use crate::harness::{TestServer, text_rows};

const HOSTS: u64 = 8;
const START: &str = "2016-01-01T00:00:00Z";
const END: &str = "2016-01-01T06:00:00Z";

/// Loads `scale` hosts or trucks from START to END through line protocol, flushed.
async fn load(srv: &TestServer, use_case: UseCase, scale: u64) -> loadgen::Summary {
    let loaded = loadgen::run(LoadArgs {
        url: srv.http_url(""),
        use_case,
        scale,
        timestamp_start: START.into(),
        timestamp_end: END.into(),
        reporting_period: "0s".into(),
        ..LoadArgs::default()
    })
    .await
    .expect("load");
    let client = srv.connect("benchmark").await;
    text_rows(&client, "SELECT sundial_flush()").await;
    loaded
}

#[tokio::test]
async fn every_devops_query_type_runs_and_lastpoint_has_a_row_per_host() {
    let srv = TestServer::start();
    let loaded = load(&srv, UseCase::CpuOnly, HOSTS).await;
    assert_eq!((loaded.rows, loaded.errors), (HOSTS * 6 * 360, 0));

    let args = QueryArgs {
        dsn: srv.conn_str("benchmark"),
        // The same server again: the comparison path must find equal answers.
        compare_dsn: vec![srv.conn_str("benchmark")],
        use_case: UseCase::CpuOnly,
        queries: 2,
        runs: 1,
        scale: HOSTS,
        timestamp_start: START.into(),
        timestamp_end: END.into(),
        ..QueryArgs::default()
    };
    let report = loadgen::bench(&args).await.expect("bench runs");
    let table = loadgen::render_report(&report);
    assert!(report.ok(), "{table}");
    let names: Vec<&str> = report.types.iter().map(|t| t.query_type).collect();
    let expected: Vec<&str> = loadgen::DEVOPS_TYPES.iter().map(|t| t.name).collect();
    assert_eq!(names, expected);
    for t in &report.types {
        assert_eq!(t.rows.len(), 2, "{}", t.query_type);
        let (dsn, cmp) = (t.dsn.as_ref().unwrap(), t.compare[0].as_ref().unwrap());
        assert_eq!((dsn.samples_ms.len(), cmp.samples_ms.len()), (2, 2));
        assert!(t.ratio(0).is_some(), "{table}");
    }
    let rows = |name: &str| -> Vec<usize> {
        report
            .types
            .iter()
            .find(|t| t.query_type == name)
            .map(|t| t.rows.clone())
            .unwrap_or_default()
    };
    assert_eq!(rows("lastpoint"), [HOSTS as usize; 2], "{table}");
    assert_eq!(rows("groupby-orderby-limit"), [5, 5], "{table}");
    // A random 1-hour window covers 60 minutes, or 61 when it starts mid-minute.
    assert!(
        rows("single-groupby-1-1-1")
            .iter()
            .all(|&n| (60..=61).contains(&n)),
        "{table}"
    );
    // 12-hour windows do not fit in 6 hours of data: they cover all of it.
    assert_eq!(rows("double-groupby-1"), [6 * HOSTS as usize; 2], "{table}");
    assert!(report.geometric_mean_ratio(0).is_some());
}

/// The iot queries in TSBS's TimescaleDB text (`--dialect timescaledb`): the tags
/// table is made from `readings`, every type runs (LATERAL newest rows per truck,
/// joins with tags, time_bucket, avg(age(…))), and the newest-row types find as many
/// trucks as the same queries over the tag columns do.
#[tokio::test]
async fn iot_queries_run_in_timescaledb_text() {
    let srv = TestServer::start();
    let trucks = 10;
    let loaded = load(&srv, UseCase::Iot, trucks).await;
    assert_eq!(loaded.errors, 0);
    let client = srv.connect("benchmark").await;
    let args = |dialect| QueryArgs {
        dsn: srv.conn_str("benchmark"),
        compare_dsn: vec![srv.conn_str("benchmark")],
        use_case: UseCase::Iot,
        queries: 2,
        runs: 1,
        scale: trucks,
        timestamp_start: START.into(),
        timestamp_end: END.into(),
        dialect,
        ..QueryArgs::default()
    };
    let tsdb = loadgen::bench(&args(loadgen::Dialect::Timescaledb))
        .await
        .expect("bench runs");
    let table = loadgen::render_report(&tsdb);
    assert!(tsdb.ok(), "{table}");
    assert_eq!(tsdb.types.len(), loadgen::IOT_TYPES.len(), "{table}");
    let tags = text_rows(&client, "SELECT count(*) FROM tags").await;
    assert_eq!(tags[0][0].as_deref(), Some(trucks.to_string().as_str()));
    let plain = loadgen::bench(&args(loadgen::Dialect::Sundial))
        .await
        .expect("bench runs");
    let rows = |r: &loadgen::QueryReport, name: &str| {
        r.types
            .iter()
            .find(|t| t.query_type == name)
            .map(|t| t.rows.clone())
            .unwrap_or_default()
    };
    for name in ["last-loc", "low-fuel", "high-load"] {
        assert_eq!(rows(&tsdb, name), rows(&plain, name), "{name}\n{table}");
    }
    assert!(rows(&tsdb, "last-loc").iter().all(|&n| n > 0), "{table}");
}
