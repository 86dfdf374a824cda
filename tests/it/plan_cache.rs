//! Reused query plans (simple protocol, same text or same shape) stay correct: another session's DDL
//! invalidates them, and queries calling `now()` are planned afresh every time.

use crate::harness::{TestServer, cells, text_rows};

#[tokio::test]
async fn another_sessions_ddl_invalidates_a_cached_plan() {
    let srv = TestServer::start();
    let a = srv.connect("sundial").await;
    let b = srv.connect("sundial").await;
    a.batch_execute(
        "CREATE TABLE t (time timestamptz NOT NULL, v bigint) WITH (tsdb.hypertable);
         INSERT INTO t VALUES ('2024-01-01 00:00:00+00', 1), ('2024-01-02 00:00:00+00', 2)",
    )
    .await
    .expect("setup");
    let q = "SELECT * FROM t ORDER BY time";
    assert_eq!(
        cells(text_rows(&a, q).await)[1],
        ["2024-01-02 00:00:00+00", "2"]
    );
    assert_eq!(cells(text_rows(&a, q).await).len(), 2);

    b.batch_execute("ALTER TABLE t ADD COLUMN host text")
        .await
        .expect("alter");
    assert_eq!(
        cells(text_rows(&a, q).await)[1],
        ["2024-01-02 00:00:00+00", "2", "NULL"]
    );

    b.batch_execute(
        "DROP TABLE t;
         CREATE TABLE t (time timestamptz NOT NULL, v double precision, note text);
         INSERT INTO t VALUES ('2024-02-01 00:00:00+00', 0.5, 'new')",
    )
    .await
    .expect("recreate");
    assert_eq!(
        cells(text_rows(&a, q).await),
        [["2024-02-01 00:00:00+00", "0.5", "new"]]
    );

    b.batch_execute("DROP TABLE t").await.expect("drop");
    let err = a.simple_query(q).await.expect_err("dropped table");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
    );
}

#[tokio::test]
async fn now_is_evaluated_on_every_run() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    let q = "SELECT now()::text";
    let first = cells(text_rows(&client, q).await);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = cells(text_rows(&client, q).await);
    assert_ne!(first, second, "now() must not be frozen into a reused plan");
}

/// A counter of `/metrics`.
pub(crate) async fn counter(srv: &TestServer, name: &str) -> u64 {
    let body = reqwest::get(srv.http_url("/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("body");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics lacks {name}:\n{body}"))
}

