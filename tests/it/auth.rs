//! Authentication and TLS over the wire: SCRAM-SHA-256 and md5 logins with
//! tokio-postgres and psql, roles made with CREATE ROLE, PostgreSQL's FATAL codes
//! (28P01, 28000, 3D000), HTTP credentials from the same roles, TLS on both ports
//! with a certificate made for the test, and the settings that refuse to start.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{TestServer, cells, spawn_with_args, text_rows};

const PASSWORD: &str = "correct horse";

fn conn_str(srv: &TestServer, user: &str, password: &str, db: &str) -> String {
    let (host, port) = srv.pg_addr.rsplit_once(':').expect("host:port");
    format!("host={host} port={port} user={user} password='{password}' dbname={db}")
}

async fn connect(
    srv: &TestServer,
    user: &str,
    password: &str,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) =
        tokio_postgres::connect(&conn_str(srv, user, password, db), tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The SQLSTATE a failed connection attempt got.
async fn login_error(srv: &TestServer, user: &str, password: &str, db: &str) -> String {
    match connect(srv, user, password, db).await {
        Ok(_) => panic!("{user}/{password} on {db} logged in"),
        Err(e) => e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| format!("no server error: {e}")),
    }
}

fn server(env: &[(&str, &str)]) -> TestServer {
    TestServer::start_with_env(env)
}

async fn check_roles_and_logins(srv: &TestServer) {
    let admin = connect(srv, "sundial", PASSWORD, "sundial")
        .await
        .expect("superuser logs in");
    assert_eq!(
        login_error(srv, "sundial", "wrong", "sundial").await,
        "28P01"
    );
    assert_eq!(
        login_error(srv, "nobody", PASSWORD, "sundial").await,
        "28P01"
    );
    assert_eq!(
        login_error(srv, "sundial", PASSWORD, "no_such_db").await,
        "3D000"
    );

    admin
        .batch_execute(
            "CREATE ROLE reader LOGIN PASSWORD 'r-pass';
             CREATE USER writer WITH PASSWORD 'w-pass' CREATEDB;
             CREATE ROLE group_only;",
        )
        .await
        .expect("create roles");
    assert_eq!(sql_error(&admin, "CREATE ROLE reader").await, "42710");

    let rows = admin
        .query(
            "SELECT rolname, rolsuper, rolcanlogin, rolcreatedb FROM pg_roles \
             WHERE rolname NOT LIKE 'pg\\_%' ORDER BY rolname",
            &[],
        )
        .await
        .expect("pg_roles");
    let got: Vec<(String, bool, bool, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("group_only".into(), false, false, false),
            ("reader".into(), false, true, false),
            ("sundial".into(), true, true, true),
            ("writer".into(), false, true, true),
        ]
    );
    let verifier: String = admin
        .query_one(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'reader'",
            &[],
        )
        .await
        .expect("pg_authid")
        .get(0);
    assert!(verifier.starts_with("SCRAM-SHA-256$4096:"), "{verifier}");
    assert!(!verifier.contains("r-pass"));

    let reader = connect(srv, "reader", "r-pass", "sundial")
        .await
        .expect("reader logs in");
    let who: String = reader
        .query_one("SELECT current_user", &[])
        .await
        .expect("current_user")
        .get(0);
    assert_eq!(who, "reader");
    assert_eq!(
        sql_error(&reader, "CREATE ROLE sneaky SUPERUSER").await,
        "42501"
    );
    // Only superusers see password verifiers.
    let hidden: Option<String> = reader
        .query_one(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'sundial'",
            &[],
        )
        .await
        .expect("pg_authid as reader")
        .get(0);
    assert_eq!(hidden, None);
    // A role may change its own password.
    reader
        .batch_execute("ALTER ROLE reader PASSWORD 'r-pass-2'")
        .await
        .expect("own password");
    assert_eq!(
        login_error(srv, "reader", "r-pass", "sundial").await,
        "28P01"
    );
    connect(srv, "reader", "r-pass-2", "sundial")
        .await
        .expect("new password");

    // CONNECTION LIMIT counts the role's open sessions.
    admin
        .batch_execute("ALTER ROLE reader CONNECTION LIMIT 2")
        .await
        .expect("limit");
    // The session dropped above may take a moment to leave the server's count.
    let mut second = connect(srv, "reader", "r-pass-2", "sundial").await;
    for _ in 0..100 {
        if second.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        second = connect(srv, "reader", "r-pass-2", "sundial").await;
    }
    let second = second.expect("second session");
    assert_eq!(
        login_error(srv, "reader", "r-pass-2", "sundial").await,
        "53300"
    );
    drop(second);
    // -1 is PostgreSQL's "no limit"; below it is 22023.
    admin
        .batch_execute("ALTER ROLE reader CONNECTION LIMIT -1")
        .await
        .expect("no limit");
    connect(srv, "reader", "r-pass-2", "sundial")
        .await
        .expect("third session");
    assert_eq!(
        cells(
            text_rows(
                &admin,
                "SELECT rolconnlimit FROM pg_roles WHERE rolname = 'reader'"
            )
            .await
        ),
        vec![vec!["-1"]]
    );
    let e = admin
        .batch_execute("CREATE ROLE limited LOGIN CONNECTION LIMIT -2")
        .await
        .err();
    assert_eq!(
        e.as_ref().and_then(|e| e.code()).map(|c| c.code()),
        Some("22023"),
        "{e:?}"
    );
    admin
        .batch_execute("CREATE ROLE unlimited WITH LOGIN CONNECTION LIMIT -1 PASSWORD 'u'")
        .await
        .expect("CONNECTION LIMIT -1 in CREATE ROLE");

    assert_eq!(login_error(srv, "group_only", "", "sundial").await, "28P01");
    admin
        .batch_execute("ALTER ROLE group_only LOGIN PASSWORD 'g'; ALTER ROLE writer NOLOGIN")
        .await
        .expect("alter roles");
    connect(srv, "group_only", "g", "sundial")
        .await
        .expect("group_only may log in now");
    assert_eq!(
        login_error(srv, "writer", "w-pass", "sundial").await,
        "28P01"
    );

    assert_eq!(sql_error(&admin, "DROP ROLE sundial").await, "55006");
    admin
        .batch_execute("DROP ROLE group_only; DROP USER IF EXISTS writer, ghost")
        .await
        .expect("drop roles");
    assert_eq!(
        login_error(srv, "group_only", "g", "sundial").await,
        "28P01"
    );
    assert_eq!(sql_error(&admin, "DROP ROLE ghost").await, "42704");
}

