//! End-to-end tests of [`super::run`] against a minimal HTTP/1.1 server on loopback
//! that records every request and answers 204, or 400 with a JSON body for bodies
//! containing the word `bad`.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::{LoadArgs, LoadError, UseCase, run};

#[derive(Debug)]
struct Seen {
    target: String,
    gzip: bool,
    body: Vec<u8>,
}

struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(connection(socket, Arc::clone(&log)));
            }
        });
        Server { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lines(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        let mut lines: Vec<String> = seen
            .iter()
            .flat_map(|s| {
                String::from_utf8(s.body.clone())
                    .unwrap()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        lines
    }
}

/// Serves one keep-alive connection until the client closes it.
async fn connection(socket: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(socket);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).await? == 0 {
            return Ok(());
        }
        let target = request_line
            .split(' ')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let (mut length, mut gzip) = (0usize, false);
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).await?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "content-encoding" => gzip = value.trim() == "gzip",
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        if gzip {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut plain)?;
            body = plain;
        }
        let bad = body.windows(3).any(|w| w == b"bad");
        let response = if bad {
            let json = r#"{"error":"unable to parse 'bad line': missing fields"}"#;
            format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
                json.len()
            )
        } else {
            seen.lock().unwrap().push(Seen { target, gzip, body });
            "HTTP/1.1 204 No Content\r\n\r\n".to_string()
        };
        reader.get_mut().write_all(response.as_bytes()).await?;
    }
}

fn small(use_case: UseCase) -> LoadArgs {
    LoadArgs {
        use_case,
        scale: 10,
        timestamp_end: "2016-01-01T01:00:00Z".into(),
        batch_size: 333,
        workers: 3,
        ..LoadArgs::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_every_generated_line_once() {
    let dir = std::env::temp_dir().join(format!("loadgen-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (use_case, gzip) in [
        (UseCase::CpuOnly, true),
        (UseCase::CpuOnly, false),
        (UseCase::Iot, true),
    ] {
        let server = Server::start().await;
        let args = LoadArgs {
            url: server.url(),
            db: "tsbs".into(),
            gzip,
            ..small(use_case)
        };
        let summary = run(args.clone()).await.unwrap();
        assert_eq!(summary.errors, 0);
        if use_case == UseCase::CpuOnly {
            assert_eq!((summary.rows, summary.metrics), (3600, 36000));
        }

        let file = dir.join("expected.lp");
        let written = run(LoadArgs {
            output: Some(file.clone()),
            ..args
        })
        .await
        .unwrap();
        assert_eq!(
            (written.rows, written.metrics, written.bytes),
            (summary.rows, summary.metrics, summary.bytes)
        );
        let mut expected: Vec<String> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        expected.sort();
        assert_eq!(server.lines(), expected);

        let seen = server.seen.lock().unwrap();
        assert_eq!(seen.len() as u64, summary.rows.div_ceil(333));
        assert!(
            seen.iter()
                .all(|s| s.target == "/write?db=tsbs&precision=ns" && s.gzip == gzip)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn rejected_batches_are_counted_and_skipped() {
    let server = Server::start().await;
    let dir = std::env::temp_dir().join(format!("loadgen-e2e-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("input.lp");
    let mut text = String::from("# comment\n");
    for i in 0..10 {
        if i == 4 || i == 9 {
            text.push_str("bad line\n");
        } else {
            text.push_str(&format!("m,t=a x={i}i,y=1 {i}\n\n"));
        }
    }
    std::fs::write(&file, text).unwrap();
    let summary = run(LoadArgs {
        url: server.url(),
        file: Some(file),
        batch_size: 2,
        workers: 2,
        ..LoadArgs::default()
    })
    .await
    .unwrap();
    // Lines 4 and 9 spoil the batches [4, 5] and [8, 9].
    assert_eq!(summary.errors, 2);
    assert_eq!((summary.rows, summary.metrics), (6, 12));
    assert_eq!(server.lines().len(), 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn unreachable_server_fails_after_retries() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let result = run(LoadArgs {
        url: format!("http://127.0.0.1:{port}"),
        limit: Some(10),
        workers: 1,
        ..LoadArgs::default()
    })
    .await;
    match result {
        Err(LoadError::Connection { attempts, .. }) => assert_eq!(attempts, 4),
        other => panic!("expected a connection error, got {other:?}"),
    }
}