/// Texts of one shape with new literals each time (what dashboards and TSBS send)
/// run on a plan kept for the shape, bound to each text's values: every answer equals
/// PostgreSQL's, including literals that change type (an integer past int4), a time
/// zone set in between, and texts whose other literals (LIMIT) differ.
#[tokio::test]
async fn texts_of_one_shape_share_a_plan_and_give_postgresqls_answers() {
    let srv = TestServer::start();
    let a = srv.connect("sundial").await;
    let b = srv.connect("sundial").await;
    let mut pg = crate::pg_compare::PgServer::start();
    let pgc = pg.connect().await;
    let mut values = vec![];
    for h in 0..4 {
        for i in 0..288i64 {
            let n = if i % 50 == 7 {
                6_000_000_000 + i
            } else {
                i * 7 % 113
            };
            values.push(format!(
                "('2024-01-01 00:00:00+00'::timestamptz + interval '{} minutes', 'host_{h}', {}.25, {n})",
                i * 10,
                (i * 37 + h * 11) % 100
            ));
        }
    }
    let ddl = "CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, usage_user double precision, n bigint)";
    a.batch_execute(&format!(
        "{ddl} WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day'); INSERT INTO cpu VALUES {}",
        values.join(", ")
    ))
    .await
    .expect("sundial setup");
    pgc.batch_execute(&format!(
        "SET TIME ZONE 'UTC'; {ddl}; INSERT INTO cpu VALUES {}",
        values.join(", ")
    ))
    .await
    .expect("postgres setup");

    let shapes: &[&dyn Fn(usize) -> String] = &[
        &|i| {
            format!(
                "SELECT hostname, max(usage_user), count(*) FROM cpu WHERE hostname IN ('host_{}', 'host_{}') AND time >= '2024-01-0{} 0{}:00:00' AND time < '2024-01-02 1{}:00:00' GROUP BY hostname ORDER BY hostname",
                i % 4,
                (i + 1) % 4,
                1 + i % 2,
                i % 10,
                i % 10
            )
        },
        &|i| {
            let n = [5_i64, 90, 3_000_000_000, 6_000_000_100, -1, 0][i % 6];
            format!(
                "SELECT count(*), sum(n) FROM cpu WHERE n > {n} AND hostname = 'host_{}'",
                i % 4
            )
        },
        &|i| {
            format!(
                "SELECT time, hostname, usage_user FROM cpu WHERE usage_user > 80.5 AND time BETWEEN '2024-01-01 03:00:00+00' AND '2024-01-0{} 00:00:00+00' ORDER BY usage_user DESC, time, hostname LIMIT {}",
                2 + i % 2,
                [5, 10][i % 2]
            )
        },
        &|i| {
            format!(
                "WITH h AS (SELECT date_trunc('hour', time) AS b, avg(usage_user) AS u FROM cpu WHERE hostname = 'host_{}' AND time < '2024-01-02' GROUP BY b) SELECT b, u FROM h WHERE u > {} ORDER BY b",
                i % 4,
                40 + i * 3
            )
        },
    ];
    for (k, shape) in shapes.iter().enumerate() {
        for i in 0..6 {
            let q = shape(i);
            let client = if i % 2 == 0 { &a } else { &b };
            let want = cells(text_rows(&pgc, &q).await);
            assert_eq!(
                cells(text_rows(client, &q).await),
                want,
                "shape {k}, text {q}"
            );
        }
    }
    // Every shape got a plan with parameters that later texts were bound into.
    assert!(counter(&srv, "sundial_sql_plans_kept_bound_total").await >= shapes.len() as u64);
    assert!(counter(&srv, "sundial_sql_plan_hits_bound_total").await >= 3 * shapes.len() as u64);

    // Another time zone: a literal without an offset means another instant.
    let q = |h: u32| {
        format!(
            "SELECT count(*) FROM cpu WHERE time >= '2024-01-01 {h:02}:00:00' AND hostname = 'host_1'"
        )
    };
    b.batch_execute("SET TIME ZONE 'America/New_York'")
        .await
        .expect("set");
    pgc.batch_execute("SET TIME ZONE 'America/New_York'")
        .await
        .expect("set");
    for h in [1, 2, 3] {
        assert_eq!(
            cells(text_rows(&a, &q(h)).await),
            [[(288 - 6 * h).to_string()]]
        );
        assert_eq!(
            cells(text_rows(&b, &q(h)).await),
            cells(text_rows(&pgc, &q(h)).await),
            "{} in New York",
            q(h)
        );
    }
}

