#!/usr/bin/env python3
"""Regenerate src/sql/pg_catalog/defs.rs from a running PostgreSQL 15 server.

defs.rs holds the static catalog tables Sundial emulates: for every pg_catalog
relation and information_schema view it provides, the PostgreSQL oid, relkind and
columns (each with a coarse type tag of `enum T` in src/sql/pg_catalog/mod.rs), and
the built-in rows of pg_type it knows, and every setting with the value SHOW prints
on a fresh cluster (less the machine- and initdb-dependent ones in SETTINGS_SKIPPED).
Which relations and types are emitted, and in
which order, is fixed by the lists PG_CATALOG_RELS, INFO_SCHEMA_RELS and TYPE_OIDS
below (add a name or oid there to emit one more); everything else (oids, relkinds,
column names and order, column types, every pg_type field and format_type output) is
read from the server. The output is formatted as rustfmt leaves it, so the file
regenerated from an unmodified PostgreSQL 15 is byte-for-byte the checked-in one.

Needs only Python 3 (standard library) and the `psql` client on PATH. The server must
be PostgreSQL 15 (oids of system views and information_schema views differ between
major versions); a fresh, unmodified cluster is best. Connection settings come from
the usual libpq environment variables (PGHOST, PGPORT, PGUSER, PGDATABASE, ...) or
from --dsn (a conninfo string or postgresql:// URI passed to `psql -d`).

Start a throwaway PostgreSQL 15 (as a non-root user; initdb refuses to run as root)
and regenerate:

    PGBIN=/usr/lib/postgresql/15/bin
    D=$(mktemp -d)
    $PGBIN/initdb -D "$D/data" -U postgres --auth=trust
    $PGBIN/pg_ctl -D "$D/data" -l "$D/log" \\
        -o "-p 54329 -k $D -c listen_addresses=127.0.0.1" start
    PGHOST=127.0.0.1 PGPORT=54329 PGUSER=postgres \\
        python3 scripts/gen-pg-catalog-defs.py > src/sql/pg_catalog/defs.rs
    $PGBIN/pg_ctl -D "$D/data" stop && rm -rf "$D"

(or: python3 scripts/gen-pg-catalog-defs.py --dsn 'host=127.0.0.1 port=54329 user=postgres')

Check that the checked-in file is current:

    diff <(python3 scripts/gen-pg-catalog-defs.py) src/sql/pg_catalog/defs.rs
"""

import argparse
import os
import re
import subprocess
import sys

# The pg_catalog relations to emit, in output order.
PG_CATALOG_RELS = [
    "pg_auth_members",
    "pg_conversion",
    "pg_db_role_setting",
    "pg_default_acl",
    "pg_foreign_data_wrapper",
    "pg_foreign_server",
    "pg_largeobject_metadata",
    "pg_opfamily",
    "pg_shdepend",
    "pg_stat_user_tables",
    "pg_subscription",
    "pg_ts_config",
    "pg_aggregate",
    "pg_am",
    "pg_attrdef",
    "pg_attribute",
    "pg_authid",
    "pg_cast",
    "pg_class",
    "pg_collation",
    "pg_constraint",
    "pg_database",
    "pg_depend",
    "pg_description",
    "pg_enum",
    "pg_event_trigger",
    "pg_extension",
    "pg_foreign_table",
    "pg_index",
    "pg_indexes",
    "pg_inherits",
    "pg_language",
    "pg_locks",
    "pg_matviews",
    "pg_namespace",
    "pg_opclass",
    "pg_operator",
    "pg_partitioned_table",
    "pg_policy",
    "pg_proc",
    "pg_publication",
    "pg_publication_namespace",
    "pg_publication_rel",
    "pg_range",
    "pg_rewrite",
    "pg_roles",
    "pg_sequence",
    "pg_sequences",
    "pg_settings",
    "pg_shdescription",
    "pg_stat_activity",
    "pg_statistic_ext",
    "pg_tables",
    "pg_tablespace",
    "pg_timezone_names",
    "pg_trigger",
    "pg_type",
    "pg_user",
    "pg_views",
]

# The information_schema views to emit, in output order.
INFO_SCHEMA_RELS = [
    "columns",
    "key_column_usage",
    "schemata",
    "table_constraints",
    "tables",
    "views",
]

