//! Durability: restarts, kill -9, damaged WAL segments, graceful shutdown.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

use crate::harness::{TestServer, text_rows};

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

/// Single value of a single-row single-column query, parsed as an integer
/// (works whether the server answers bigint or numeric).
async fn int_one(client: &Client, sql: &str) -> i128 {
    let rows = text_rows(client, sql).await;
    assert_eq!(rows.len(), 1, "{sql:?} should return one row, got {rows:?}");
    let v = rows[0][0]
        .as_deref()
        .unwrap_or_else(|| panic!("{sql:?} returned NULL"));
    v.parse::<i128>()
        .unwrap_or_else(|_| panic!("{sql:?} returned {v:?}, not an integer"))
}

fn base_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap()
}

/// Timestamp literal for row `id`, `step_secs` apart.
fn time_lit(id: i64, step_secs: i64) -> String {
    (base_time() + chrono::Duration::seconds(id * step_secs))
        .format("%Y-%m-%d %H:%M:%S+00")
        .to_string()
}

/// Creates `name (time timestamptz, id int8, v int8)` as a 1-day hypertable.
async fn create_hypertable(client: &Client, name: &str) {
    client
        .batch_execute(&format!(
            "CREATE TABLE {name} (time timestamptz NOT NULL, id int8 NOT NULL, v int8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day')"
        ))
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e:?}"));
}

fn v_of(id: i64) -> i64 {
    (id * 7) % 1000
}

/// Inserts `ids` into a table made by `create_hypertable`, `per_stmt` rows per INSERT.
async fn insert_ids(client: &Client, table: &str, ids: &[i64], step_secs: i64, per_stmt: usize) {
    for chunk in ids.chunks(per_stmt) {
        let values: Vec<String> = chunk
            .iter()
            .map(|&id| format!("('{}', {id}, {})", time_lit(id, step_secs), v_of(id)))
            .collect();
        client
            .batch_execute(&format!(
                "INSERT INTO {table} (time, id, v) VALUES {}",
                values.join(", ")
            ))
            .await
            .unwrap_or_else(|e| panic!("insert into {table}: {e:?}"));
    }
}

async fn all_ids(client: &Client, table: &str) -> Vec<i64> {
    let sql = format!("SELECT id FROM {table}");
    client
        .query(sql.as_str(), &[])
        .await
        .unwrap_or_else(|e| panic!("select ids from {table}: {e:?}"))
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .collect()
}

/// WAL segment files of a data dir, sorted by name.
fn wal_segments(data_dir: &Path) -> Vec<PathBuf> {
    let dir = data_dir.join("wal");
    let mut segs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segs.sort_by_key(|p| p.file_name().unwrap().to_os_string());
    segs
}

fn last_segment(data_dir: &Path) -> PathBuf {
    wal_segments(data_dir)
        .pop()
        .expect("at least one WAL segment in DATA_DIR/wal")
}

/// Complete records of a segment as (offset of record header, payload length).
/// Complete records of a segment as (offset, bytes after the first 8 header bytes):
/// frames are `len u32 | crc32c(seq + payload) u32 | seq u64 | payload`.
fn parse_records(bytes: &[u8]) -> Vec<(usize, usize)> {
    assert!(bytes.len() >= 8, "segment shorter than its header");
    assert_eq!(&bytes[..8], b"SUNDWAL1", "segment header");
    let mut out = Vec::new();
    let mut off = 8;
    while off + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        if len == 0 || off + 16 + len > bytes.len() {
            break;
        }
        let crc = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap());
        if crc32c::crc32c(&bytes[off + 8..off + 16 + len]) != crc {
            break;
        }
        out.push((off, len + 8));
        off += 16 + len;
    }
    out
}

fn files_with_ext(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_with_ext(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

// ---------------------------------------------------------------------------
// restart keeps every row
// ---------------------------------------------------------------------------

const N_ROWS: i64 = 10_000;
/// 90 s apart: 10k rows span 2024-01-01 .. 2024-01-11 => 11 one-day chunks.
const STEP: i64 = 90;

/// Even ids, flushed to Parquet; then odd ids, only in the WAL. Every chunk has both.
async fn load_10k(client: &Client) {
    create_hypertable(client, "dur").await;
    let even: Vec<i64> = (0..N_ROWS).step_by(2).collect();
    insert_ids(client, "dur", &even, STEP, 250).await;
    let files = int_one(client, "SELECT sundial_flush()").await;
    assert!(files >= 1, "sundial_flush() wrote {files} files");
    let listed = int_one(
        client,
        "SELECT count(*) FROM sundial_chunk_files WHERE hypertable_name = 'dur'",
    )
    .await;
    assert!(listed >= 1, "sundial_chunk_files lists the flushed files");
    let odd: Vec<i64> = (1..N_ROWS).step_by(2).collect();
    insert_ids(client, "dur", &odd, STEP, 250).await;
}

async fn check_10k(client: &Client) {
    client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
    let expected_v: i128 = (0..N_ROWS).map(|id| v_of(id) as i128).sum();
    let expected_id: i128 = (0..N_ROWS as i128).sum();
    assert_eq!(
        int_one(client, "SELECT count(*) FROM dur").await,
        N_ROWS as i128
    );
    assert_eq!(int_one(client, "SELECT sum(v) FROM dur").await, expected_v);
    assert_eq!(
        int_one(client, "SELECT sum(id) FROM dur").await,
        expected_id
    );
    assert_eq!(
        int_one(client, "SELECT count(DISTINCT id) FROM dur").await,
        N_ROWS as i128,
        "no row duplicated"
    );
    // Day 3 (2024-01-03): id*90 in [172800, 259200) => ids 1920..2880.
    assert_eq!(
        int_one(
            client,
            "SELECT count(*) FROM dur WHERE time >= '2024-01-03 00:00:00+00' \
             AND time < '2024-01-04 00:00:00+00'"
        )
        .await,
        960
    );
    assert_eq!(
        int_one(
            client,
            "SELECT count(*) FROM timescaledb_information.chunks WHERE hypertable_name = 'dur'"
        )
        .await,
        11
    );
}

#[tokio::test]
async fn restart_after_terminate_keeps_every_row() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        load_10k(&client).await;
        check_10k(&client).await;
    }
    let status = server.terminate().expect("server was running");
    assert!(
        status.success(),
        "graceful shutdown exit status: {status:?}"
    );
    server.restart();
    let client = server.connect("sundial").await;
    check_10k(&client).await;
}