/// Prepared statements (extended protocol, as every driver sends them) run on the
/// plan kept for the statement, with each execution's values bound: every answer
/// equals PostgreSQL's, for parameters of several types, NULLs, executions from
/// another session, and rows written between executions.
#[tokio::test]
async fn prepared_statements_share_a_plan_and_give_postgresqls_answers() {
    let srv = TestServer::start();
    let a = srv.connect("sundial").await;
    let b = srv.connect("sundial").await;
    let mut pg = crate::pg_compare::PgServer::start();
    let pgc = pg.connect().await;
    let ddl = "CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, usage_user double precision, n bigint)";
    let rows = |from: i64| {
        (from..from + 200)
            .map(|i| {
                format!(
                    "('2024-01-01 00:00:00+00'::timestamptz + interval '{} minutes', 'host_{}', {}.5, {})",
                    i * 15,
                    i % 3,
                    (i * 37) % 100,
                    if i % 9 == 0 { "NULL".to_string() } else { (i * 1_000_003).to_string() }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    a.batch_execute(&format!(
        "{ddl} WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day'); INSERT INTO cpu VALUES {}",
        rows(0)
    ))
    .await
    .expect("sundial setup");
    pgc.batch_execute(&format!(
        "SET TIME ZONE 'UTC'; {ddl}; INSERT INTO cpu VALUES {}",
        rows(0)
    ))
    .await
    .expect("postgres setup");

    let by_host = "SELECT hostname, count(*), max(usage_user), sum(n) FROM cpu WHERE hostname = $1 AND time >= $2 AND time < $3 GROUP BY hostname";
    let above =
        "SELECT time, n FROM cpu WHERE n > $1 AND usage_user >= $2 ORDER BY time DESC LIMIT 5";
    let ts = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&chrono::Utc)
    };
    type Row = Vec<String>;
    async fn run(
        c: &tokio_postgres::Client,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Vec<Row> {
        let stmt = c.prepare(sql).await.expect("prepare");
        c.query(&stmt, params)
            .await
            .expect("query")
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| {
                        let t = r.columns()[i].type_().clone();
                        match t {
                            tokio_postgres::types::Type::TEXT => r.get::<_, Option<String>>(i),
                            tokio_postgres::types::Type::INT8 => {
                                r.get::<_, Option<i64>>(i).map(|v| v.to_string())
                            }
                            tokio_postgres::types::Type::NUMERIC => r
                                .get::<_, Option<rust_decimal::Decimal>>(i)
                                .map(|v| v.normalize().to_string()),
                            tokio_postgres::types::Type::FLOAT8 => {
                                r.get::<_, Option<f64>>(i).map(|v| v.to_string())
                            }
                            tokio_postgres::types::Type::TIMESTAMPTZ => r
                                .get::<_, Option<chrono::DateTime<chrono::Utc>>>(i)
                                .map(|v| v.to_rfc3339()),
                            other => panic!("column type {other}"),
                        }
                        .unwrap_or_else(|| "NULL".into())
                    })
                    .collect()
            })
            .collect()
    }
    let hits_before = counter(&srv, "sundial_sql_plan_hits_prepared_total").await;
    for round in 0..2 {
        for i in 0..6usize {
            let host = (i % 4 < 3).then(|| format!("host_{}", i % 3));
            let from = ts(&format!("2024-01-01T0{}:00:00Z", i));
            let to = ts(&format!("2024-01-0{}T12:00:00Z", 1 + i % 3));
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&host, &from, &to];
            let client = if i % 2 == 0 { &a } else { &b };
            assert_eq!(
                run(client, by_host, &params).await,
                run(&pgc, by_host, &params).await,
                "{by_host} with {host:?} {from} {to}, round {round}"
            );
            let n: i64 = [0, 50_000_000, 150_000_000, i64::MAX][i % 4];
            let u: f64 = [10.5, 0.0, 99.5][i % 3];
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&n, &u];
            assert_eq!(
                run(client, above, &params).await,
                run(&pgc, above, &params).await,
                "{above} with {n} {u}, round {round}"
            );
        }
        // Rows written between executions are read by the kept plan.
        let more = rows(200 + round * 200);
        a.batch_execute(&format!("INSERT INTO cpu VALUES {more}"))
            .await
            .expect("insert");
        pgc.batch_execute(&format!("INSERT INTO cpu VALUES {more}"))
            .await
            .expect("insert");
    }
    let hits = counter(&srv, "sundial_sql_plan_hits_prepared_total").await - hits_before;
    assert!(
        hits >= 16,
        "prepared executions answered by a kept plan: {hits}"
    );
    assert!(counter(&srv, "sundial_sql_plans_kept_prepared_total").await >= 2);
}

/// EXPLAIN says whether a run of the query takes a kept plan.
#[tokio::test]
async fn explain_shows_the_plan_cache() {
    let srv = TestServer::start();
    let c = srv.connect("sundial").await;
    c.batch_execute(
        "CREATE TABLE t (time timestamptz NOT NULL, host text, v bigint) WITH (tsdb.hypertable);
         INSERT INTO t VALUES ('2024-01-01 00:00:00+00', 'a', 1)",
    )
    .await
    .expect("setup");
    let cache_line = |rows: Vec<Vec<Option<String>>>| {
        rows.into_iter()
            .find(|r| r[0].as_deref() == Some("plan_cache"))
            .and_then(|r| r[1].clone())
            .expect("a plan_cache row")
    };
    let explain = |q: String| {
        let c = &c;
        async move { cache_line(text_rows(c, &format!("EXPLAIN {q}")).await) }
    };
    let q = |host: &str| format!("SELECT count(*) FROM t WHERE host = '{host}'");
    assert!(explain(q("a")).await.starts_with("miss"));
    assert_eq!(cells(text_rows(&c, &q("a")).await), [["1"]]);
    let line = explain(q("zz")).await;
    assert!(
        line.starts_with("hit") && line.contains("1 literal"),
        "{line}"
    );
    assert!(
        explain("SELECT count(*) FROM pg_class WHERE relname = 't'".into())
            .await
            .starts_with("not used")
    );
    c.batch_execute("SET sundial.plan_cache = off")
        .await
        .expect("set");
    let line = explain(q("zz")).await;
    assert!(line.contains("sundial.plan_cache is off"), "{line}");
    assert_eq!(cells(text_rows(&c, &q("zz")).await), [["0"]]);
}