#[tokio::test]
async fn scram_logins_and_roles() {
    let mut srv = server(&[("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD)]);
    check_roles_and_logins(&srv).await;
    // Roles and their passwords are in the catalog: they survive a restart.
    srv.terminate();
    srv.restart();
    connect(&srv, "reader", "r-pass-2", "sundial")
        .await
        .expect("reader after restart");
    assert_eq!(
        login_error(&srv, "reader", "r-pass", "sundial").await,
        "28P01"
    );
}

#[tokio::test]
async fn md5_logins() {
    let srv = server(&[
        ("SUNDIAL_AUTH", "md5"),
        ("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD),
    ]);
    check_roles_and_logins(&srv).await;
}

#[tokio::test]
async fn psql_logs_in_with_scram_and_is_refused_a_wrong_password() {
    let srv = server(&[("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD)]);
    let (host, port) = srv.pg_addr.rsplit_once(':').expect("host:port");
    let psql = |password: &str| {
        Command::new("psql")
            .args([
                "-h", host, "-p", port, "-U", "sundial", "-d", "sundial", "-XAtc",
            ])
            .arg("SELECT current_user")
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("psql runs")
    };
    let ok = psql(PASSWORD);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "sundial");
    let bad = psql("nope");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("password authentication failed for user \"sundial\""),
        "{err}"
    );
}

async fn http_status(url: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let client = reqwest::Client::new();
    let mut req = client.post(url).body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("http").status().as_u16()
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[tokio::test]
async fn http_writes_use_the_same_roles() {
    let srv = server(&[("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD)]);
    let admin = connect(&srv, "sundial", PASSWORD, "sundial")
        .await
        .expect("login");
    admin
        .batch_execute(
            "CREATE ROLE agent LOGIN PASSWORD 'agent-pw'; GRANT CREATE ON DATABASE sundial TO agent",
        )
        .await
        .expect("create role");
    let write = |q: &str| srv.http_url(&format!("/write?db=sundial{q}"));
    let line = |n: i64| {
        format!(
            "m,host=a v={n} {}",
            1_700_000_000_000_000_000 + n * 1_000_000_000
        )
    };
    let good = basic("agent", "agent-pw");
    let wrong = basic("agent", "nope");
    assert_eq!(http_status(&write(""), &[], &line(1)).await, 401);
    assert_eq!(
        http_status(&write(""), &[("Authorization", &wrong)], &line(2)).await,
        401
    );
    assert_eq!(
        http_status(&write("&u=agent&p=nope"), &[], &line(3)).await,
        401
    );
    assert_eq!(
        http_status(&write(""), &[("Authorization", &good)], &line(4)).await,
        204
    );
    // Again: the verified password is remembered, and still checked.
    assert_eq!(
        http_status(&write(""), &[("Authorization", &good)], &line(5)).await,
        204
    );
    assert_eq!(
        http_status(&write("&u=agent&p=agent-pw"), &[], &line(6)).await,
        204
    );
    let token = "Token agent:agent-pw";
    let v2 = srv.http_url("/api/v2/write?bucket=sundial&org=x");
    assert_eq!(
        http_status(&v2, &[("Authorization", token)], &line(7)).await,
        204
    );
    // A changed password stops the old one at once.
    admin
        .batch_execute("ALTER ROLE agent PASSWORD 'new-pw'")
        .await
        .expect("alter");
    assert_eq!(
        http_status(&write(""), &[("Authorization", &good)], &line(8)).await,
        401
    );
    let n: i64 = admin
        .query_one("SELECT count(*) FROM m", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 4);

    // /metrics needs credentials; /health and /ping are open by default.
    let get = |path: &str, auth: Option<&str>| {
        let url = srv.http_url(path);
        let auth = auth.map(str::to_string);
        async move {
            let mut req = reqwest::Client::new().get(url);
            if let Some(a) = auth {
                req = req.header("Authorization", a);
            }
            req.send().await.expect("get").status().as_u16()
        }
    };
    assert_eq!(get("/metrics", None).await, 401);
    assert_eq!(
        get("/metrics", Some(&basic("sundial", PASSWORD))).await,
        200
    );
    assert_eq!(get("/health", None).await, 200);
    assert_eq!(get("/ping", None).await, 204);
}

#[tokio::test]
async fn the_api_token_is_the_superuser_and_does_not_open_postgres() {
    let srv = server(&[
        ("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD),
        ("SUNDIAL_HTTP_AUTH_TOKEN", "tok-123"),
    ]);
    let url = srv.http_url("/api/v2/write?bucket=sundial&org=x");
    assert_eq!(
        http_status(&url, &[("Authorization", "Token tok-123")], "m v=1 1").await,
        204
    );
    assert_eq!(
        http_status(&url, &[("Authorization", "Token tok-12")], "m v=1 2").await,
        401
    );
    // The token is no Postgres password, and the Postgres port asks for one.
    assert_eq!(
        login_error(&srv, "sundial", "tok-123", "sundial").await,
        "28P01"
    );
    assert_eq!(login_error(&srv, "sundial", "", "sundial").await, "28P01");
}

/// Starting fails with a message containing `want`.
fn refuses_to_start(args: &[&str], env: &[(&str, &str)], want: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match spawn_with_args(dir.path(), &args, &env) {
        Ok((mut child, _)) => {
            let _ = child.kill();
            panic!("server started with {args:?} {env:?}");
        }
        Err(stderr) => assert!(stderr.contains(want), "{want:?} not in: {stderr}"),
    }
}

#[test]
fn unsafe_settings_refuse_to_start() {
    // trust on an address others can reach
    refuses_to_start(
        &["--pg-addr", "0.0.0.0:0"],
        &[],
        "is not a loopback address",
    );
    // an empty secret
    refuses_to_start(
        &[],
        &[("SUNDIAL_HTTP_AUTH_TOKEN", "")],
        "http_auth_token is empty",
    );
    // a token that would leave the Postgres port open
    refuses_to_start(
        &[],
        &[("SUNDIAL_HTTP_AUTH_TOKEN", "tok")],
        "http_auth_token needs auth",
    );
    // password authentication with no password anywhere
    refuses_to_start(
        &[],
        &[("SUNDIAL_AUTH", "scram-sha-256")],
        "no role has a password",
    );
    // TLS half-configured
    refuses_to_start(
        &["--tls-cert", "/nonexistent.pem"],
        &[],
        "tls_cert and tls_key go together",
    );
    refuses_to_start(
        &[
            "--tls-cert",
            "/nonexistent.pem",
            "--tls-key",
            "/nonexistent.key",
        ],
        &[],
        "/nonexistent.pem",
    );
}

#[test]
fn remote_trust_starts_when_allowed() {
    let srv = TestServer::start_with_args(
        &["--pg-addr", "0.0.0.0:0", "--allow-remote-trust", "true"],
        &[],
    );
    assert!(srv.pg_addr.contains(':'));
}

/// A CA and a server certificate for 127.0.0.1 and localhost, written to `dir`:
/// (ca.pem, server.pem, server.key).
fn make_certs(dir: &Path) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sundial test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca cert");
    let key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca, &ca_key).expect("server cert");
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write pem");
        p.display().to_string()
    };
    (
        write("ca.pem", ca.pem()),
        write("server.pem", cert.pem()),
        write("server.key", key.serialize_pem()),
    )
}

/// Runs `SELECT 1` through psql with libpq's SSL settings; (ok, stderr).
fn psql_ssl(srv: &TestServer, sslmode: &str, root: &str) -> (bool, String) {
    let (host, port) = srv.pg_addr.rsplit_once(':').expect("host:port");
    let out = Command::new("psql")
        .arg(format!(
            "host={host} port={port} user=sundial dbname=sundial sslmode={sslmode} sslrootcert={root}"
        ))
        .args(["-XAtc", "SELECT 1"])
        .env("PGPASSWORD", PASSWORD)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

/// Posts line protocol over HTTPS (trusting `ca`) and returns the status line.
async fn https_post(addr: &str, ca: &str, auth: &str, body: &str) -> String {
    use rustls_pki_types::pem::PemObject;
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, pki_types};
    let mut roots = RootCertStore::empty();
    for c in pki_types::CertificateDer::pem_file_iter(ca).expect("ca file") {
        roots.add(c.expect("ca cert")).expect("add root");
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let req = format!(
        "POST /write?db=sundial HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes()).await.expect("send");
    let mut out = String::new();
    let _ = tls.read_to_string(&mut out).await;
    out.lines().next().unwrap_or("").to_string()
}

#[tokio::test]
async fn tls_on_both_ports_and_plaintext_refused_when_required() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = make_certs(dir.path());
    let srv = TestServer::start_with_args(
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-require",
            "true",
        ],
        &[("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD)],
    );
    // verify-full: the certificate chain and the 127.0.0.1 name are checked.
    let (ok, out) = psql_ssl(&srv, "verify-full", &ca);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "1");
    let (ok, out) = psql_ssl(&srv, "disable", &ca);
    assert!(!ok);
    assert!(out.contains("requires TLS"), "{out}");

    let http = srv.http_addr.clone().expect("http addr");
    let status = https_post(&http, &ca, &basic("sundial", PASSWORD), "tls v=1 1").await;
    assert_eq!(status, "HTTP/1.1 204 No Content");
    let status = https_post(&http, &ca, &basic("sundial", "bad"), "tls v=1 2").await;
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    // Plain HTTP gets no answer: the connection is closed.
    let plain = reqwest::Client::new()
        .post(srv.http_url("/write?db=sundial"))
        .header("Authorization", basic("sundial", PASSWORD))
        .body("tls v=1 3")
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
}

#[tokio::test]
async fn tls_is_optional_unless_required() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = make_certs(dir.path());
    let srv = TestServer::start_with_args(&["--tls-cert", &cert, "--tls-key", &key], &[]);
    // require fails unless the server answers the SSLRequest with TLS.
    let (ok, out) = psql_ssl(&srv, "require", &ca);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "1");
    let (ok, out) = psql_ssl(&srv, "disable", &ca);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "1");
    let plain = http_status(&srv.http_url("/write?db=sundial"), &[], "p v=1 1").await;
    assert_eq!(plain, 204);
}

/// A server with SCRAM and optional TLS, and the CA its certificate is signed by.
fn tls_server(dir: &Path) -> (TestServer, String) {
    let (ca, cert, key) = make_certs(dir);
    let srv = TestServer::start_with_args(
        &["--tls-cert", &cert, "--tls-key", &key],
        &[("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD)],
    );
    (srv, ca)
}

/// Runs a driver's auth program (tests/drivers): SCRAM over verified TLS, SCRAM
/// over plain TCP, a wrong password refused with 28P01.
fn driver_auth(program: &str, args: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (srv, ca) = tls_server(dir.path());
    crate::drivers::run_driver_on(
        &srv,
        &[("SUNDIAL_PASSWORD", PASSWORD), ("SUNDIAL_CA", &ca)],
        program,
        args,
    );
}

#[test]
fn psycopg_and_asyncpg_authenticate() {
    driver_auth("python3", &["auth_test.py"]);
}

#[test]
fn node_postgres_authenticates() {
    driver_auth("node", &["node_auth_test.js"]);
}

#[test]
fn pgjdbc_authenticates() {
    driver_auth(
        "java",
        &["-cp", "/usr/share/java/postgresql.jar", "JdbcAuthTest.java"],
    );
}

async fn sql_error(c: &tokio_postgres::Client, sql: &str) -> String {
    match c.batch_execute(sql).await {
        Ok(()) => panic!("{sql} succeeded"),
        Err(e) => e.code().map(|c| c.code().to_string()).unwrap_or_default(),
    }
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.expect(sql).get(0)
}

#[tokio::test]
async fn grants_decide_what_roles_read_write_and_create() {
    let srv = server(&[("SUNDIAL_SUPERUSER_PASSWORD", PASSWORD)]);
    let admin = connect(&srv, "sundial", PASSWORD, "sundial")
        .await
        .expect("login");
    admin
        .batch_execute(
            "CREATE TABLE m (time timestamptz NOT NULL, host text, v float8)
               WITH (tsdb.hypertable, tsdb.partition_column = 'time');
             INSERT INTO m VALUES ('2024-01-01', 'a', 1), ('2024-01-02', 'b', 2);
             CREATE TABLE secret (x int);
             INSERT INTO secret VALUES (42);
             CREATE ROLE ro LOGIN PASSWORD 'ro';
             CREATE ROLE rw LOGIN PASSWORD 'rw';
             CREATE ROLE dev LOGIN PASSWORD 'dev';
             GRANT SELECT ON m TO ro;
             GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO rw;
             GRANT CREATE ON SCHEMA public TO dev;
             CREATE DATABASE locked;
             REVOKE CONNECT ON DATABASE locked FROM PUBLIC;",
        )
        .await
        .expect("setup");

    let ro = connect(&srv, "ro", "ro", "sundial").await.expect("ro");
    assert_eq!(count(&ro, "SELECT count(*) FROM m").await, 2);
    assert!(count(&ro, "SELECT count(*) FROM pg_class").await > 0);
    // A CTE named like a table is not the table.
    assert_eq!(
        count(
            &ro,
            "WITH secret AS (SELECT 7::int8 AS x) SELECT x FROM secret"
        )
        .await,
        7
    );
    for sql in [
        "SELECT * FROM secret",
        "SELECT * FROM m WHERE v IN (SELECT x FROM secret)",
        "INSERT INTO m VALUES ('2024-01-03', 'c', 3)",
        "DELETE FROM m",
        "TRUNCATE m",
        "CREATE TABLE t2 (x int)",
        "SELECT drop_chunks('m', older_than => now())",
        "DROP TABLE m",
    ] {
        assert_eq!(sql_error(&ro, sql).await, "42501", "{sql}");
    }
    // Prepared statements are checked as well.
    let e = ro
        .prepare("SELECT x FROM secret")
        .await
        .expect_err("prepare");
    assert_eq!(e.code().map(|c| c.code()), Some("42501"));

    let rw = connect(&srv, "rw", "rw", "sundial").await.expect("rw");
    rw.batch_execute("INSERT INTO m VALUES ('2024-01-03', 'c', 3)")
        .await
        .expect("rw inserts");
    rw.execute("INSERT INTO m VALUES ('2024-01-04', $1, 4)", &[&"d"])
        .await
        .expect("rw inserts with a parameter");
    assert_eq!(sql_error(&rw, "DELETE FROM m").await, "42501");
    assert_eq!(count(&admin, "SELECT count(*) FROM m").await, 4);

    // A role with CREATE owns what it creates, and may grant on it.
    let dev = connect(&srv, "dev", "dev", "sundial").await.expect("dev");
    dev.batch_execute(
        "CREATE TABLE mine (x int); INSERT INTO mine VALUES (1); GRANT SELECT ON mine TO ro",
    )
    .await
    .expect("dev creates");
    assert_eq!(count(&ro, "SELECT count(*) FROM mine").await, 1);
    // The owner manages its hypertable; others' and global functions stay closed.
    dev.batch_execute(
        "CREATE TABLE mine2 (time timestamptz NOT NULL, v int);
         SELECT create_hypertable('mine2', 'time');
         SELECT drop_chunks('mine2', older_than => now());",
    )
    .await
    .expect("owner manages its hypertable");
    assert_eq!(
        sql_error(&dev, "SELECT drop_chunks('m', older_than => now())").await,
        "42501"
    );
    assert_eq!(sql_error(&dev, "SELECT sundial_flush()").await, "42501");
    ro.batch_execute("SELECT show_chunks('m')")
        .await
        .expect("a reader lists chunks");
    dev.batch_execute("DROP TABLE mine2")
        .await
        .expect("drop mine2");
    assert_eq!(sql_error(&dev, "DROP TABLE secret").await, "42501");
    assert_eq!(sql_error(&dev, "SELECT * FROM m").await, "42501");
    assert_eq!(sql_error(&admin, "DROP ROLE dev").await, "2BP01");
    dev.batch_execute("DROP TABLE mine")
        .await
        .expect("owner drops");

    // Revoked privileges stop at once (cached plans and statements prepared
    // before the REVOKE included).
    assert_eq!(count(&ro, "SELECT count(*) FROM m").await, 4);
    let prepared = ro
        .prepare("SELECT count(*) FROM m WHERE v > $1")
        .await
        .expect("prepare while granted");
    let n: i64 = ro
        .query_one(&prepared, &[&0.5f64])
        .await
        .expect("run while granted")
        .get(0);
    assert_eq!(n, 4);
    admin
        .batch_execute("REVOKE SELECT ON m FROM ro")
        .await
        .expect("revoke");
    assert_eq!(sql_error(&ro, "SELECT count(*) FROM m").await, "42501");
    let e = ro
        .query_one(&prepared, &[&0.5f64])
        .await
        .expect_err("prepared before the REVOKE");
    assert_eq!(e.code().map(|c| c.code()), Some("42501"));

    // CONNECT revoked from PUBLIC.
    assert_eq!(login_error(&srv, "ro", "ro", "locked").await, "42501");
    admin
        .batch_execute("GRANT CONNECT ON DATABASE locked TO ro")
        .await
        .expect("grant connect");
    connect(&srv, "ro", "ro", "locked")
        .await
        .expect("ro may connect now");

    // Line protocol: INSERT on existing tables, CREATE for new ones.
    admin
        .batch_execute("CREATE ROLE agent LOGIN PASSWORD 'ag'; GRANT INSERT ON m TO agent")
        .await
        .expect("agent");
    let auth = basic("agent", "ag");
    let write = srv.http_url("/write?db=sundial");
    let at = "1704412800000000000";
    assert_eq!(
        http_status(
            &write,
            &[("Authorization", &auth)],
            &format!("m,host=lp v=5 {at}")
        )
        .await,
        204
    );
    assert_eq!(
        http_status(
            &write,
            &[("Authorization", &auth)],
            &format!("newm v=5 {at}")
        )
        .await,
        403
    );
    assert_eq!(
        http_status(
            &srv.http_url("/write?db=elsewhere"),
            &[("Authorization", &auth)],
            &format!("m v=5 {at}")
        )
        .await,
        403
    );
    admin
        .batch_execute("GRANT CREATE ON DATABASE sundial TO agent")
        .await
        .expect("grant create");
    assert_eq!(
        http_status(
            &write,
            &[("Authorization", &auth)],
            &format!("newm v=5 {at}")
        )
        .await,
        204
    );
    assert_eq!(count(&admin, "SELECT count(*) FROM m").await, 5);
    assert_eq!(count(&admin, "SELECT count(*) FROM newm").await, 1);
}