/// A graceful stop whose final flush cannot write (a full disk; here `data/` is a
/// file) exits 0: the rows stay in the WAL and the next start has them.
#[tokio::test]
async fn a_stop_that_cannot_flush_exits_0_and_keeps_the_rows_in_the_wal() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "full").await;
        insert_ids(&client, "full", &[1, 2, 3], 60, 1).await;
    }
    let data = server.data_dir.join("data");
    let moved = server.data_dir.join("data.moved");
    std::fs::rename(&data, &moved).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();
    let status = server.terminate().expect("server was running");
    assert!(status.success(), "stop with a failing flush: {status:?}");
    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&moved, &data).unwrap();
    server.restart();
    let client = server.connect("sundial").await;
    let mut ids = all_ids(&client, "full").await;
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3]);
}

#[tokio::test]
async fn restart_after_kill9_keeps_every_row_and_replays_once() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        load_10k(&client).await;
    }
    server.kill9();
    server.restart();
    {
        let client = server.connect("sundial").await;
        check_10k(&client).await;
        // Flush what was replayed, then crash again: nothing may be counted twice.
        int_one(&client, "SELECT sundial_flush()").await;
    }
    server.kill9();
    server.restart();
    {
        let client = server.connect("sundial").await;
        check_10k(&client).await;
    }
    // And a crash right after a restart without any new writes.
    server.kill9();
    server.restart();
    let client = server.connect("sundial").await;
    check_10k(&client).await;
}

// ---------------------------------------------------------------------------
// kill -9 under concurrent writers
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_during_concurrent_inserts_keeps_acknowledged_rows() {
    let mut server = TestServer::start();
    {
        let setup = server.connect("sundial").await;
        setup
            .batch_execute(
                "CREATE TABLE conc (time timestamptz NOT NULL, id int8 NOT NULL, client int4) \
                 WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 hour')",
            )
            .await
            .expect("create conc");
    }
    let conn_str = server.conn_str("sundial");
    let started = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for c in 0..4i64 {
        let conn_str = conn_str.clone();
        let started = started.clone();
        handles.push(tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&conn_str, NoTls)
                .await
                .expect("writer connects");
            tokio::spawn(async move {
                let _ = conn.await;
            });
            // Clients 0 and 1: simple-protocol multi-row INSERTs (1..=3 rows).
            // Clients 2 and 3: a prepared single-row INSERT (extended protocol).
            let stmt = if c >= 2 {
                Some(
                    client
                        .prepare_typed(
                            "INSERT INTO conc (time, id, client) VALUES ($1, $2, $3)",
                            &[Type::TIMESTAMPTZ, Type::INT8, Type::INT4],
                        )
                        .await
                        .expect("prepare insert"),
                )
            } else {
                None
            };
            started.store(true, Ordering::SeqCst);
            let mut sent: Vec<i64> = Vec::new();
            let mut acked: Vec<i64> = Vec::new();
            let mut n = 0i64;
            let last_err;
            loop {
                let k = if stmt.is_some() { 1 } else { 1 + (n % 3) };
                let ids: Vec<i64> = (0..k).map(|j| c * 100_000_000 + n + j).collect();
                n += k;
                sent.extend(&ids);
                let res = match &stmt {
                    Some(stmt) => {
                        let t = base_time() + chrono::Duration::milliseconds(ids[0] % 100_000_000);
                        client
                            .execute(stmt, &[&t, &ids[0], &(c as i32)])
                            .await
                            .map(|_| ())
                    }
                    None => {
                        let values: Vec<String> = ids
                            .iter()
                            .map(|id| {
                                let t =
                                    base_time() + chrono::Duration::milliseconds(id % 100_000_000);
                                format!("('{}', {id}, {c})", t.format("%Y-%m-%d %H:%M:%S%.3f+00"))
                            })
                            .collect();
                        client
                            .batch_execute(&format!(
                                "INSERT INTO conc (time, id, client) VALUES {}",
                                values.join(", ")
                            ))
                            .await
                    }
                };
                match res {
                    Ok(()) => acked.extend(&ids),
                    Err(e) => {
                        last_err = e.to_string();
                        break;
                    }
                }
            }
            (sent, acked, last_err)
        }));
    }

    // Let the writers run for ~2 s, then pull the plug while they are mid-flight.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(started.load(Ordering::SeqCst), "writers started");
    server.kill9();

    let mut sent_all: HashSet<i64> = HashSet::new();
    let mut acked_all: Vec<i64> = Vec::new();
    for (c, h) in handles.into_iter().enumerate() {
        let (sent, acked, last_err) = tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("writer noticed the dead server")
            .expect("writer task");
        assert!(
            !acked.is_empty(),
            "writer {c} got no acknowledged insert; first error: {last_err}"
        );
        sent_all.extend(sent);
        acked_all.extend(acked);
    }

    server.restart();
    let client = server.connect("sundial").await;
    let present = all_ids(&client, "conc").await;
    let present_set: HashSet<i64> = present.iter().copied().collect();
    assert_eq!(
        present.len(),
        present_set.len(),
        "some id appears more than once after recovery"
    );
    let phantom: Vec<i64> = present_set
        .difference(&sent_all)
        .copied()
        .take(10)
        .collect();
    assert!(
        phantom.is_empty(),
        "ids never sent are present: {phantom:?}"
    );
    let lost: Vec<i64> = acked_all
        .iter()
        .filter(|id| !present_set.contains(id))
        .copied()
        .take(10)
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged ids missing after kill -9 ({} acknowledged, {} present): {lost:?}",
        acked_all.len(),
        present_set.len()
    );

    // The recovered server accepts new writes that survive another crash.
    client
        .batch_execute(
            "INSERT INTO conc (time, id, client) VALUES ('2024-01-01 00:00:00+00', -1, -1)",
        )
        .await
        .expect("insert after recovery");
    drop(client);
    server.kill9();
    server.restart();
    let client = server.connect("sundial").await;
    let again: HashSet<i64> = all_ids(&client, "conc").await.into_iter().collect();
    assert!(again.contains(&-1));
    assert_eq!(again.len(), present_set.len() + 1);
}

