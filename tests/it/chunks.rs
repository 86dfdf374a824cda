//! Chunk management against a real server: the background retention job, retention
//! policies across restarts, and drop_chunks / DELETE / TRUNCATE across restarts (deleted
//! rows must not come back from the WAL). The SQL behaviour itself is covered by
//! sql-tests/chunks.slt. Each test has its own server.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::harness::{TestServer, text_rows};

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

/// How long to wait for the background job before giving up. Only a guard against a
/// hang: no test asserts how fast the job is.
const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(200);

type Rows = Vec<Vec<Option<String>>>;

async fn exec(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e:?}"));
}

/// The single value of a one-row, one-column result.
async fn one(client: &Client, sql: &str) -> Option<String> {
    let rows = text_rows(client, sql).await;
    assert!(
        rows.len() == 1 && rows[0].len() == 1,
        "{sql:?} should return one value, got {rows:?}"
    );
    rows[0][0].clone()
}

async fn int_one(client: &Client, sql: &str) -> i64 {
    let v = one(client, sql)
        .await
        .unwrap_or_else(|| panic!("{sql:?} returned NULL"));
    v.parse()
        .unwrap_or_else(|_| panic!("{sql:?} returned {v:?}, not an integer"))
}

/// Column `col` of the first row as an integer, if there is one.
fn int_at(rows: &Rows, col: usize) -> Option<i64> {
    rows.first()?.get(col)?.as_deref()?.parse().ok()
}

fn text_at(rows: &Rows, col: usize) -> Option<&str> {
    rows.first()?.get(col)?.as_deref()
}