# The pg_type rows to emit (output is in this order).
TYPE_OIDS = [
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 28, 30, 114, 194, 199, 700, 701, 705,
    869, 1000, 1001, 1002, 1003, 1005, 1007, 1009, 1014, 1015, 1016, 1021, 1022, 1028,
    1033, 1034, 1042, 1043, 1082, 1083, 1114, 1115, 1182, 1183, 1184, 1185, 1186, 1187,
    1231, 1266, 1700, 2205, 2206, 2210, 2211, 2249, 2275, 2276, 2277, 2278, 2279, 2281,
    2283, 2950, 2951, 3802, 3807, 4089, 4096,
]

# PostgreSQL column type (pg_type.typname; a domain is looked up by its base type)
# -> tag of `enum T` in src/sql/pg_catalog/mod.rs. A column of a type missing here is
# an error: decide its tag and add it.
TYPE_TAGS = {
    "oid": "Oid",
    "regproc": "Oid",
    "regtype": "Oid",
    "xid": "Oid",
    "name": "Name",
    "text": "Text",
    "bytea": "Text",
    "inet": "Text",
    "pg_lsn": "Text",
    "pg_node_tree": "Text",
    "varchar": "Varchar",
    "char": "Char",  # the one-byte "char"
    "bool": "Bool",
    "int2": "I16",
    "int4": "I32",
    "int8": "I64",
    "float4": "F32",
    "timestamptz": "Tstz",
    "interval": "Interval",
    "_text": "TextArr",
    "_char": "TextArr",
    "_aclitem": "TextArr",
    "anyarray": "TextArr",
    "_oid": "OidArr",
    "oidvector": "OidArr",
    "_int2": "I16Arr",
    "int2vector": "I16Arr",
}

# No entry of defs.rs needs a hand-made override: every relation, column and type row
# is reproduced from an unmodified PostgreSQL 15 server.

HEADER = """\
//! Generated by `scripts/gen-pg-catalog-defs.py` from a PostgreSQL 15 server; do not edit
//! by hand (the script's docstring says how to regenerate it).
//!
//! Static definitions: the columns of every `pg_catalog` relation and `information_schema`
//! view Sundial provides, the built-in rows of `pg_type`, and PostgreSQL's settings with
//! their defaults.

use super::T::*;
use super::{RelDef, Ty};
"""

PG_CATALOG_DOC = (
    "/// Every pg_catalog relation: PostgreSQL 15 oid, kind and columns (generated from PG 15)."
)
INFO_SCHEMA_DOC = (
    "/// The information_schema views Sundial provides (PostgreSQL 15 oids and columns)."
)
TYPES_DOC = "/// Built-in types (rows of pg_type), as in PostgreSQL 15."

# rustfmt's defaults (max_width 100, use_small_heuristics "Default"): an array
# literal stays on one line when its items, joined by ", ", take at most 60 columns.
ARRAY_WIDTH = 60
MAX_WIDTH = 100

SEP = "\x1f"  # field separator for psql's unaligned output; never in catalog names


SETTINGS_DOC = """/// PostgreSQL 15's settings as `SHOW` prints them on a fresh cluster (lower-case name,
/// value, short description), less those that describe one machine or initdb run."""

def die(msg):
    print(f"gen-pg-catalog-defs: {msg}", file=sys.stderr)
    sys.exit(1)


class Psql:
    def __init__(self, dsn):
        self.cmd = ["psql", "-X", "-A", "-t", "-q", "-F", SEP, "-v", "ON_ERROR_STOP=1"]
        if dsn:
            self.cmd += ["-d", dsn]

    def rows(self, sql, ncols):
        env = dict(os.environ, PGCLIENTENCODING="UTF8")
        try:
            r = subprocess.run(
                self.cmd + ["-c", sql], capture_output=True, text=True, env=env
            )
        except FileNotFoundError:
            die("psql not found on PATH")
        if r.returncode != 0:
            die(f"psql failed:\n{r.stderr.strip()}\nquery: {sql}")
        out = []
        for line in r.stdout.split("\n"):
            if line == "":
                continue
            fields = line.split(SEP)
            if len(fields) != ncols:
                die(f"unexpected psql output line {line!r} for query: {sql}")
            out.append(fields)
        return out


def sql_text_array(items):
    for s in items:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", s):
            die(f"not a plain identifier: {s!r}")
    return "ARRAY[" + ", ".join(f"'{s}'" for s in items) + "]::text[]"


def rust_str(s):
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def rust_byte(c):
    if len(c) != 1 or not (0x20 <= ord(c) < 0x7F):
        die(f"not a printable ASCII byte: {c!r}")
    if c in "'\\":
        return f"b'\\{c}'"
    return f"b'{c}'"