// ---------------------------------------------------------------------------
// damaged WAL
// ---------------------------------------------------------------------------

/// Ten INSERT statements of three rows each (ids 10*s .. 10*s+2): ten WAL records.
async fn ten_statements(client: &Client, table: &str) {
    create_hypertable(client, table).await;
    for stmt in 0..10i64 {
        let ids: Vec<i64> = (0..3).map(|j| stmt * 10 + j).collect();
        insert_ids(client, table, &ids, 600, 3).await;
    }
}

fn statement_ids(stmt: i64) -> Vec<i64> {
    (0..3).map(|j| stmt * 10 + j).collect()
}

#[tokio::test]
async fn garbage_after_last_wal_record_is_ignored() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        ten_statements(&client, "wt").await;
    }
    server.kill9();

    let seg = last_segment(&server.data_dir);
    let bytes = std::fs::read(&seg).unwrap();
    assert!(
        !parse_records(&bytes).is_empty(),
        "{} holds no complete record",
        seg.display()
    );
    // 37 garbage bytes; the first four read as a length far beyond the file.
    let garbage: Vec<u8> = (0..37u32).map(|i| (i * 73 + 0xA5) as u8 | 0x80).collect();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    std::io::Write::write_all(&mut f, &garbage).unwrap();
    drop(f);

    server
        .try_restart()
        .unwrap_or_else(|e| panic!("server must start despite a garbage WAL tail; stderr:\n{e}"));
    {
        let client = server.connect("sundial").await;
        let ids: HashSet<i64> = all_ids(&client, "wt").await.into_iter().collect();
        let want: HashSet<i64> = (0..10).flat_map(statement_ids).collect();
        assert_eq!(ids, want);
        // New writes after recovery must not end up behind the garbage.
        insert_ids(&client, "wt", &[1000, 1001], 600, 1).await;
    }
    server.kill9();
    server
        .try_restart()
        .unwrap_or_else(|e| panic!("second restart after a garbage tail failed; stderr:\n{e}"));
    let client = server.connect("sundial").await;
    let ids: HashSet<i64> = all_ids(&client, "wt").await.into_iter().collect();
    assert_eq!(ids.len(), 32, "{ids:?}");
    assert!(ids.contains(&1000) && ids.contains(&1001));
}

#[tokio::test]
async fn torn_final_wal_record_is_truncated() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        ten_statements(&client, "wt").await;
    }
    server.kill9();

    let seg = last_segment(&server.data_dir);
    let bytes = std::fs::read(&seg).unwrap();
    let recs = parse_records(&bytes);
    let &(off, len) = recs.last().expect("last segment holds a complete record");
    let end = off + 8 + len;
    // Cut the last complete record short by 5 bytes (and drop anything after it).
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len((end - 5) as u64).unwrap();
    drop(f);

    server
        .try_restart()
        .unwrap_or_else(|e| panic!("server must start despite a torn final record; stderr:\n{e}"));
    {
        let client = server.connect("sundial").await;
        let ids: HashSet<i64> = all_ids(&client, "wt").await.into_iter().collect();
        for stmt in 0..9 {
            for id in statement_ids(stmt) {
                assert!(ids.contains(&id), "id {id} of an intact record is missing");
            }
        }
        let last: Vec<bool> = statement_ids(9).iter().map(|id| ids.contains(id)).collect();
        assert!(
            last.iter().all(|&b| b) || last.iter().all(|&b| !b),
            "the last INSERT is all or nothing: {last:?}"
        );
        assert!(ids.len() == 27 || ids.len() == 30, "{ids:?}");
        insert_ids(&client, "wt", &[2000], 600, 1).await;
    }
    server.kill9();
    server
        .try_restart()
        .unwrap_or_else(|e| panic!("second restart after a torn record failed; stderr:\n{e}"));
    let client = server.connect("sundial").await;
    let ids: HashSet<i64> = all_ids(&client, "wt").await.into_iter().collect();
    assert!(
        ids.contains(&2000),
        "write after recovery survives another crash"
    );
    for id in (0..9).flat_map(statement_ids) {
        assert!(ids.contains(&id));
    }
}