/// Runs `sql` every 200 ms until `done` accepts its rows; panics after [`DEADLINE`].
async fn wait_for(client: &Client, sql: &str, what: &str, done: impl Fn(&Rows) -> bool) -> Rows {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let rows = text_rows(client, sql).await;
        if done(&rows) {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {DEADLINE:?}; {sql:?} last returned {rows:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().map(|d| d.code().code())
}

/// `name (time timestamptz, v int8)` as a hypertable with 1-day chunks.
/// A 1-day hypertable without the default columnstore policy, so the jobs views hold
/// the retention policies these tests add and nothing else.
async fn create_hypertable(client: &Client, name: &str) {
    exec(
        client,
        &format!(
            "CREATE TABLE {name} (time timestamptz NOT NULL, v int8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day', \
             tsdb.enable_columnstore = false)"
        ),
    )
    .await;
}

/// `n` hourly rows from 2020-01-01 00:00 UTC with v = 0, 1, 2, ...
fn insert_2020(table: &str, n: i64) -> String {
    format!(
        "INSERT INTO {table} SELECT to_timestamp(1577836800 + 3600 * i), i \
         FROM generate_series(0, {}) AS g(i)",
        n - 1
    )
}

fn job_stats_sql(job: i64) -> String {
    format!(
        "SELECT total_runs, total_failures, last_run_status \
         FROM timescaledb_information.job_stats WHERE job_id = {job}"
    )
}

// ---------------------------------------------------------------------------
// the background retention job
// ---------------------------------------------------------------------------

#[tokio::test]
async fn retention_job_drops_old_chunks_in_the_background() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    create_hypertable(&client, "metrics").await;
    // three chunks in 2020 and two recent rows
    exec(&client, &insert_2020("metrics", 72)).await;
    exec(
        &client,
        "INSERT INTO metrics VALUES (now(), -1), (now() - INTERVAL '1 hour', -2)",
    )
    .await;

    // sizes count written files only, the row estimate counts memtables too
    assert_eq!(
        int_one(&client, "SELECT hypertable_size('metrics')").await,
        0
    );
    assert_eq!(
        int_one(&client, "SELECT approximate_row_count('metrics')").await,
        74
    );
    exec(&client, "SELECT sundial_flush()").await;
    assert!(int_one(&client, "SELECT hypertable_size('metrics')").await > 0);
    assert_eq!(
        int_one(
            &client,
            "SELECT count(*) FROM show_chunks('metrics', older_than => TIMESTAMPTZ '2021-01-01 00:00:00+00')"
        )
        .await,
        3
    );

    let job = int_one(
        &client,
        "SELECT add_retention_policy('metrics', drop_after => INTERVAL '30 days', \
         schedule_interval => INTERVAL '1 second')",
    )
    .await;
    assert!(
        job >= 1000,
        "retention job id {job} (user jobs start at 1000)"
    );
    assert_eq!(
        text_rows(
            &client,
            &format!(
                "SELECT schedule_interval, proc_name, hypertable_name \
                 FROM timescaledb_information.jobs WHERE job_id = {job}"
            ),
        )
        .await,
        vec![vec![
            Some("00:00:01".to_string()),
            Some("policy_retention".to_string()),
            Some("metrics".to_string()),
        ]]
    );

    wait_for(
        &client,
        "SELECT count(*) FROM metrics WHERE time < '2021-01-01 00:00:00+00'",
        "the retention job to drop the 2020 chunks",
        |r| int_at(r, 0) == Some(0),
    )
    .await;

    // the recent rows stay
    assert_eq!(
        text_rows(&client, "SELECT count(*), min(v), max(v) FROM metrics").await,
        vec![vec![
            Some("2".to_string()),
            Some("-2".to_string()),
            Some("-1".to_string()),
        ]]
    );
    assert_eq!(
        int_one(
            &client,
            "SELECT count(*) FROM show_chunks('metrics', older_than => TIMESTAMPTZ '2021-01-01 00:00:00+00')"
        )
        .await,
        0
    );
    assert_eq!(
        int_one(
            &client,
            "SELECT count(*) FROM timescaledb_information.chunks \
             WHERE hypertable_name = 'metrics' AND range_end <= '2021-01-01 00:00:00+00'"
        )
        .await,
        0
    );

    // the run is recorded (after the drop itself, hence the wait)
    let stats = wait_for(
        &client,
        &job_stats_sql(job),
        "job_stats to record a successful run",
        |r| int_at(r, 0).is_some_and(|n| n >= 1) && text_at(r, 2) == Some("Success"),
    )
    .await;
    assert_eq!(int_at(&stats, 1), Some(0), "failures in {stats:?}");

    // and with a 1-second schedule it keeps running
    let stats = wait_for(
        &client,
        &job_stats_sql(job),
        "a second run of the job",
        |r| int_at(r, 0).is_some_and(|n| n >= 2),
    )
    .await;
    assert_eq!(int_at(&stats, 1), Some(0), "failures in {stats:?}");
    assert_eq!(text_at(&stats, 2), Some("Success"), "{stats:?}");
    assert_eq!(int_one(&client, "SELECT count(*) FROM metrics").await, 2);
}

// ---------------------------------------------------------------------------
// policies across restarts
// ---------------------------------------------------------------------------

#[tokio::test]
async fn retention_policy_survives_restarts() {
    let mut server = TestServer::start();
    let job;
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "cond").await;
        exec(&client, "INSERT INTO cond VALUES (now(), -1)").await;
        job = int_one(
            &client,
            "SELECT add_retention_policy('cond', drop_after => INTERVAL '30 days')",
        )
        .await;
        // The first run, right after the policy is added, finds nothing old; the next
        // one is a day later (the default schedule_interval).
        wait_for(
            &client,
            &job_stats_sql(job),
            "the policy's first run",
            |r| int_at(r, 0).is_some_and(|n| n >= 1),
        )
        .await;
        // old rows that only the restarted server's run can drop (left in the WAL)
        exec(&client, &insert_2020("cond", 48)).await;
        assert_eq!(int_one(&client, "SELECT count(*) FROM cond").await, 49);
    }

    let status = server.terminate().expect("server was running");
    assert!(status.success(), "graceful shutdown failed: {status:?}");
    server.restart();
    {
        let client = server.connect("sundial").await;
        assert_eq!(
            text_rows(
                &client,
                "SELECT job_id, schedule_interval, proc_schema, proc_name, hypertable_schema, \
                 hypertable_name FROM timescaledb_information.jobs \
                 WHERE proc_name = 'policy_retention'"
            )
            .await,
            vec![vec![
                Some(job.to_string()),
                Some("1 day".to_string()),
                Some("_timescaledb_functions".to_string()),
                Some("policy_retention".to_string()),
                Some("public".to_string()),
                Some("cond".to_string()),
            ]]
        );
        let config = one(
            &client,
            "SELECT config FROM timescaledb_information.jobs WHERE hypertable_name = 'cond'",
        )
        .await
        .expect("config is not NULL");
        assert!(config.contains("30 days"), "config {config:?}");

        // the policy is active again: every policy runs once after start-up
        wait_for(
            &client,
            "SELECT count(*) FROM cond",
            "the restarted server's retention run to drop the 2020 rows",
            |r| int_at(r, 0) == Some(1),
        )
        .await;
        assert_eq!(
            one(&client, "SELECT min(v) FROM cond").await.as_deref(),
            Some("-1")
        );
        wait_for(
            &client,
            &job_stats_sql(job),
            "job_stats of the run after the restart",
            |r| int_at(r, 0).is_some_and(|n| n >= 1) && text_at(r, 2) == Some("Success"),
        )
        .await;

        // still one policy per table
        let err = client
            .simple_query("SELECT add_retention_policy('cond', drop_after => INTERVAL '30 days')")
            .await
            .expect_err("a second policy on cond must fail");
        assert_eq!(sqlstate(&err), Some("42710"), "{err:?}");

        exec(&client, "SELECT remove_retention_policy('cond')").await;
        assert_eq!(
            int_one(&client, "SELECT count(*) FROM timescaledb_information.jobs").await,
            0
        );
    }

    // the removal is durable too, even without a graceful shutdown
    server.kill9();
    server.restart();
    let client = server.connect("sundial").await;
    assert_eq!(
        int_one(&client, "SELECT count(*) FROM timescaledb_information.jobs").await,
        0
    );
    assert_eq!(
        int_one(
            &client,
            "SELECT count(*) FROM timescaledb_information.job_stats"
        )
        .await,
        0
    );
    let err = client
        .simple_query("SELECT remove_retention_policy('cond')")
        .await
        .expect_err("no policy left to remove");
    assert_eq!(sqlstate(&err), Some("42704"), "{err:?}");
    let again = int_one(
        &client,
        "SELECT add_retention_policy('cond', drop_after => INTERVAL '30 days')",
    )
    .await;
    assert!(again >= 1000, "retention job id {again}");
    assert_eq!(
        int_one(&client, "SELECT count(*) FROM timescaledb_information.jobs").await,
        1
    );
}

