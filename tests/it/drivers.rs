//! The driver matrix: the client programs in `tests/drivers/` (psycopg 3, asyncpg,
//! SQLAlchemy + pandas, node-postgres, pgjdbc, psql) run against a real server; each
//! creates a hypertable, inserts with parameters, runs time_bucket with parameters
//! and checks the client-side types. `.ci/run` installs the clients.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::TestServer;

fn drivers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/drivers")
}

/// Runs one driver program against a fresh server and fails with its output.
fn run_driver(program: &str, args: &[&str]) {
    run_driver_on(&TestServer::start(), &[], program, args);
}

/// Runs one driver program against `srv`, with extra environment variables.
pub fn run_driver_on(srv: &TestServer, env: &[(&str, &str)], program: &str, args: &[&str]) {
    let (host, port) = srv.pg_addr.rsplit_once(':').expect("host:port");
    let out = Command::new(program)
        .args(args)
        .current_dir(drivers_dir())
        .env("SUNDIAL_HOST", host)
        .env("SUNDIAL_PORT", port)
        .envs(env.iter().copied())
        .env_remove("SUNDIAL_PLAIN_PG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (does .ci/run install it?): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("passed") || stdout.contains("PASS") || stdout.contains("ok"),
        "{program} {args:?} printed no result line:\n{stdout}"
    );
}

#[test]
fn psycopg3() {
    run_driver("python3", &["psycopg_test.py"]);
}

#[test]
fn asyncpg_binary_and_prepared() {
    run_driver("python3", &["asyncpg_test.py"]);
}

#[test]
fn sqlalchemy_and_pandas() {
    run_driver("python3", &["sqlalchemy_pandas_test.py"]);
}

#[test]
fn node_postgres() {
    run_driver("node", &["node_pg_test.js"]);
}

#[test]
fn pgjdbc_switches_to_binary() {
    run_driver(
        "java",
        &["-cp", "/usr/share/java/postgresql.jar", "JdbcTest.java"],
    );
}

#[test]
fn psql_script() {
    run_driver("python3", &["run_psql.py", "basic"]);
}