#[tokio::test]
async fn corruption_in_the_middle_of_the_wal_fails_startup() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        ten_statements(&client, "wt").await;
    }
    server.kill9();

    let seg = last_segment(&server.data_dir);
    let mut bytes = std::fs::read(&seg).unwrap();
    let recs = parse_records(&bytes);
    assert!(
        recs.len() >= 2,
        "expected several records in {}, found {}",
        seg.display(),
        recs.len()
    );
    assert_eq!(recs[0].0, 8, "first record right after the segment header");
    assert!(recs[0].1 > 2, "first record payload too short to damage");
    bytes[8 + 8 + 2] ^= 0xFF;
    std::fs::write(&seg, &bytes).unwrap();

    let stderr = server
        .try_restart()
        .expect_err("a bad CRC before valid records must stop start-up");
    let name = seg.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        stderr.contains(&name),
        "stderr should name the segment {name}:\n{stderr}"
    );
    assert!(
        stderr.to_lowercase().contains("offset"),
        "stderr should give the offset:\n{stderr}"
    );
    assert!(
        stderr.contains("sundial: error:"),
        "start-up failure line `sundial: error: ...` missing:\n{stderr}"
    );
}

// ---------------------------------------------------------------------------
// graceful shutdown
// ---------------------------------------------------------------------------

#[tokio::test]
async fn sigterm_flushes_memtables_to_parquet() {
    let mut server = TestServer::start();
    let ids: Vec<i64> = (0..1000).collect();
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "g").await;
        // 259 s apart: 1000 rows span three days.
        insert_ids(&client, "g", &ids, 259, 100).await;
    }
    let status = server.terminate().expect("server was running");
    assert!(status.success(), "SIGTERM exit status: {status:?}");

    let mut parquet = Vec::new();
    files_with_ext(&server.data_dir.join("data"), "parquet", &mut parquet);
    assert!(
        !parquet.is_empty(),
        "no Parquet file under {} after graceful shutdown",
        server.data_dir.join("data").display()
    );

    server.restart();
    let client = server.connect("sundial").await;
    assert!(int_one(&client, "SELECT count(*) FROM sundial_chunk_files").await > 0);
    assert_eq!(
        int_one(
            &client,
            "SELECT sum(row_count) FROM sundial_chunk_files WHERE hypertable_name = 'g'"
        )
        .await,
        1000,
        "every row is in a Parquet file"
    );
    assert_eq!(int_one(&client, "SELECT count(*) FROM g").await, 1000);
    assert_eq!(
        int_one(&client, "SELECT sum(id) FROM g").await,
        (0..1000i128).sum::<i128>()
    );
    // Files listed by the view exist on disk.
    let rows = text_rows(
        &client,
        "SELECT file_path FROM sundial_chunk_files WHERE hypertable_name = 'g'",
    )
    .await;
    assert!(!rows.is_empty());
    for r in rows {
        let p = r[0].clone().expect("file_path not null");
        let abs = if Path::new(&p).is_absolute() {
            PathBuf::from(&p)
        } else {
            server.data_dir.join(&p)
        };
        let rel_data = server.data_dir.join("data").join(&p);
        assert!(
            abs.exists() || rel_data.exists() || parquet.iter().any(|f| f.ends_with(&p)),
            "sundial_chunk_files lists {p}, which is not on disk"
        );
    }
}

// A view is part of the catalog: it is there after a kill -9 and answers with the
// rows written before and after.
#[tokio::test]
async fn views_survive_kill9() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        client
            .batch_execute(
                "CREATE TABLE vk (time timestamptz NOT NULL, dev text, val float8) \
                 WITH (tsdb.hypertable, tsdb.partition_column='time'); \
                 INSERT INTO vk VALUES ('2024-01-01 00:00:00+00', 'a', 1), ('2024-01-01 00:01:00+00', 'b', 2); \
                 CREATE VIEW vk_sum (dev, total) AS SELECT dev, sum(val) FROM vk GROUP BY dev",
            )
            .await
            .expect("create the view");
    }
    server.kill9();
    server.restart();
    let client = server.connect("sundial").await;
    client
        .batch_execute("INSERT INTO vk VALUES ('2024-01-02 00:00:00+00', 'a', 10)")
        .await
        .expect("insert after restart");
    let rows = text_rows(&client, "SELECT dev, total FROM vk_sum ORDER BY dev").await;
    assert_eq!(
        rows,
        vec![
            vec![Some("a".to_string()), Some("11".to_string())],
            vec![Some("b".to_string()), Some("2".to_string())],
        ]
    );
}