// ---------------------------------------------------------------------------
// drop_chunks / DELETE / TRUNCATE across restarts
// ---------------------------------------------------------------------------

/// What `deleted_rows_stay_deleted_after_restarts` leaves: d had 240 hourly rows from
/// 2024-01-01 with v = i % 10; DELETE v = 5 took 24, drop_chunks the 43 rows left on
/// 01-01/02, DELETE from 01-09 12:00 another 32, then 3 rows (v 100..102) came on
/// 01-20: 144 rows, sum 926, in 8 chunks (01-03..09 and 01-20). t2 was truncated and
/// got one row (v 7).
async fn check_deletions(client: &Client, when: &str) {
    assert_eq!(
        text_rows(
            client,
            "SELECT count(*), sum(v), min(time) = TIMESTAMPTZ '2024-01-03 00:00:00+00', \
             max(time) = TIMESTAMPTZ '2024-01-20 02:00:00+00' FROM d"
        )
        .await,
        vec![vec![
            Some("144".to_string()),
            Some("926".to_string()),
            Some("t".to_string()),
            Some("t".to_string()),
        ]],
        "table d {when}"
    );
    assert_eq!(
        int_one(client, "SELECT count(*) FROM d WHERE v = 5").await,
        0,
        "rows deleted by v = 5 {when}"
    );
    assert_eq!(
        int_one(
            client,
            "SELECT count(*) FROM d WHERE time < '2024-01-03 00:00:00+00' \
             OR (time >= '2024-01-09 12:00:00+00' AND time < '2024-01-10 00:00:00+00')"
        )
        .await,
        0,
        "dropped chunks and deleted time range {when}"
    );
    assert_eq!(
        int_one(client, "SELECT count(*) FROM show_chunks('d')").await,
        8,
        "chunks of d {when}"
    );
    assert_eq!(
        text_rows(client, "SELECT count(*), sum(v) FROM t2").await,
        vec![vec![Some("1".to_string()), Some("7".to_string())]],
        "table t2 {when}"
    );
}

#[tokio::test]
async fn deleted_rows_stay_deleted_after_restarts() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "d").await;
        create_hypertable(&client, "t2").await;
        // nothing is flushed before the deletes: the rows are in memtables and the WAL
        exec(
            &client,
            "INSERT INTO d SELECT to_timestamp(1704067200 + 3600 * i), i % 10 \
             FROM generate_series(0, 239) AS g(i)",
        )
        .await;
        exec(
            &client,
            "INSERT INTO t2 SELECT to_timestamp(1704067200 + 3600 * i), i \
             FROM generate_series(0, 99) AS g(i)",
        )
        .await;

        let n = client
            .execute("DELETE FROM d WHERE v = 5", &[])
            .await
            .expect("DELETE FROM d WHERE v = 5");
        assert_eq!(n, 24);
        let dropped = text_rows(
            &client,
            "SELECT drop_chunks('d', older_than => TIMESTAMPTZ '2024-01-03 00:00:00+00')",
        )
        .await;
        assert_eq!(dropped.len(), 2, "dropped chunks {dropped:?}");
        let n = client
            .execute("DELETE FROM d WHERE time >= '2024-01-09 12:00:00+00'", &[])
            .await
            .expect("DELETE FROM d WHERE time >= ...");
        assert_eq!(n, 32);

        // rows written after the deletes
        exec(
            &client,
            "INSERT INTO d VALUES ('2024-01-20 00:00:00+00', 100), \
             ('2024-01-20 01:00:00+00', 101), ('2024-01-20 02:00:00+00', 102)",
        )
        .await;
        exec(&client, "TRUNCATE t2").await;
        exec(
            &client,
            "INSERT INTO t2 VALUES ('2024-03-01 00:00:00+00', 7)",
        )
        .await;
        check_deletions(&client, "before any restart").await;
    }

    server.kill9();
    server.restart();
    {
        let client = server.connect("sundial").await;
        check_deletions(&client, "after kill -9").await;
    }

    let status = server.terminate().expect("server was running");
    assert!(status.success(), "graceful shutdown failed: {status:?}");
    server.restart();
    {
        let client = server.connect("sundial").await;
        check_deletions(&client, "after a graceful restart").await;
    }

    server.kill9();
    server.restart();
    let client = server.connect("sundial").await;
    check_deletions(&client, "after a second kill -9").await;
}
