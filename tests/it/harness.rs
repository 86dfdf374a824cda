//! Starts a real `sundial` server on an ephemeral port with a temporary data directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server process; killed on drop.
pub struct TestServer {
    pub child: Option<Child>,
    pub pg_addr: String,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    extra_env: Vec<(String, String)>,
}

impl TestServer {
    /// Starts a server with a fresh temporary data directory.
    pub fn start() -> TestServer {
        Self::start_with_env(&[])
    }

    /// Starts a server with a fresh temporary data directory and extra `SUNDIAL_*` env vars.
    pub fn start_with_env(env: &[(&str, &str)]) -> TestServer {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (child, addr) = spawn(&dir, &env).expect("server starts");
        TestServer {
            child: Some(child),
            pg_addr: addr,
            data_dir: dir,
            _tmp: Some(tmp),
            extra_env: env,
        }
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
        let (child, addr) = spawn(&self.data_dir, &self.extra_env).expect("server restarts");
        self.child = Some(child);
        self.pg_addr = addr;
    }

    /// Tries to start on the same data dir; returns stderr on failure.
    pub fn try_restart(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "stop the server first");
        let (child, addr) = spawn(&self.data_dir, &self.extra_env)?;
        self.child = Some(child);
        self.pg_addr = addr;
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

/// Spawns `sundial serve` on `dir`; waits for the READY line. Err carries stderr on failure.
pub fn spawn(dir: &Path, env: &[(String, String)]) -> Result<(Child, String), String> {
    let mut cmd = Command::new(server_bin());
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(dir)
        .arg("--pg-addr")
        .arg("127.0.0.1:0")
        .arg("--http-addr")
        .arg("127.0.0.1:0")
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
                    if let Some(rest) = line.trim().strip_prefix("SUNDIAL READY pg=") {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        let _ = tx.send(Some(addr));
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
        Ok(Some(addr)) => Ok((child, addr)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            let err = erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
            Err(err)
        }
    }
}

impl TestServer {
    /// Wraps a server started with [`spawn`] on a directory the test owns.
    pub fn adopt(child: Child, pg_addr: String, data_dir: PathBuf) -> TestServer {
        TestServer {
            child: Some(child),
            pg_addr,
            data_dir,
            _tmp: None,
            extra_env: vec![],
        }
    }
}