/// WAL sequence numbers have no holes: a segment deleted from the middle of the log
/// stops start-up with an error naming the missing records, instead of silently
/// losing acknowledged rows; `--wal-accept-loss true` starts without them.
#[tokio::test]
async fn a_deleted_wal_segment_stops_startup_unless_loss_is_accepted() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "gap").await;
        insert_ids(&client, "gap", &[1, 2, 3], 60, 1).await;
    }
    // every start begins a new segment
    for ids in [[4, 5, 6], [7, 8, 9]] {
        server.kill9();
        server.restart();
        let client = server.connect("sundial").await;
        insert_ids(&client, "gap", &ids, 60, 1).await;
    }
    server.kill9();
    let segs = wal_segments(&server.data_dir);
    let with_records: Vec<&PathBuf> = segs
        .iter()
        .filter(|p| !parse_records(&std::fs::read(p).unwrap()).is_empty())
        .collect();
    assert!(
        with_records.len() >= 3,
        "three segments with records expected: {segs:?}"
    );
    std::fs::remove_file(with_records[1]).unwrap();

    let stderr = server
        .try_restart()
        .expect_err("a missing segment must stop start-up");
    assert!(
        stderr.contains("missing") && stderr.contains("sundial: error:"),
        "stderr should name the missing records:\n{stderr}"
    );
    server.add_args(&["--wal-accept-loss", "true"]);
    server
        .try_restart()
        .unwrap_or_else(|e| panic!("start with --wal-accept-loss; stderr:\n{e}"));
    let client = server.connect("sundial").await;
    let mut ids = all_ids(&client, "gap").await;
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3, 7, 8, 9]);
    // The loss was accepted once: a crash and a start without the flag go on.
    drop(client);
    server.kill9();
    server.clear_args();
    server
        .try_restart()
        .unwrap_or_else(|e| panic!("start without the flag after the accepted loss:\n{e}"));
    let client = server.connect("sundial").await;
    let mut ids = all_ids(&client, "gap").await;
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3, 7, 8, 9]);
}

/// A staging file of a chunk write that a kill -9 interrupted (`<file>.parquet#<n>`,
/// which object_store renames into place when complete) is deleted at the next start.
#[tokio::test]
async fn staging_files_left_by_a_crash_are_swept_at_start() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "stg").await;
        insert_ids(&client, "stg", &[1, 2], 60, 1).await;
        client
            .batch_execute("SELECT sundial_flush()")
            .await
            .unwrap();
    }
    server.kill9();
    let data = server.data_dir.join("data");
    let chunk = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_dir())
        .map(|e| e.path())
        .unwrap_or_else(|| data.clone());
    let staged = chunk.join("left-by-crash.parquet#1");
    std::fs::write(&staged, b"").unwrap();
    server.restart();
    assert!(!staged.exists(), "{} was not swept", staged.display());
    let client = server.connect("sundial").await;
    let mut ids = all_ids(&client, "stg").await;
    ids.sort();
    assert_eq!(ids, vec![1, 2]);
}

/// Megabytes of random bytes after the last record are a torn tail: start-up scans
/// them in linear time (it used to checksum from every offset) and keeps every row.
#[tokio::test]
async fn megabytes_of_garbage_after_the_wal_start_quickly() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        ten_statements(&client, "wg").await;
    }
    server.kill9();
    let seg = last_segment(&server.data_dir);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let garbage: Vec<u8> = (0..16 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    std::io::Write::write_all(&mut f, &garbage).unwrap();
    drop(f);
    server
        .try_restart()
        .unwrap_or_else(|e| panic!("start-up despite 16 MiB of garbage; stderr:\n{e}"));
    let client = server.connect("sundial").await;
    let ids: HashSet<i64> = all_ids(&client, "wg").await.into_iter().collect();
    let want: HashSet<i64> = (0..10).flat_map(statement_ids).collect();
    assert_eq!(ids, want);
}

/// A chunk file the catalog does not name (left by a crash between writing a file and
/// committing it, or inside the delay before replaced files are deleted) is removed at
/// start-up; the catalog's own files and their rows stay.
#[tokio::test]
async fn unreferenced_chunk_files_are_swept_at_startup() {
    let mut server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "sw").await;
        let ids: Vec<i64> = (0..100).collect();
        insert_ids(&client, "sw", &ids, 60, 50).await;
    }
    // SIGTERM flushes the memtables to Parquet
    server.terminate();
    let mut files = vec![];
    files_with_ext(&server.data_dir.join("data"), "parquet", &mut files);
    assert!(!files.is_empty(), "the flush wrote chunk files");
    let orphan = files[0]
        .parent()
        .unwrap()
        .join("00000000000099999999.parquet");
    std::fs::copy(&files[0], &orphan).unwrap();
    server.restart();
    assert!(!orphan.exists(), "the unreferenced file was deleted");
    for f in &files {
        assert!(f.exists(), "{} is the catalog's and stays", f.display());
    }
    let client = server.connect("sundial").await;
    assert_eq!(all_ids(&client, "sw").await.len(), 100);
}

// ---------------------------------------------------------------------------
// kill -9 trials
// ---------------------------------------------------------------------------

/// Rows a writer keeps sending (ids `first..`) until the server dies: the ids it
/// got an acknowledgement for, and the next id it would have sent.
struct Sent {
    acked: Vec<i64>,
    next: i64,
}

