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
    assert_eq!(after["format_version"], 2);
    assert_eq!(after["migrations_applied"], serde_json::json!([1, 2]));
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