def rust_bool(v):
    if v not in ("t", "f"):
        die(f"not a boolean: {v!r}")
    return "true" if v == "t" else "false"


def fetch_rels(db, nspname, names):
    """[(name, oid, relkind, [(column, tag)])] for relations `names` of `nspname`."""
    arr = sql_text_array(names)
    rels = db.rows(
        f"""
        SELECT w.ord, c.oid, c.relkind
        FROM unnest({arr}) WITH ORDINALITY AS w(relname, ord)
        JOIN pg_catalog.pg_namespace n ON n.nspname = '{nspname}'
        JOIN pg_catalog.pg_class c
          ON c.relnamespace = n.oid AND c.relname = w.relname
        ORDER BY w.ord
        """,
        3,
    )
    found = {int(ord_) for ord_, _, _ in rels}
    missing = [n for i, n in enumerate(names, 1) if i not in found]
    if missing:
        die(f"relations not found in {nspname}: {', '.join(missing)}")
    cols = db.rows(
        f"""
        SELECT w.ord, a.attname, t.typname, t.typtype,
               coalesce(bt.typname, ''), coalesce(bt.typtype, '')
        FROM unnest({arr}) WITH ORDINALITY AS w(relname, ord)
        JOIN pg_catalog.pg_namespace n ON n.nspname = '{nspname}'
        JOIN pg_catalog.pg_class c
          ON c.relnamespace = n.oid AND c.relname = w.relname
        JOIN pg_catalog.pg_attribute a
          ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_catalog.pg_type bt
          ON t.typtype = 'd' AND bt.oid = t.typbasetype
        ORDER BY w.ord, a.attnum
        """,
        6,
    )
    by_rel = {}
    for ord_, attname, typname, typtype, basename, basetype in cols:
        name = names[int(ord_) - 1]
        if typtype == "d":
            if basetype == "d":
                die(f"{nspname}.{name}.{attname}: domain over a domain ({typname})")
            typname = basename
        tag = TYPE_TAGS.get(typname)
        if tag is None:
            die(f"{nspname}.{name}.{attname}: no T tag for type {typname!r}; add it to TYPE_TAGS")
        by_rel.setdefault(int(ord_), []).append((attname, tag))
    return [
        (names[int(ord_) - 1], int(oid), relkind, by_rel.get(int(ord_), []))
        for ord_, oid, relkind in rels
    ]


def fetch_types(db, oids):
    arr = "ARRAY[" + ", ".join(str(int(o)) for o in oids) + "]::oid[]"
    rows = db.rows(
        f"""
        SELECT w.ord, t.oid, t.typname, t.typlen, t.typbyval, t.typtype,
               t.typcategory, t.typispreferred, t.typelem, t.typarray, t.typalign,
               t.typstorage, t.typcollation, pg_catalog.format_type(t.oid, NULL)
        FROM unnest({arr}) WITH ORDINALITY AS w(typoid, ord)
        JOIN pg_catalog.pg_type t ON t.oid = w.typoid
        ORDER BY w.ord
        """,
        14,
    )
    found = {int(r[0]) for r in rows}
    missing = [str(o) for i, o in enumerate(oids, 1) if i not in found]
    if missing:
        die(f"types not found in pg_type: {', '.join(missing)}")
    return [r[1:] for r in rows]


def emit_rel(out, name, oid, relkind, cols):
    out.append("    RelDef {")
    out.append(f"        name: {rust_str(name)},")
    out.append(f"        oid: {oid},")
    out.append(f"        kind: {rust_byte(relkind)},")
    items = [f"({rust_str(c)}, {t})" for c, t in cols]
    one_line = ", ".join(items)
    prefix = "        cols: &["
    if len(one_line) <= ARRAY_WIDTH and len(prefix) + len(one_line) + 2 <= MAX_WIDTH:
        out.append(f"{prefix}{one_line}],")
    else:
        out.append(prefix)
        for item in items:
            out.append(f"            {item},")
        out.append("        ],")
    out.append("    },")


def emit_type(out, row):
    (oid, name, length, byval, kind, category, preferred, elem, array, align,
     storage, collation, display) = row
    out.append("    Ty {")
    out.append(f"        oid: {int(oid)},")
    out.append(f"        name: {rust_str(name)},")
    out.append(f"        len: {int(length)},")
    out.append(f"        byval: {rust_bool(byval)},")
    out.append(f"        kind: {rust_byte(kind)},")
    out.append(f"        category: {rust_byte(category)},")
    out.append(f"        preferred: {rust_bool(preferred)},")
    out.append(f"        elem: {int(elem)},")
    out.append(f"        array: {int(array)},")
    out.append(f"        align: {rust_byte(align)},")
    out.append(f"        storage: {rust_byte(storage)},")
    out.append(f"        collation: {int(collation)},")
    out.append(f"        display: {rust_str(display)},")
    out.append("    },")