/// Line-protocol writer `w`: batches of 200 lines, one row per id, over HTTP.
async fn lp_writer(url: String, w: i64, first: i64) -> Sent {
    let client = reqwest::Client::new();
    let mut out = Sent {
        acked: vec![],
        next: first,
    };
    loop {
        let ids: Vec<i64> = (out.next..out.next + 200).collect();
        out.next += 200;
        let body: String = ids
            .iter()
            .map(|id| {
                // one microsecond per id: no two rows share series and time
                let ns = 1_704_067_200_000_000_000i64 + (w * 1_000_000_000 + id) * 1_000;
                format!("kl,w={w} seq={id}i {ns}\n")
            })
            .collect();
        match client.post(&url).body(body).send().await {
            Ok(r) if r.status().as_u16() == 204 => out.acked.extend(ids),
            _ => return out,
        }
    }
}

/// Postgres writer `w`: multi-row INSERTs of 50 ids.
async fn pg_writer(conn_str: String, w: i64, first: i64) -> Sent {
    let mut out = Sent {
        acked: vec![],
        next: first,
    };
    let Ok((client, conn)) = tokio_postgres::connect(&conn_str, NoTls).await else {
        return out;
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    loop {
        let ids: Vec<i64> = (out.next..out.next + 50).collect();
        out.next += 50;
        let values: Vec<String> = ids
            .iter()
            .map(|id| {
                let t = base_time() + chrono::Duration::microseconds(w * 1_000_000_000 + id);
                format!("('{}', {w}, {id})", t.format("%Y-%m-%d %H:%M:%S%.6f+00"))
            })
            .collect();
        let sql = format!("INSERT INTO kp (time, w, seq) VALUES {}", values.join(", "));
        match client.batch_execute(&sql).await {
            Ok(()) => out.acked.extend(ids),
            Err(_) => return out,
        }
    }
}

/// `(w, seq)` of every row of `table` with `seq >= from`, and the table's row count.
async fn rows_since(client: &Client, table: &str, from: i64) -> (Vec<(i64, i64)>, i64) {
    let rows = text_rows(
        client,
        &format!("SELECT w, seq FROM {table} WHERE seq >= {from}"),
    )
    .await;
    let pairs = rows
        .iter()
        .map(|r| {
            let n = |i: usize| -> i64 {
                r[i].as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{table}: bad row {r:?}"))
            };
            (n(0), n(1))
        })
        .collect();
    let total = int_one(client, &format!("SELECT count(*) FROM {table}")).await as i64;
    (pairs, total)
}

/// kill -9 in a loop, `SUNDIAL_KILL9_TRIALS` times (3 by default; BENCHMARKS.md has a
/// 100-trial run): two line-protocol writers over HTTP and two Postgres writers
/// write while the server flushes (256 KiB memtables) and compacts (every third
/// trial also runs `sundial_compact()`), it is killed at a point that varies, and
/// restarted on the same data directory. After each restart every acknowledged row
/// of every trial so far is there exactly once, and no row appears that was never
/// sent.
#[tokio::test]
async fn kill9_trials_with_writers_on_both_protocols() {
    let trials: u64 = std::env::var("SUNDIAL_KILL9_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut server = TestServer::start_with_env(&[
        ("SUNDIAL_FLUSH_SIZE", "256KiB"),
        ("SUNDIAL_FLUSH_AGE", "1s"),
    ]);
    server
        .connect("sundial")
        .await
        .batch_execute(
            "CREATE TABLE kp (time timestamptz NOT NULL, w int8, seq int8) \
             WITH (tsdb.hypertable, tsdb.partition_column = 'time', tsdb.chunk_interval = '10 minutes')",
        )
        .await
        .expect("create kp");
    // Next id per writer (lp 0, lp 1, pg 0, pg 1), and rows known present.
    let mut next = [0i64; 4];
    let mut present = [0i64; 2];
    let mut acked_total = 0usize;
    for trial in 0..trials {
        let url = server.http_url("/write?db=sundial");
        let conn_str = server.conn_str("sundial");
        let first = next;
        let writers = vec![
            tokio::spawn(lp_writer(url.clone(), 0, first[0])),
            tokio::spawn(lp_writer(url, 1, first[1])),
            tokio::spawn(pg_writer(conn_str.clone(), 0, first[2])),
            tokio::spawn(pg_writer(conn_str.clone(), 1, first[3])),
        ];
        // Kill after 150..1350 ms (varies with the trial), during a compaction
        // every third trial.
        let wait = Duration::from_millis(150 + (trial * 397) % 1200);
        if trial % 3 == 2 {
            let conn_str = conn_str.clone();
            tokio::spawn(async move {
                if let Ok((c, conn)) = tokio_postgres::connect(&conn_str, NoTls).await {
                    tokio::spawn(conn);
                    let _ = c
                        .batch_execute("SELECT sundial_flush(); SELECT sundial_compact()")
                        .await;
                }
            });
        }
        tokio::time::sleep(wait).await;
        server.kill9();
        let mut sent = vec![];
        for w in writers {
            sent.push(w.await.expect("writer task"));
        }
        server.restart();
        let client = server.connect("sundial").await;
        for (table, slots) in [("kl", [0usize, 1]), ("kp", [2, 3])] {
            let since = first[slots[0]].min(first[slots[1]]);
            let exists = int_one(
                &client,
                &format!(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = '{table}'"
                ),
            )
            .await;
            let (rows, total) = if exists == 1 {
                rows_since(&client, table, since).await
            } else {
                (vec![], 0)
            };
            // This trial's rows: ids from where each writer started.
            let rows: Vec<(i64, i64)> = rows
                .into_iter()
                .filter(|(w, id)| slots.get(*w as usize).is_some_and(|s| *id >= first[*s]))
                .collect();
            let mut seen = HashSet::new();
            for r in &rows {
                assert!(seen.insert(*r), "trial {trial}: {table} row {r:?} twice");
            }
            let p = if table == "kl" { 0 } else { 1 };
            assert_eq!(
                total - rows.len() as i64,
                present[p],
                "trial {trial}: {table} rows of earlier trials changed"
            );
            present[p] = total;
            for (k, slot) in slots.iter().enumerate() {
                let s = &sent[*slot];
                for id in &s.acked {
                    assert!(
                        seen.contains(&(k as i64, *id)),
                        "trial {trial}: acknowledged {table} row (w={k}, seq={id}) lost"
                    );
                }
                acked_total += s.acked.len();
                for (w, id) in &rows {
                    if *w == k as i64 {
                        assert!(
                            (first[*slot]..s.next).contains(id),
                            "trial {trial}: {table} row (w={w}, seq={id}) was never sent"
                        );
                    }
                }
                next[*slot] = s.next;
            }
        }
    }
    assert!(
        acked_total > 0,
        "no write was acknowledged in {trials} trials"
    );
    eprintln!(
        "kill -9 trials: {trials}, acknowledged rows {acked_total}, rows present {}",
        present[0] + present[1]
    );
}

