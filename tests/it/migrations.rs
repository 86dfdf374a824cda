//! A data directory written by catalog format 1 (frozen under migrations/samples/v1)
//! is upgraded on start and keeps every row.

use crate::harness::{TestServer, spawn};

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

#[tokio::test]
async fn v1_sample_upgrades() {
    let tmp = tempfile::tempdir().unwrap();
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/samples/v1");
    copy_dir(&sample, tmp.path());
    let before: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("catalog/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(before["format_version"], 1);

    let (child, addr) = spawn(tmp.path(), &[]).expect("server starts on a v1 directory");
    let server = TestServer::adopt(child, addr, tmp.path().to_path_buf());
    let client = server.connect("sundial").await;
    let rows = client
        .simple_query("SELECT host, value FROM metrics ORDER BY time")
        .await
        .unwrap();
    let got: Vec<(String, String)> = rows
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((r.get(0).unwrap().to_string(), r.get(1).unwrap().to_string()))
            }
            _ => None,
        })
        .collect();
    // three rows from Parquet files, one from the WAL
    assert_eq!(
        got,
        vec![
            ("a".into(), "1.5".into()),
            ("b".into(), "2.5".into()),
            ("a".into(), "3.5".into()),
            ("c".into(), "4.5".into()),
        ]
    );
    let after: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("catalog/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(after["format_version"], 3);
    assert_eq!(after["migrations_applied"], serde_json::json!([1, 2, 3]));
    let t = &after["databases"]["sundial"]["tables"]["metrics"];
    assert_eq!(t["chunk_interval_micros"], 86_400_000_000i64);
    // pruning still works on the upgraded statistics
    let plan = client
        .simple_query(
            "EXPLAIN SELECT * FROM metrics WHERE time >= '2023-05-02' AND time < '2023-05-03'",
        )
        .await
        .unwrap();
    let text: String = plan
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(1).map(|s| s.to_string()),
            _ => None,
        })
        .collect();
    assert!(text.contains("files_scanned=1, files_pruned=1"), "{text}");
}

/// A `numeric` column written before numeric without typmod became a 256-bit
/// decimal: its Parquet files and WAL records hold 128-bit decimals of scale 10
/// (made here by writing a `numeric(38,10)` column and renaming its type in the
/// manifest, which is what such a directory holds). Every value reads back, pruning
/// and arithmetic work, and new rows keep all their digits beside the old ones.
#[tokio::test]
async fn numeric_columns_from_128_bit_files_read_back() {
    use crate::harness::text_rows;
    let mut server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE nold (time timestamptz NOT NULL, v numeric(38,10)) \
             WITH (tsdb.hypertable, tsdb.partition_column='time'); \
             INSERT INTO nold VALUES ('2024-01-01 00:00:00+00', 12.5), \
             ('2024-01-02 00:00:00+00', -1234567890123456789012345678.0123456789); \
             SELECT sundial_flush(); \
             INSERT INTO nold VALUES ('2024-01-03 00:00:00+00', 0.0000000001);",
        )
        .await
        .unwrap();
    drop(client);
    server.kill9();
    // A start folds the change log into the checkpoint, which is what gets edited.
    server.restart();
    server.kill9();
    let manifest = server.data_dir.join("catalog/manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains("\"numeric(38,10)\""), "{text}");
    std::fs::write(&manifest, text.replace("\"numeric(38,10)\"", "\"numeric\"")).unwrap();
    server.restart();
    let client = server.connect("sundial").await;
    assert_eq!(
        text_rows(
            &client,
            "SELECT pg_typeof(v)::text, v FROM nold ORDER BY time"
        )
        .await,
        vec![
            vec![Some("numeric".into()), Some("12.5".into())],
            vec![
                Some("numeric".into()),
                Some("-1234567890123456789012345678.0123456789".into())
            ],
            vec![Some("numeric".into()), Some("0.0000000001".into())],
        ]
    );
    client
        .batch_execute(
            "INSERT INTO nold VALUES ('2024-01-04 00:00:00+00', 12345.678901234567890123); \
             SELECT sundial_flush();",
        )
        .await
        .unwrap();
    assert_eq!(
        text_rows(
            &client,
            "SELECT count(*), sum(v), max(v * 2) FROM nold WHERE v > 1"
        )
        .await,
        vec![vec![
            Some("2".into()),
            Some("12358.178901234567890123".into()),
            Some("24691.357802469135780246".into())
        ]]
    );
    assert_eq!(
        text_rows(&client, "SELECT v FROM nold WHERE v < 0").await,
        vec![vec![Some(
            "-1234567890123456789012345678.0123456789".into()
        )]]
    );
}
