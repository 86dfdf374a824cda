//! Line-protocol parser throughput on 100,000 TSBS devops cpu-only lines,
//! reported both in bytes and in lines per second.

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sundial::lineproto::Precision;
use sundial::lineproto::parser::{FieldValue, Parser};

const LINES: usize = 100_000;
const HOSTS: u64 = 1_000;

const REGIONS: [(&str, &[&str]); 3] = [
    ("eu-west-1", &["eu-west-1a", "eu-west-1b", "eu-west-1c"]),
    (
        "us-east-1",
        &["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"],
    ),
    ("ap-southeast-2", &["ap-southeast-2a", "ap-southeast-2b"]),
];
const OSES: [&str; 3] = ["Ubuntu16.04LTS", "Ubuntu15.10", "Ubuntu16.10"];
const ARCHES: [&str; 2] = ["x64", "x86"];
const TEAMS: [&str; 4] = ["NYC", "SF", "LON", "CHI"];
const ENVS: [&str; 3] = ["production", "staging", "test"];
const FIELDS: [&str; 10] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];

/// A small deterministic generator (xorshift64*), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn pick<'s>(items: &[&'s str], i: u64) -> &'s str {
    items[(i % items.len() as u64) as usize]
}

/// Builds the body: `HOSTS` hosts reporting every 10 s from 2016-01-01.
fn tsbs_cpu_body() -> Vec<u8> {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut body = String::with_capacity(LINES * 330);
    for n in 0..LINES as u64 {
        let host = n % HOSTS;
        let tick = n / HOSTS;
        let (region, zones) = REGIONS[(host % REGIONS.len() as u64) as usize];
        let _ = write!(
            body,
            "cpu,hostname=host_{host},region={region},datacenter={},rack={},os={},arch={},team={},service={},service_version={},service_environment={} ",
            pick(zones, host / 3),
            host % 100,
            pick(&OSES, host / 7),
            pick(&ARCHES, host / 5),
            pick(&TEAMS, host / 11),
            host % 20,
            host % 2,
            pick(&ENVS, host / 13),
        );
        for (i, field) in FIELDS.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(body, "{sep}{field}={}i", rng.below(101));
        }
        let _ = writeln!(
            body,
            " {}",
            1_451_606_400_000_000_000i64 + tick as i64 * 10_000_000_000
        );
    }
    body.into_bytes()
}

/// Parses every line and folds a little of each into a checksum so that
/// nothing is optimised away. Panics on a parse error (the body is valid).
fn parse_all(body: &[u8]) -> u64 {
    let mut parser = Parser::new(body);
    let mut sum = 0u64;
    while let Some(line) = parser.next_line() {
        let Ok(line) = line else {
            panic!("benchmark body must parse");
        };
        sum = sum.wrapping_add(line.tags.len() as u64);
        if let Some((_, FieldValue::Int(v))) = line.fields.first() {
            sum = sum.wrapping_add(*v as u64);
        }
        sum = sum.wrapping_add(line.timestamp.unwrap_or(0) as u64);
    }
    sum
}

fn bench_parse(c: &mut Criterion) {
    let body = tsbs_cpu_body();
    let mut count = 0;
    let mut parser = Parser::new(&body);
    while let Some(line) = parser.next_line() {
        assert!(line.is_ok(), "benchmark body must parse");
        count += 1;
    }
    assert_eq!(count, LINES);

    let mut bytes = c.benchmark_group("lineproto_parse_bytes");
    bytes.throughput(Throughput::Bytes(body.len() as u64));
    bytes.bench_function("tsbs_cpu_100k", |b| b.iter(|| parse_all(black_box(&body))));
    bytes.finish();

    let mut lines = c.benchmark_group("lineproto_parse_lines");
    lines.throughput(Throughput::Elements(LINES as u64));
    lines.bench_function("tsbs_cpu_100k", |b| b.iter(|| parse_all(black_box(&body))));
    lines.finish();

    // Parse plus building the Arrow batch (schema on write, 10 tag and 10 field columns).
    let none = |_: &str| None;
    let mut convert = c.benchmark_group("lineproto_to_arrow");
    convert.throughput(Throughput::Elements(LINES as u64));
    convert.bench_function("tsbs_cpu_100k", |b| {
        b.iter(|| {
            let c = sundial::lineproto::convert(black_box(&body), Precision::Nanos, &none)
                .expect("converts");
            assert_eq!(c.rows, LINES);
            c
        })
    });
    convert.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