/// `log_generation` of the catalog checkpoint in `dir`.
fn catalog_generation(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("catalog/manifest.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["log_generation"].as_u64().expect("log_generation")
}

#[tokio::test]
async fn catalog_changes_are_logged_not_rewritten_and_survive_kill9() {
    let mut server = TestServer::start();
    let checkpoint = server.data_dir.join("catalog/manifest.json");
    let before = std::fs::read(&checkpoint).unwrap();
    let client = server.connect("sundial").await;
    for i in 0..30 {
        create_hypertable(&client, &format!("logged_{i}")).await;
    }
    client
        .batch_execute(
            "DROP TABLE logged_3; ALTER TABLE logged_4 ADD COLUMN added int8; \
             INSERT INTO logged_5 VALUES ('2024-01-01 00:00:00+00', 1, 2); \
             SELECT sundial_flush();",
        )
        .await
        .unwrap();
    // Thirty-odd catalog changes, and the checkpoint was not written once.
    assert_eq!(std::fs::read(&checkpoint).unwrap(), before);
    let generation = catalog_generation(&server.data_dir);
    let log = server
        .data_dir
        .join(format!("catalog/manifest-{generation}.log"));
    assert!(std::fs::metadata(&log).unwrap().len() > 0);
    drop(client);

    // A torn record at the end (a change cut off by the crash) is ignored.
    server.kill9();
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&[0xff, 0xff, 0, 0, 1, 2, 3, 4, b'{', b'"']);
    std::fs::write(&log, bytes).unwrap();
    server.restart();
    let client = server.connect("sundial").await;
    assert_eq!(
        int_one(
            &client,
            "SELECT count(*) FROM information_schema.tables \
             WHERE table_name LIKE 'logged_%'"
        )
        .await,
        29
    );
    assert_eq!(int_one(&client, "SELECT v FROM logged_5").await, 2);
    assert_eq!(
        int_one(&client, "SELECT count(added) FROM logged_4").await,
        0
    );
    // The start folded the log into a new checkpoint and removed the old log.
    assert_eq!(catalog_generation(&server.data_dir), generation + 1);
    assert!(!log.exists());
    let text = std::fs::read_to_string(&checkpoint).unwrap();
    assert!(text.contains("\"added\"") && !text.contains("\"logged_3\""));
}