# Settings whose value on a fresh cluster says something about that machine or that
# initdb run (paths, ports, locale, memory sizes initdb probed, the build): not emitted.
# Sundial's own session settings (src/sql/session.rs) take precedence over the rest.
SETTINGS_SKIPPED = {
    "config_file", "data_directory", "hba_file", "ident_file", "external_pid_file",
    "unix_socket_directories", "unix_socket_group", "unix_socket_permissions",
    "listen_addresses", "port", "krb_server_keyfile", "ssl_cert_file", "ssl_key_file",
    "ssl_ca_file", "ssl_crl_file", "ssl_crl_dir", "ssl_dh_params_file", "log_directory",
    "lc_collate", "lc_ctype", "lc_messages", "lc_monetary", "lc_numeric", "lc_time",
    "timezone", "log_timezone", "datestyle", "default_text_search_config",
    "shared_buffers", "max_connections", "dynamic_shared_memory_type", "data_checksums",
    "server_version", "server_version_num", "shared_memory_size",
    "shared_memory_size_in_huge_pages", "huge_page_size", "block_size", "wal_block_size",
    "segment_size", "wal_segment_size", "max_function_args", "max_index_keys",
    "max_identifier_length", "debug_assertions", "data_directory_mode", "integer_datetimes",
    "in_hot_standby", "is_superuser", "session_authorization", "application_name",
    "cluster_name", "event_source", "syslog_facility", "syslog_ident", "log_filename",
    "log_destination", "logging_collector", "stats_temp_directory", "ssl_library",
    "effective_io_concurrency", "maintenance_io_concurrency", "wal_sync_method",
    "archive_cleanup_command", "restore_command", "recovery_end_command",
}


def fetch_settings(db):
    """[(name, value as SHOW prints it, short description)] of every setting."""
    rows = db.rows(
        "SELECT lower(name), current_setting(name), short_desc FROM pg_settings ORDER BY 1", 3
    )
    return [r for r in rows if r[0] not in SETTINGS_SKIPPED]


def emit_setting(out, name, value, desc):
    # rustfmt keeps a tuple on one line when its items, joined by ", ", take at most
    # 60 columns (fn_call_width) and the line fits.
    inner = ", ".join(rust_str(v) for v in (name, value, desc))
    one = f"    ({inner}),"
    if len(inner) <= 60 and len(one) <= MAX_WIDTH:
        out.append(one)
        return
    out.append("    (")
    for v in (name, value, desc):
        out.append(f"        {rust_str(v)},")
    out.append("    ),")


def main():
    ap = argparse.ArgumentParser(
        description="Print src/sql/pg_catalog/defs.rs regenerated from a PostgreSQL 15 server."
    )
    ap.add_argument(
        "--dsn",
        help="libpq conninfo string or URI (default: PGHOST, PGPORT, PGUSER, PGDATABASE, ...)",
    )
    args = ap.parse_args()
    db = Psql(args.dsn)

    (version,), = db.rows("SHOW server_version_num", 1)
    if int(version) // 10000 != 15:
        die(f"server is not PostgreSQL 15 (server_version_num {version})")

    pg_rels = fetch_rels(db, "pg_catalog", PG_CATALOG_RELS)
    info_rels = fetch_rels(db, "information_schema", INFO_SCHEMA_RELS)
    types = fetch_types(db, TYPE_OIDS)
    settings = fetch_settings(db)

    out = [HEADER, PG_CATALOG_DOC, "pub const PG_CATALOG_RELS: &[RelDef] = &["]
    for rel in pg_rels:
        emit_rel(out, *rel)
    out += ["];", "", INFO_SCHEMA_DOC, "pub const INFO_SCHEMA_RELS: &[RelDef] = &["]
    for rel in info_rels:
        emit_rel(out, *rel)
    out += ["];", "", TYPES_DOC, "pub const TYPES: &[Ty] = &["]
    for row in types:
        emit_type(out, row)
    out += ["];", "", SETTINGS_DOC, "pub const SETTINGS: &[(&str, &str, &str)] = &["]
    for row in settings:
        emit_setting(out, *row)
    out.append("];")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
