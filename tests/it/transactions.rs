//! Transaction blocks over the wire: other sessions see a block's writes only
//! after COMMIT, tokio-postgres transactions and savepoints (extended protocol),
//! the aborted state, COPY in a block, and crash safety of COMMIT.

use bytes::Bytes;
use futures::SinkExt;
use tokio_postgres::{Client, GenericClient};

use crate::harness::{TestServer, text_rows};

async fn count(c: &impl GenericClient, table: &str) -> i64 {
    let rows = c
        .query(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap_or_else(|e| panic!("count {table}: {e:?}"));
    rows[0].get(0)
}

async fn setup(c: &Client) {
    c.batch_execute(
        "CREATE TABLE a (time timestamptz NOT NULL, id int8, v float8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day'); \
         CREATE TABLE b (time timestamptz NOT NULL, id int8, v float8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day'); \
         INSERT INTO a VALUES ('2024-01-01 00:00:00+00', 1, 1.0), ('2024-01-02 00:00:00+00', 2, 2.0);",
    )
    .await
    .expect("setup");
}

fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_see_a_block_only_after_commit() {
    let server = TestServer::start();
    let c1 = server.connect("sundial").await;
    let c2 = server.connect("sundial").await;
    setup(&c1).await;
    c1.batch_execute(
        "BEGIN; INSERT INTO a VALUES ('2024-01-03 00:00:00+00', 3, 3.0); \
         DELETE FROM a WHERE id = 1; INSERT INTO b VALUES ('2024-01-03 00:00:00+00', 9, 9.0);",
    )
    .await
    .expect("block");
    assert_eq!(count(&c1, "a").await, 2, "the block sees its own writes");
    assert_eq!(count(&c1, "b").await, 1);
    assert_eq!(
        count(&c2, "a").await,
        2,
        "another session sees the old rows"
    );
    assert_eq!(
        count(&c2, "b").await,
        0,
        "another session sees no staged row"
    );
    let ids = text_rows(&c2, "SELECT id FROM a ORDER BY id").await;
    assert_eq!(ids, vec![vec![Some("1".into())], vec![Some("2".into())]]);
    c1.batch_execute("COMMIT").await.expect("commit");
    let ids = text_rows(&c2, "SELECT id FROM a ORDER BY id").await;
    assert_eq!(ids, vec![vec![Some("2".into())], vec![Some("3".into())]]);
    assert_eq!(count(&c2, "b").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_transactions_and_savepoints() {
    let server = TestServer::start();
    let mut c = server.connect("sundial").await;
    setup(&c).await;
    // Dropped without commit: rolled back.
    {
        let tx = c.transaction().await.expect("begin");
        let n = tx
            .execute(
                "INSERT INTO b VALUES ('2024-01-05 00:00:00+00', $1, $2)",
                &[&5i64, &5.0f64],
            )
            .await
            .expect("insert in tx");
        assert_eq!(n, 1);
        assert_eq!(count(&tx, "b").await, 1);
    }
    assert_eq!(count(&c, "b").await, 0, "a dropped transaction rolls back");

    let mut tx = c.transaction().await.expect("begin");
    tx.execute(
        "INSERT INTO b VALUES ('2024-01-05 00:00:00+00', 5, 5.0)",
        &[],
    )
    .await
    .expect("insert");
    {
        let sp = tx.savepoint("inner").await.expect("savepoint");
        sp.execute(
            "INSERT INTO b VALUES ('2024-01-06 00:00:00+00', 6, 6.0)",
            &[],
        )
        .await
        .expect("insert in savepoint");
        let err = sp
            .query("SELECT 1/0", &[])
            .await
            .expect_err("division by zero");
        assert_eq!(sqlstate(&err), "22012");
        let err = sp.query("SELECT 1", &[]).await.expect_err("aborted");
        assert_eq!(sqlstate(&err), "25P02", "{err:?}");
        sp.rollback().await.expect("rollback to savepoint");
    }
    assert_eq!(count(&tx, "b").await, 1, "the savepoint's row is gone");
    tx.commit().await.expect("commit");
    let ids = text_rows(&c, "SELECT id FROM b").await;
    assert_eq!(ids, vec![vec![Some("5".into())]]);

    // An error outside a savepoint fails the whole block; COMMIT answers ROLLBACK.
    c.batch_execute("BEGIN; INSERT INTO b VALUES ('2024-01-07 00:00:00+00', 7, 7.0)")
        .await
        .expect("begin");
    assert!(
        c.batch_execute("SELECT * FROM no_such_table")
            .await
            .is_err()
    );
    let err = c
        .execute(
            "INSERT INTO b VALUES ('2024-01-08 00:00:00+00', 8, 8.0)",
            &[],
        )
        .await
        .expect_err("aborted block");
    assert_eq!(sqlstate(&err), "25P02");
    let msgs = c.simple_query("COMMIT").await.expect("commit");
    let tag = msgs.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
        _ => None,
    });
    assert!(tag.is_some());
    assert_eq!(count(&c, "b").await, 1, "nothing of the failed block stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_a_block_waits_for_commit() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    setup(&c).await;
    for (end, want) in [("ROLLBACK", 0), ("COMMIT", 2)] {
        c.batch_execute("BEGIN").await.expect("begin");
        let sink = c
            .copy_in::<_, Bytes>("COPY b (time, id, v) FROM STDIN")
            .await
            .expect("copy in");
        futures::pin_mut!(sink);
        sink.send(Bytes::from_static(
            b"2024-01-01 00:00:00+00\t1\t1.5\n2024-01-01 01:00:00+00\t2\t2.5\n",
        ))
        .await
        .expect("send");
        assert_eq!(sink.finish().await.expect("finish"), 2);
        assert_eq!(count(&c, "b").await, 2, "the block sees its COPY");
        c.batch_execute(end).await.expect("end");
        assert_eq!(count(&c, "b").await, want, "after {end}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_survives_kill_9_and_an_open_block_leaves_nothing() {
    let mut server = TestServer::start();
    {
        let c = server.connect("sundial").await;
        setup(&c).await;
        // Inserts into two tables: one WAL record.
        c.batch_execute(
            "BEGIN; INSERT INTO a VALUES ('2024-01-03 00:00:00+00', 3, 3.0); \
             INSERT INTO b VALUES ('2024-01-03 00:00:00+00', 30, 3.0); COMMIT;",
        )
        .await
        .expect("insert-only block");
        // A deletion and inserts: one catalog step.
        c.batch_execute(
            "BEGIN; DELETE FROM a WHERE id = 1; \
             INSERT INTO b VALUES ('2024-01-04 00:00:00+00', 40, 4.0); COMMIT;",
        )
        .await
        .expect("mixed block");
        // Never committed.
        c.batch_execute(
            "BEGIN; INSERT INTO a VALUES ('2024-01-09 00:00:00+00', 99, 9.0); \
             DELETE FROM b;",
        )
        .await
        .expect("open block");
        server.kill9();
    }
    server.restart();
    let c = server.connect("sundial").await;
    let a = text_rows(&c, "SELECT id FROM a ORDER BY id").await;
    assert_eq!(a, vec![vec![Some("2".into())], vec![Some("3".into())]]);
    let b = text_rows(&c, "SELECT id FROM b ORDER BY id").await;
    assert_eq!(b, vec![vec![Some("30".into())], vec![Some("40".into())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_row_limits_page_through_a_result() {
    let server = TestServer::start();
    let mut c = server.connect("sundial").await;
    setup(&c).await;
    c.batch_execute(
        "INSERT INTO b SELECT time + n * interval '1 minute', n, n FROM a, \
         (SELECT unnest(array[1,2,3,4,5]) AS n) s",
    )
    .await
    .expect("rows");
    let tx = c.transaction().await.expect("begin");
    let stmt = tx
        .prepare("SELECT id FROM b ORDER BY time, id")
        .await
        .expect("prepare");
    let portal = tx.bind(&stmt, &[]).await.expect("bind");
    let mut seen = vec![];
    loop {
        let page = tx
            .query_portal(&portal, 3)
            .await
            .expect("execute with a row limit");
        assert!(page.len() <= 3, "a page holds at most the limit");
        if page.is_empty() {
            break;
        }
        seen.extend(page.iter().map(|r| r.get::<_, i64>(0)));
    }
    assert_eq!(seen.len(), 10, "every row once: {seen:?}");
    tx.commit().await.expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_takes_typed_parameters() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    setup(&c).await;
    // tokio-postgres sends the i64 in binary as the type Parse announced (int8).
    let n = c
        .execute("DELETE FROM a WHERE id = $1 AND v < $2", &[&1i64, &10.0f64])
        .await
        .expect("DELETE with typed parameters");
    assert_eq!(n, 1);
    let ids = text_rows(&c, "SELECT id FROM a").await;
    assert_eq!(ids, vec![vec![Some("2".into())]]);
}

// Several writes in one simple-protocol Query message are one implicit transaction,
// as in PostgreSQL: an error in a later statement, even one raised while its rows
// are read, rolls back the writes before it; success commits them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_statements_in_one_query_are_one_transaction() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    setup(&c).await;
    let e = c
        .batch_execute(
            "INSERT INTO a VALUES ('2024-01-03 00:00:00+00', 3, 3.0); \
             DELETE FROM a WHERE id = 1; \
             SELECT 1 / (id - 3) FROM a",
        )
        .await
        .expect_err("the division by zero fails the message");
    assert_eq!(sqlstate(&e), "22012");
    assert_eq!(count(&c, "a").await, 2, "insert and delete rolled back");
    let e = c
        .batch_execute(
            "INSERT INTO b VALUES ('2024-01-03 00:00:00+00', 3, 3.0); \
             INSERT INTO b VALUES ('2024-01-03 00:00:00+00', 'x', 3.0)",
        )
        .await
        .expect_err("the second insert fails");
    assert_eq!(sqlstate(&e), "22P02");
    assert_eq!(count(&c, "b").await, 0, "the first insert rolled back");
    // The session is not left in a failed block.
    c.batch_execute(
        "INSERT INTO b VALUES ('2024-01-04 00:00:00+00', 4, 4.0); \
         DELETE FROM a WHERE id = 2; \
         SELECT count(*) FROM b",
    )
    .await
    .expect("a message that succeeds");
    assert_eq!(count(&c, "b").await, 1);
    assert_eq!(count(&c, "a").await, 1);
    // Another session sees the committed result.
    let other = server.connect("sundial").await;
    assert_eq!(count(&other, "b").await, 1);
}

/// Prepared UPDATE and upsert statements with parameters (extended protocol, as
/// drivers send them), RETURNING rows typed as the table's columns, inside
/// tokio-postgres transactions: ROLLBACK leaves the rows as they were, COMMIT
/// applies every change, and another session sees the result only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_update_and_upsert_in_transactions() {
    let server = TestServer::start();
    let mut c1 = server.connect("sundial").await;
    let c2 = server.connect("sundial").await;
    c1.batch_execute(
        "CREATE TABLE kv (time timestamptz NOT NULL, dev text NOT NULL, v float8, \
             PRIMARY KEY (dev, time)) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day'); \
         INSERT INTO kv VALUES ('2024-01-01 00:00:00+00', 'a', 1), ('2024-01-02 00:00:00+00', 'b', 2);",
    )
    .await
    .expect("setup");
    let t: chrono::DateTime<chrono::Utc> = "2024-01-01T00:00:00Z".parse().expect("time");
    let upsert = "INSERT INTO kv VALUES ($1, $2, $3) ON CONFLICT (dev, time) \
                  DO UPDATE SET v = excluded.v + kv.v RETURNING dev, v";
    let update = "UPDATE kv SET v = v * $1 WHERE dev = $2 RETURNING v";

    // Rolled back: nothing changes.
    {
        let tx = c1.transaction().await.expect("begin");
        let rows = tx
            .query(upsert, &[&t, &"a", &10.0f64])
            .await
            .expect("upsert in block");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, f64>(1), 11.0);
        let rows = tx.query(update, &[&2.0f64, &"b"]).await.expect("update");
        assert_eq!(rows[0].get::<_, f64>(0), 4.0);
        let seen = tx
            .query("SELECT v FROM kv ORDER BY dev", &[])
            .await
            .expect("read in block");
        let vs: Vec<f64> = seen.iter().map(|r| r.get(0)).collect();
        assert_eq!(vs, vec![11.0, 4.0], "the block sees its own changes");
        let other: Vec<f64> = c2
            .query("SELECT v FROM kv ORDER BY dev", &[])
            .await
            .expect("other session")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(other, vec![1.0, 2.0], "other sessions do not");
        tx.rollback().await.expect("rollback");
    }
    let after: Vec<f64> = c1
        .query("SELECT v FROM kv ORDER BY dev", &[])
        .await
        .expect("read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(after, vec![1.0, 2.0], "ROLLBACK left the rows");

    // Committed: every change is there, for every session.
    {
        let tx = c1.transaction().await.expect("begin");
        tx.query(upsert, &[&t, &"a", &10.0f64])
            .await
            .expect("upsert");
        tx.query(upsert, &[&t, &"c", &5.0f64])
            .await
            .expect("insert");
        tx.query(update, &[&3.0f64, &"b"]).await.expect("update");
        tx.commit().await.expect("commit");
    }
    let rows = c2
        .query("SELECT dev, v FROM kv ORDER BY dev", &[])
        .await
        .expect("other session after commit");
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![("a".into(), 11.0), ("b".into(), 6.0), ("c".into(), 5.0)]
    );

    // A key taken twice in one block fails at COMMIT with 23505 and applies nothing.
    {
        let tx = c1.transaction().await.expect("begin");
        tx.execute("INSERT INTO kv VALUES ($1, $2, $3)", &[&t, &"a", &0.0f64])
            .await
            .expect("staged insert");
        tx.execute("DELETE FROM kv WHERE dev = 'c'", &[])
            .await
            .expect("staged delete");
        let e = tx.commit().await.expect_err("duplicate key");
        assert_eq!(sqlstate(&e), "23505", "{e:?}");
    }
    let _ = c1.batch_execute("ROLLBACK").await;
    assert_eq!(
        count(&c2, "kv").await,
        3,
        "the failed COMMIT applied nothing"
    );
}

async fn flag(c: &tokio_postgres::Client, sql: &str) -> bool {
    c.query_one(sql, &[]).await.expect(sql).get::<_, bool>(0)
}

/// Advisory locks, as migration tools take them, are exclusive between sessions:
/// a second session's try fails and its lock waits until the first unlocks; a
/// session's locks go when it disconnects, a transaction's at COMMIT.
#[tokio::test]
async fn advisory_locks_are_exclusive_between_sessions() {
    let server = TestServer::start();
    let a = server.connect("sundial").await;
    let b = server.connect("sundial").await;
    a.batch_execute("SELECT pg_advisory_lock(42)")
        .await
        .expect("lock");
    assert!(!flag(&b, "SELECT pg_try_advisory_lock(42)").await);
    // Another key, and the two-integer key space, are free.
    assert!(flag(&b, "SELECT pg_try_advisory_lock(43)").await);
    assert!(flag(&b, "SELECT pg_try_advisory_lock(0, 42)").await);
    let waiter = tokio::spawn(async move {
        b.batch_execute("SELECT pg_advisory_lock(42)")
            .await
            .expect("wait");
        b
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the second lock waits for the first");
    assert!(flag(&a, "SELECT pg_advisory_unlock(42)").await);
    let b = waiter.await.expect("waiter");
    assert!(!flag(&a, "SELECT pg_try_advisory_lock(42)").await);
    assert!(
        !flag(&a, "SELECT pg_advisory_unlock(42)").await,
        "a does not hold it"
    );
    // Shared locks share; an exclusive one waits for them.
    assert!(flag(&a, "SELECT pg_try_advisory_lock_shared(7)").await);
    assert!(flag(&b, "SELECT pg_try_advisory_lock_shared(7)").await);
    assert!(!flag(&b, "SELECT pg_try_advisory_lock(7)").await);
    drop(b);
    // b's session ended: its locks went with it.
    let mut free = false;
    for _ in 0..400 {
        if flag(&a, "SELECT pg_try_advisory_lock(42)").await {
            free = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(free, "a disconnected session's lock is released");
    // Transaction-level: held until COMMIT.
    let c = server.connect("sundial").await;
    a.batch_execute("BEGIN; SELECT pg_advisory_xact_lock(99)")
        .await
        .expect("xact lock");
    assert!(!flag(&c, "SELECT pg_try_advisory_lock(99)").await);
    a.batch_execute("COMMIT").await.expect("commit");
    assert!(flag(&c, "SELECT pg_try_advisory_lock(99)").await);
}

/// A client that goes away inside a block rolls it back, DDL included: the column
/// and sequence it added are gone, as PostgreSQL ends such a session.
#[tokio::test]
async fn a_disconnect_inside_a_block_undoes_its_ddl() {
    let server = TestServer::start();
    let a = server.connect("sundial").await;
    a.batch_execute("CREATE TABLE dis (id int, v text); INSERT INTO dis VALUES (1, 'x')")
        .await
        .expect("setup");
    let b = server.connect("sundial").await;
    b.batch_execute(
        "BEGIN; ALTER TABLE dis ADD COLUMN extra int; CREATE SEQUENCE dis_seq; INSERT INTO dis VALUES (2, 'y', 3)",
    )
    .await
    .expect("block");
    drop(b);
    let mut gone = false;
    for _ in 0..400 {
        let cols = text_rows(
            &a,
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'dis'",
        )
        .await;
        if cols == vec![vec![Some("2".to_string())]] {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(gone, "the block's column is gone after the disconnect");
    let rows = text_rows(&a, "SELECT * FROM dis").await;
    assert_eq!(
        rows,
        vec![vec![Some("1".to_string()), Some("x".to_string())]]
    );
    let err = a
        .batch_execute("SELECT nextval('dis_seq')")
        .await
        .expect_err("the block's sequence is gone");
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("42P01"));
}