/// A kill -9 while UPDATEs rewrite many files leaves each UPDATE whole or absent:
/// every row carries the same count of applied UPDATEs, at least the acknowledged
/// ones and at most one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_update_keeps_old_or_new_rows() {
    let mut server = TestServer::start();
    let rows = 6_000i64;
    {
        let c = server.connect("sundial").await;
        c.batch_execute(
            "CREATE TABLE upd (time timestamptz NOT NULL, id int8 NOT NULL, v int8 NOT NULL) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 hour')",
        )
        .await
        .expect("create upd");
        // 30 chunks, two files each.
        for half in 0..2i64 {
            let values: Vec<String> = (0..rows / 2)
                .map(|i| {
                    let id = half * rows / 2 + i;
                    format!(
                        "('2024-01-01 00:00:00+00'::timestamptz + interval '{} seconds', {id}, 0)",
                        (id * 18) % 108_000
                    )
                })
                .collect();
            c.batch_execute(&format!("INSERT INTO upd VALUES {}", values.join(", ")))
                .await
                .expect("insert");
            c.batch_execute("SELECT sundial_flush()")
                .await
                .expect("flush");
        }
    }
    let conn_str = server.conn_str("sundial");
    let updater = tokio::spawn(async move {
        let (client, conn) = tokio_postgres::connect(&conn_str, NoTls)
            .await
            .expect("updater connects");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut acked = 0i64;
        while client
            .execute("UPDATE upd SET v = v + 1", &[])
            .await
            .is_ok()
        {
            acked += 1;
        }
        acked
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    server.kill9();
    let acked = tokio::time::timeout(Duration::from_secs(60), updater)
        .await
        .expect("updater noticed the dead server")
        .expect("updater task");
    server.restart();
    let c = server.connect("sundial").await;
    let row = c
        .query_one("SELECT count(*), min(v), max(v) FROM upd", &[])
        .await
        .expect("count");
    let (n, lo, hi): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(n, rows, "rows after recovery");
    assert_eq!(
        lo, hi,
        "an UPDATE was applied to some rows only ({lo}..{hi})"
    );
    assert!(
        lo == acked || lo == acked + 1,
        "{acked} UPDATEs acknowledged, rows show {lo}"
    );
}

/// Fills the file system holding `dir` with a file of zeros, to the last KiB.
fn fill_disk(dir: &Path, name: &str) {
    use std::io::Write;
    let Ok(mut f) = std::fs::File::create(dir.join(name)) else {
        return;
    };
    for size in [1 << 20, 1 << 10] {
        let block = vec![0u8; size];
        while f.write_all(&block).is_ok() {}
    }
    let _ = f.sync_all();
}

/// Unmounts a file system when the test ends (after the server, declared later,
/// is gone).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A server restarted on a full disk, with rows only in its WAL, starts: it serves
/// queries (the replayed rows included) and refuses writes with 53100 until there
/// is room again, then takes them; nothing is lost across the next restart.
/// Before, it refused to start ("cannot write catalog/manifest.json.tmp").
#[tokio::test]
async fn a_start_on_a_full_disk_serves_queries_and_takes_writes_once_there_is_room() {
    let mnt = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32m", "tmpfs"])
        .arg(mnt.path())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: a small file system needs `mount -t tmpfs` (root)");
        return;
    }
    let _unmount = Unmount(mnt.path().to_path_buf());
    let dir = mnt.path().join("data");
    let (child, pg) = crate::harness::spawn(&dir, &[]).expect("server starts");
    let mut server = TestServer::adopt(child, pg, dir);
    {
        let client = server.connect("sundial").await;
        create_hypertable(&client, "full").await;
        insert_ids(&client, "full", &[1, 2, 3], 60, 3).await;
    }
    server.kill9();
    fill_disk(mnt.path(), "fill1");
    server.restart();
    let client = server.connect("sundial").await;
    let mut ids = all_ids(&client, "full").await;
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3]);

    // Whatever the start freed is taken too: a write needs room it cannot get.
    fill_disk(mnt.path(), "fill2");
    let many = "INSERT INTO full (time, id, v) \
                SELECT to_timestamp(g * 60), g, g FROM generate_series(10, 3009) g";
    let e = client.batch_execute(many).await.err();
    assert_eq!(
        e.as_ref().and_then(|e| e.code()).map(|c| c.code()),
        Some("53100"),
        "{e:?}"
    );
    assert_eq!(all_ids(&client, "full").await.len(), 3);

    std::fs::remove_file(mnt.path().join("fill1")).unwrap();
    std::fs::remove_file(mnt.path().join("fill2")).unwrap();
    client
        .batch_execute(many)
        .await
        .expect("a write once there is room");
    assert_eq!(all_ids(&client, "full").await.len(), 3003);
    drop(client);
    let status = server.terminate().expect("server was running");
    assert!(status.success(), "{status:?}");
    server.restart();
    let client = server.connect("sundial").await;
    assert_eq!(all_ids(&client, "full").await.len(), 3003);
}

/// A sequence never hands out a value twice, even when the server is killed
/// between the values it logs ahead (PostgreSQL logs 32 ahead; so does Sundial):
/// after kill -9 the next value is above every value handed out before.
#[tokio::test]
async fn kill9_never_repeats_a_sequence_value() {
    let mut server = TestServer::start();
    let mut seen = HashSet::new();
    let mut last = 0;
    {
        let client = server.connect("sundial").await;
        client
            .batch_execute(
                "CREATE TABLE seqd (id serial PRIMARY KEY, v text); CREATE SEQUENCE seqd_s",
            )
            .await
            .expect("create");
        for _ in 0..5 {
            last = int_one(&client, "SELECT nextval('seqd_s')").await;
            assert!(seen.insert(last));
        }
        client
            .batch_execute("INSERT INTO seqd (v) VALUES ('a'), ('b'), ('c')")
            .await
            .expect("insert");
    }
    for round in 0..3 {
        server.kill9();
        server.restart();
        let client = server.connect("sundial").await;
        let next = int_one(&client, "SELECT nextval('seqd_s')").await;
        assert!(next > last, "round {round}: {next} after {last}");
        assert!(seen.insert(next));
        last = next;
        client
            .batch_execute("INSERT INTO seqd (v) VALUES ('d')")
            .await
            .expect("insert");
    }
    let client = server.connect("sundial").await;
    let ids = text_rows(&client, "SELECT id FROM seqd ORDER BY id").await;
    let ids: Vec<i128> = ids
        .iter()
        .map(|r| r[0].as_deref().and_then(|v| v.parse().ok()).expect("id"))
        .collect();
    let distinct: HashSet<i128> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 6, "{ids:?}");
    assert_eq!(&ids[..3], &[1, 2, 3]);
    assert!(ids[3] > 3, "{ids:?}");
}
