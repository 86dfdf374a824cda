//! Line-protocol parser throughput on 100,000 TSBS devops cpu-only lines,
//! reported both in bytes and in lines per second.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sundial::lineproto::Precision;
use sundial::lineproto::parser::{FieldValue, Parser};

const LINES: usize = 100_000;
const HOSTS: u64 = 1_000;

/// `LINES` lines of TSBS cpu-only data from the load tool's generator.
fn tsbs_cpu_body() -> Vec<u8> {
    sundial::loadgen::tsbs_cpu_body(HOSTS, LINES, 123).expect("generates")
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
