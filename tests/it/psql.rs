//! psql 15 against a real server: `\dt`, `\d`, `\d+`, `\dn`, `\df time_bucket`, `\x`
//! and `\d nosuch` print what PostgreSQL 15 prints for the same objects, and `\l`
//! lists the database. Skipped (with a note) when no `psql` binary is found.

// The expected outputs were printed by psql 15.18 against PostgreSQL 15.18 (initdb
// `--locale=C.UTF-8`, user `sundial` owning database `sundial`) after running `SETUP`,
// `CREATE SCHEMA timescaledb_information` and TimescaleDB's 16 `time_bucket`
// signatures as SQL functions in `public`. Line-end spaces are trimmed on both sides.

use std::process::Command;

use crate::harness::TestServer;

/// The tables both servers have.
const SETUP: &str = "CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, \
    usage_user double precision, usage_system double precision, n bigint, ok boolean, \
    reading numeric(10,2));
INSERT INTO cpu VALUES ('2024-01-01 00:00:00+00','h1',1.5,0.5,1,true,1.25),
    ('2024-01-01 00:03:00+00','h1',2.5,0.7,2,false,2.5),
    ('2024-01-01 00:07:00+00','h2',3.5,0.9,3,true,3.75);
CREATE TABLE metrics (time timestamptz NOT NULL, host text NOT NULL DEFAULT 'x', \
    region varchar(20), usage_user double precision, usage_system real, n bigint DEFAULT 0, \
    m integer, s smallint, ok boolean, reading numeric(10,2), day date, ts timestamp, \
    payload bytea)";

/// The psql binary (`$PSQL`, else `psql` on the PATH), if it runs.
fn psql_bin() -> Option<String> {
    let bin = std::env::var("PSQL").unwrap_or_else(|_| "psql".into());
    let ok = Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(bin)
}

/// Runs `psql -X -c cmd ...` as user `sundial` on database `sundial`: (stdout, stderr),
/// line ends trimmed.
fn psql(bin: &str, server: &TestServer, cmds: &[&str]) -> (String, String) {
    let (host, port) = server.pg_addr.rsplit_once(':').expect("host:port");
    let mut c = Command::new(bin);
    c.args([
        "-X", "-h", host, "-p", port, "-U", "sundial", "-d", "sundial",
    ]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    c.env("PGSSLMODE", "disable")
        .env("PGTZ", "UTC")
        .env("PAGER", "")
        .env("LC_ALL", "C.UTF-8")
        .env_remove("PGPASSWORD");
    let out = c.output().expect("psql runs");
    let clean = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .trim_end_matches('\n')
            .split('\n')
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
    };
    (clean(&out.stdout), clean(&out.stderr))
}

fn check(bin: &str, server: &TestServer, cmds: &[&str], want: &str) {
    let (out, err) = psql(bin, server, cmds);
    assert_eq!(err, "", "psql {cmds:?} printed errors");
    assert_eq!(
        out,
        want.trim_matches('\n'),
        "psql {cmds:?}: got\n{out}\nwant\n{}",
        want.trim_matches('\n')
    );
}

#[tokio::test]
async fn psql_meta_commands_print_what_postgres_prints() {
    let Some(bin) = psql_bin() else {
        eprintln!("psql not found: skipping (set PSQL to a psql 15 binary)");
        return;
    };
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client.batch_execute(SETUP).await.expect("setup");
    check(&bin, &server, &["\\dt"], DT);
    check(&bin, &server, &["\\d cpu"], D_CPU);
    check(&bin, &server, &["\\d+ cpu"], D_PLUS_CPU);
    check(&bin, &server, &["\\d metrics"], D_METRICS);
    check(&bin, &server, &["\\d+ metrics"], D_PLUS_METRICS);
    check(&bin, &server, &["\\dn"], DN);
    check(&bin, &server, &["\\df time_bucket"], DF_TIME_BUCKET);
    check(
        &bin,
        &server,
        &["\\x on", "SELECT * FROM cpu ORDER BY time LIMIT 2"],
        X_SELECT,
    );

    let (out, err) = psql(&bin, &server, &["\\d nosuch"]);
    assert_eq!(out, "");
    assert_eq!(err, "Did not find any relation named \"nosuch\".");

    // \l: the sundial row is PostgreSQL's (the list also has `postgres`, no templates)
    let (out, err) = psql(&bin, &server, &["\\l"]);
    assert_eq!(err, "");
    let row: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .filter(|cells| cells.first() == Some(&"sundial"))
        .collect();
    assert_eq!(
        row,
        vec![vec![
            "sundial", "sundial", "UTF8", "C.UTF-8", "C.UTF-8", "", "libc", ""
        ]],
        "\\l printed\n{out}"
    );
    assert!(out.contains("List of databases"), "{out}");
}

// Expected outputs (psql 15.18 against PostgreSQL 15.18).

const DT: &str = r#"
         List of relations
 Schema |  Name   | Type  |  Owner
--------+---------+-------+---------
 public | cpu     | table | sundial
 public | metrics | table | sundial
(2 rows)
"#;

const D_CPU: &str = r#"
                            Table "public.cpu"
    Column    |           Type           | Collation | Nullable | Default
--------------+--------------------------+-----------+----------+---------
 time         | timestamp with time zone |           | not null |
 hostname     | text                     |           |          |
 usage_user   | double precision         |           |          |
 usage_system | double precision         |           |          |
 n            | bigint                   |           |          |
 ok           | boolean                  |           |          |
 reading      | numeric(10,2)            |           |          |
"#;

