//! Starts a real `sundial` server on an ephemeral port with a temporary data directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server process; killed on drop.
pub struct TestServer {
    pub child: Option<Child>,
    pub pg_addr: String,
    /// `http=` address from the READY line (line protocol / InfluxDB-compatible HTTP port).
    pub http_addr: Option<String>,
    /// `tcp=` address from the READY line (raw line-protocol TCP listener, if enabled).
    pub tcp_addr: Option<String>,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    extra_env: Vec<(String, String)>,
    extra_args: Vec<String>,
}

/// Listener addresses a server reports in its `SUNDIAL READY` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addrs {
    pub pg: String,
    pub http: Option<String>,
    pub tcp: Option<String>,
}

impl Addrs {
    /// Parses the tokens after `SUNDIAL READY`: `pg=A [http=B] [tcp=C]` (any order;
    /// unknown tokens are ignored). None if there is no `pg=`.
    pub fn parse(tokens: &str) -> Option<Addrs> {
        let mut out = Addrs::default();
        for tok in tokens.split_whitespace() {
            match tok.split_once('=') {
                Some(("pg", a)) => out.pg = a.to_string(),
                Some(("http", a)) => out.http = Some(a.to_string()),
                Some(("tcp", a)) => out.tcp = Some(a.to_string()),
                _ => {}
            }
        }
        if out.pg.is_empty() { None } else { Some(out) }
    }
}

impl TestServer {
    /// Starts a server with a fresh temporary data directory.
    pub fn start() -> TestServer {
        Self::start_with_env(&[])
    }

    /// Starts a server with a fresh temporary data directory and extra `SUNDIAL_*` env vars.
    pub fn start_with_env(env: &[(&str, &str)]) -> TestServer {
        Self::start_with_args(&[], env)
    }

    /// Starts a server with a fresh temporary data directory, extra `serve` CLI arguments
    /// (e.g. `&["--tcp-addr", "127.0.0.1:0"]`) and extra env vars. Both are reused by
    /// [`TestServer::restart`].
    pub fn start_with_args(args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (child, addrs) = spawn_with_args(&dir, &args, &env).expect("server starts");
        TestServer {
            child: Some(child),
            pg_addr: addrs.pg,
            http_addr: addrs.http,
            tcp_addr: addrs.tcp,
            data_dir: dir,
            _tmp: Some(tmp),
            extra_env: env,
            extra_args: args,
        }
    }

    /// `http://{http_addr}{path_and_query}`; panics if the server reported no `http=`.
    pub fn http_url(&self, path_and_query: &str) -> String {
        let addr = self
            .http_addr
            .as_deref()
            .expect("server did not report an http= address in its READY line");
        format!("http://{addr}{path_and_query}")
    }

    fn set_addrs(&mut self, addrs: Addrs) {
        self.pg_addr = addrs.pg;
        self.http_addr = addrs.http;
        self.tcp_addr = addrs.tcp;
    }

    /// Connection string for tokio-postgres.
    pub fn conn_str(&self, db: &str) -> String {
        let (host, port) = self.pg_addr.rsplit_once(':').expect("host:port");
        format!("host={host} port={port} user=tester dbname={db}")
    }

    /// Connects with tokio-postgres to `db` and spawns the connection task.
    pub async fn connect(&self, db: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.conn_str(db), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    /// Sends SIGKILL and waits for the process to die.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits for a graceful exit; returns the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        c.wait().ok()
    }

    /// Starts the server again on the same data directory (after kill9/terminate).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server first");
        let (child, addrs) = spawn_with_args(&self.data_dir, &self.extra_args, &self.extra_env)
            .expect("server restarts");
        self.child = Some(child);
        self.set_addrs(addrs);
    }

    /// Forgets every extra argument given so far.
    pub fn clear_args(&mut self) {
        self.extra_args.clear();
    }

    /// Adds `serve` arguments for the next (re)start.
    pub fn add_args(&mut self, args: &[&str]) {
        self.extra_args.extend(args.iter().map(|a| a.to_string()));
    }

    /// Tries to start on the same data dir; returns stderr on failure.
    pub fn try_restart(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "stop the server first");
        let (child, addrs) = spawn_with_args(&self.data_dir, &self.extra_args, &self.extra_env)?;
        self.child = Some(child);
        self.set_addrs(addrs);
        Ok(())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Path of the server binary built by cargo for this test run.
pub fn server_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sundial")
}

/// Spawns `sundial serve` on `dir`; waits for the READY line and returns the pg address.
/// Err carries stderr on failure.
pub fn spawn(dir: &Path, env: &[(String, String)]) -> Result<(Child, String), String> {
    spawn_with_args(dir, &[], env).map(|(child, addrs)| (child, addrs.pg))
}

/// Like [`spawn`], with extra `serve` arguments; returns every address of the READY line.
pub fn spawn_with_args(
    dir: &Path,
    args: &[String],
    env: &[(String, String)],
) -> Result<(Child, Addrs), String> {
    let mut cmd = Command::new(server_bin());
    cmd.arg("serve").arg("--data-dir").arg(dir);
    // Ephemeral loopback ports unless the test names its own.
    for flag in ["--pg-addr", "--http-addr"] {
        if !args.iter().any(|a| a == flag) {
            cmd.arg(flag).arg("127.0.0.1:0");
        }
    }
    cmd.args(args)
        .env("SUNDIAL_LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    let ready = line
                        .trim()
                        .strip_prefix("SUNDIAL READY ")
                        .and_then(Addrs::parse);
                    if let Some(addrs) = ready {
                        let _ = tx.send(Some(addrs));
                        // keep draining stdout so the server never blocks on a full pipe
                        let mut sink = String::new();
                        while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                            sink.clear();
                        }
                        return;
                    }
                }
            }
        }
    });
    let stderr = child.stderr.take().expect("stderr");
    let (etx, erx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut all = String::new();
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if all.len() < 64 * 1024 {
                all.push_str(&line);
            }
            line.clear();
        }
        let _ = etx.send(all);
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(Some(addrs)) => Ok((child, addrs)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            let err = erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
            Err(err)
        }
    }
}

impl TestServer {
    /// Wraps a server started with [`spawn`] on a directory the test owns
    /// (only the pg address is known; http/tcp stay None).
    pub fn adopt(child: Child, pg_addr: String, data_dir: PathBuf) -> TestServer {
        TestServer {
            child: Some(child),
            pg_addr,
            http_addr: None,
            tcp_addr: None,
            data_dir,
            _tmp: None,
            extra_env: vec![],
            extra_args: vec![],
        }
    }
}

/// Rows of a simple-protocol (text) result, all statements concatenated.
pub async fn text_rows(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let msgs = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("simple_query {sql:?} failed: {e:?}"));
    let mut out = Vec::new();
    for m in msgs {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    out
}

/// The physical plan EXPLAIN gives for `sql`, one line per node.
pub async fn physical_plan(client: &tokio_postgres::Client, sql: &str) -> String {
    text_rows(client, &format!("EXPLAIN {sql}"))
        .await
        .iter()
        .filter(|r| r[0].as_deref() == Some("physical_plan"))
        .filter_map(|r| r[1].clone())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Rows as text, `NULL` for a NULL.
pub fn cells(rows: Vec<Vec<Option<String>>>) -> Vec<Vec<String>> {
    rows.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}