const D_PLUS_CPU: &str = r#"
                                                       Table "public.cpu"
    Column    |           Type           | Collation | Nullable | Default | Storage  | Compression | Stats target | Description
--------------+--------------------------+-----------+----------+---------+----------+-------------+--------------+-------------
 time         | timestamp with time zone |           | not null |         | plain    |             |              |
 hostname     | text                     |           |          |         | extended |             |              |
 usage_user   | double precision         |           |          |         | plain    |             |              |
 usage_system | double precision         |           |          |         | plain    |             |              |
 n            | bigint                   |           |          |         | plain    |             |              |
 ok           | boolean                  |           |          |         | plain    |             |              |
 reading      | numeric(10,2)            |           |          |         | main     |             |              |
Access method: heap
"#;

const D_METRICS: &str = r#"
                            Table "public.metrics"
    Column    |            Type             | Collation | Nullable |  Default
--------------+-----------------------------+-----------+----------+-----------
 time         | timestamp with time zone    |           | not null |
 host         | text                        |           | not null | 'x'::text
 region       | character varying(20)       |           |          |
 usage_user   | double precision            |           |          |
 usage_system | real                        |           |          |
 n            | bigint                      |           |          | 0
 m            | integer                     |           |          |
 s            | smallint                    |           |          |
 ok           | boolean                     |           |          |
 reading      | numeric(10,2)               |           |          |
 day          | date                        |           |          |
 ts           | timestamp without time zone |           |          |
 payload      | bytea                       |           |          |
"#;

const D_PLUS_METRICS: &str = r#"
                                                       Table "public.metrics"
    Column    |            Type             | Collation | Nullable |  Default  | Storage  | Compression | Stats target | Description
--------------+-----------------------------+-----------+----------+-----------+----------+-------------+--------------+-------------
 time         | timestamp with time zone    |           | not null |           | plain    |             |              |
 host         | text                        |           | not null | 'x'::text | extended |             |              |
 region       | character varying(20)       |           |          |           | extended |             |              |
 usage_user   | double precision            |           |          |           | plain    |             |              |
 usage_system | real                        |           |          |           | plain    |             |              |
 n            | bigint                      |           |          | 0         | plain    |             |              |
 m            | integer                     |           |          |           | plain    |             |              |
 s            | smallint                    |           |          |           | plain    |             |              |
 ok           | boolean                     |           |          |           | plain    |             |              |
 reading      | numeric(10,2)               |           |          |           | main     |             |              |
 day          | date                        |           |          |           | plain    |             |              |
 ts           | timestamp without time zone |           |          |           | plain    |             |              |
 payload      | bytea                       |           |          |           | extended |             |              |
Access method: heap
"#;

const DN: &str = r#"
               List of schemas
          Name           |       Owner
-------------------------+-------------------
 _timescaledb_internal   | sundial
 public                  | pg_database_owner
 timescaledb_information | sundial
(3 rows)
"#;

const DF_TIME_BUCKET: &str = r#"
                                                                                                                List of functions
 Schema |    Name     |      Result data type       |                                                                                 Argument data types                                                                                 | Type
--------+-------------+-----------------------------+-------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------+------
 public | time_bucket | bigint                      | bucket_width bigint, ts bigint                                                                                                                                                      | func
 public | time_bucket | bigint                      | bucket_width bigint, ts bigint, "offset" bigint                                                                                                                                     | func
 public | time_bucket | integer                     | bucket_width integer, ts integer                                                                                                                                                    | func
 public | time_bucket | integer                     | bucket_width integer, ts integer, "offset" integer                                                                                                                                  | func
 public | time_bucket | date                        | bucket_width interval, ts date                                                                                                                                                      | func
 public | time_bucket | date                        | bucket_width interval, ts date, "offset" interval                                                                                                                                   | func
 public | time_bucket | date                        | bucket_width interval, ts date, origin date                                                                                                                                         | func
 public | time_bucket | timestamp with time zone    | bucket_width interval, ts timestamp with time zone                                                                                                                                  | func
 public | time_bucket | timestamp with time zone    | bucket_width interval, ts timestamp with time zone, "offset" interval                                                                                                               | func
 public | time_bucket | timestamp with time zone    | bucket_width interval, ts timestamp with time zone, origin timestamp with time zone                                                                                                 | func
 public | time_bucket | timestamp with time zone    | bucket_width interval, ts timestamp with time zone, timezone text, origin timestamp with time zone DEFAULT NULL::timestamp with time zone, "offset" interval DEFAULT NULL::interval | func
 public | time_bucket | timestamp without time zone | bucket_width interval, ts timestamp without time zone                                                                                                                               | func
 public | time_bucket | timestamp without time zone | bucket_width interval, ts timestamp without time zone, "offset" interval                                                                                                            | func
 public | time_bucket | timestamp without time zone | bucket_width interval, ts timestamp without time zone, origin timestamp without time zone                                                                                           | func
 public | time_bucket | smallint                    | bucket_width smallint, ts smallint                                                                                                                                                  | func
 public | time_bucket | smallint                    | bucket_width smallint, ts smallint, "offset" smallint                                                                                                                               | func
(16 rows)
"#;

const X_SELECT: &str = r#"
Expanded display is on.
-[ RECORD 1 ]+-----------------------
time         | 2024-01-01 00:00:00+00
hostname     | h1
usage_user   | 1.5
usage_system | 0.5
n            | 1
ok           | t
reading      | 1.25
-[ RECORD 2 ]+-----------------------
time         | 2024-01-01 00:03:00+00
hostname     | h1
usage_user   | 2.5
usage_system | 0.7
n            | 2
ok           | f
reading      | 2.50
"#;
