//! TSBS devops "cpu-only" data: `scale` hosts, each with ten fixed tags, report one
//! `cpu` line per interval whose ten integer `usage_*` fields follow random walks
//! with standard-normal steps clamped to 0..100, as `tsbs_generate_data` makes them.

use rand::{Rng, SeedableRng};

use super::LoadError;
use super::Timeline;
use super::source::{GenRng, LineSource, Normal, push_i64};

/// Regions and their datacenters, as in TSBS's `devops/host.go`.
const REGIONS: [(&str, &[&str]); 9] = [
    (
        "us-east-1",
        &["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"],
    ),
    ("us-west-1", &["us-west-1a", "us-west-1b"]),
    ("us-west-2", &["us-west-2a", "us-west-2b", "us-west-2c"]),
    ("eu-west-1", &["eu-west-1a", "eu-west-1b", "eu-west-1c"]),
    ("eu-central-1", &["eu-central-1a", "eu-central-1b"]),
    ("ap-southeast-1", &["ap-southeast-1a", "ap-southeast-1b"]),
    ("ap-southeast-2", &["ap-southeast-2a", "ap-southeast-2b"]),
    ("ap-northeast-1", &["ap-northeast-1a", "ap-northeast-1c"]),
    ("sa-east-1", &["sa-east-1a", "sa-east-1b", "sa-east-1c"]),
];
const TEAMS: [&str; 4] = ["SF", "NYC", "LON", "CHI"];
const OSES: [&str; 3] = ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"];
const ARCHES: [&str; 2] = ["x64", "x86"];
const ENVIRONMENTS: [&str; 3] = ["production", "staging", "test"];
const RACKS: u32 = 100;
const SERVICES: u32 = 20;
const SERVICE_VERSIONS: u32 = 2;

/// The tag keys of every `cpu` line, in the order TSBS writes them.
pub const CPU_TAGS: [&str; 10] = [
    "hostname",
    "region",
    "datacenter",
    "rack",
    "os",
    "arch",
    "team",
    "service",
    "service_version",
    "service_environment",
];

/// The field keys of every `cpu` line, in order.
pub const CPU_FIELDS: [&str; 10] = [
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

/// Values a field can print (`int64` of a walk clamped to 0..=100).
const VALUES: usize = 101;

/// `usage_x=NNi` with its leading comma (none for the first field), pre-rendered.
#[derive(Clone, Copy)]
struct FieldText {
    bytes: [u8; 24],
    len: u8,
}

struct Host {
    /// `cpu,hostname=host_N,...,service_environment=X ` — everything before the fields.
    prefix: Vec<u8>,
    usage: [f64; 10],
}

/// Generates the cpu-only data set, hosts in order within each timestamp.
pub(crate) struct CpuOnly {
    hosts: Vec<Host>,
    rng: GenRng,
    normal: Normal,
    timeline: Timeline,
    epoch: u64,
    next_host: usize,
    /// ` <timestamp ns>\n` of the current epoch.
    suffix: Vec<u8>,
    fields: Vec<FieldText>,
}

fn pick<'a>(rng: &mut GenRng, choices: &[&'a str]) -> &'a str {
    choices[rng.random_range(0..choices.len())]
}

impl CpuOnly {
    pub fn new(scale: u64, timeline: Timeline, seed: u64) -> Result<Self, LoadError> {
        let count =
            usize::try_from(scale).map_err(|_| LoadError::arg("scale", scale, "too large"))?;
        let mut rng = GenRng::seed_from_u64(seed);
        let mut hosts = Vec::with_capacity(count);
        for id in 0..count {
            // Like TSBS: the walks' starting points first, then the tag values.
            let usage: [f64; 10] = std::array::from_fn(|_| rng.random::<f64>() * 100.0);
            let (region, datacenters) = REGIONS[rng.random_range(0..REGIONS.len())];
            let datacenter = pick(&mut rng, datacenters);
            let rack = rng.random_range(0..RACKS).to_string();
            let arch = pick(&mut rng, &ARCHES);
            let os = pick(&mut rng, &OSES);
            let service = rng.random_range(0..SERVICES).to_string();
            let version = rng.random_range(0..SERVICE_VERSIONS).to_string();
            let environment = pick(&mut rng, &ENVIRONMENTS);
            let team = pick(&mut rng, &TEAMS);
            let hostname = format!("host_{id}");
            let values = [
                hostname.as_str(),
                region,
                datacenter,
                &rack,
                os,
                arch,
                team,
                &service,
                &version,
                environment,
            ];
            let mut prefix = b"cpu".to_vec();
            for (key, value) in CPU_TAGS.iter().zip(values) {
                prefix.push(b',');
                prefix.extend_from_slice(key.as_bytes());
                prefix.push(b'=');
                prefix.extend_from_slice(value.as_bytes());
            }
            prefix.push(b' ');
            hosts.push(Host { prefix, usage });
        }

        let mut fields = Vec::with_capacity(CPU_FIELDS.len() * VALUES);
        for (f, name) in CPU_FIELDS.iter().enumerate() {
            for v in 0..VALUES {
                let text = format!("{}{name}={v}i", if f == 0 { "" } else { "," });
                let mut bytes = [0u8; 24];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                fields.push(FieldText {
                    bytes,
                    len: text.len() as u8,
                });
            }
        }

        let mut generator = CpuOnly {
            hosts,
            rng,
            normal: Normal::default(),
            timeline,
            epoch: 0,
            next_host: 0,
            suffix: Vec::with_capacity(24),
            fields,
        };
        generator.set_suffix();
        Ok(generator)
    }

    fn set_suffix(&mut self) {
        self.suffix.clear();
        self.suffix.push(b' ');
        push_i64(&mut self.suffix, self.timeline.at(self.epoch));
        self.suffix.push(b'\n');
    }

    /// Appends the next line; `None` after the last epoch.
    fn write_next(&mut self, out: &mut Vec<u8>) -> Option<u32> {
        if self.next_host == self.hosts.len() {
            if self.hosts.is_empty() {
                return None;
            }
            self.next_host = 0;
            self.epoch += 1;
            if self.epoch < self.timeline.epochs {
                self.set_suffix();
            }
        }
        if self.epoch >= self.timeline.epochs {
            return None;
        }
        let host = &mut self.hosts[self.next_host];
        self.next_host += 1;
        out.extend_from_slice(&host.prefix);
        let tick = self.epoch > 0;
        for (f, state) in host.usage.iter_mut().enumerate() {
            // TSBS advances every walk once per interval after the first one.
            if tick {
                *state = (*state + self.normal.sample(&mut self.rng)).clamp(0.0, 100.0);
            }
            let value = (*state as usize).min(VALUES - 1);
            let text = &self.fields[f * VALUES + value];
            // A fixed-size copy is cheaper than a variable one; cut the excess after.
            out.extend_from_slice(&text.bytes);
            out.truncate(out.len() - (text.bytes.len() - usize::from(text.len)));
        }
        out.extend_from_slice(&self.suffix);
        Some(CPU_FIELDS.len() as u32)
    }
}

impl LineSource for CpuOnly {
    fn next_line(&mut self, out: &mut Vec<u8>) -> Result<Option<u32>, LoadError> {
        Ok(self.write_next(out))
    }
}

#[cfg(test)]
mod tests {
    use super::super::source::Batcher;
    use super::*;

    const START: i64 = 1_451_606_400_000_000_000; // 2016-01-01T00:00:00Z
    const SEC: i64 = 1_000_000_000;

    fn timeline(seconds: i64, interval: i64) -> Timeline {
        Timeline::new(START, START + seconds * SEC, interval * SEC)
    }

    fn all_text(scale: u64, tl: Timeline, seed: u64, limit: Option<u64>) -> (Vec<u8>, u64, u64) {
        let mut b = Batcher::new(CpuOnly::new(scale, tl, seed).unwrap(), 1000, limit);
        let (mut text, mut rows, mut metrics) = (Vec::new(), 0, 0);
        while let Some(batch) = b.next_batch().unwrap() {
            text.extend_from_slice(&batch.body);
            rows += batch.rows;
            metrics += batch.metrics;
        }
        (text, rows, metrics)
    }

    #[test]
    fn same_seed_same_data_other_seed_other_data() {
        let a = all_text(20, timeline(3600, 10), 123, None).0;
        let b = all_text(20, timeline(3600, 10), 123, None).0;
        let c = all_text(20, timeline(3600, 10), 124, None).0;
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Cutting the stream into different batch sizes changes nothing.
        let mut b = Batcher::new(CpuOnly::new(20, timeline(3600, 10), 123).unwrap(), 7, None);
        let mut d = Vec::new();
        while let Some(batch) = b.next_batch().unwrap() {
            d.extend_from_slice(&batch.body);
        }
        assert_eq!(a, d);
    }

    #[test]
    fn row_counts_follow_scale_interval_and_limit() {
        assert_eq!(all_text(5, timeline(3600, 10), 1, None).1, 5 * 360);
        assert_eq!(all_text(5, timeline(3600, 10), 1, None).2, 5 * 360 * 10);
        assert_eq!(all_text(5, timeline(3600, 60), 1, None).1, 5 * 60);
        // The end is exclusive and a partial last interval is dropped, as in TSBS.
        assert_eq!(all_text(3, timeline(25, 10), 1, None).1, 3 * 2);
        assert_eq!(all_text(3, timeline(30, 10), 1, None).1, 3 * 3);
        assert_eq!(all_text(5, timeline(3600, 10), 1, Some(1001)).1, 1001);
        assert_eq!(all_text(5, timeline(3600, 10), 1, Some(1_000_000)).1, 1800);
        assert_eq!(all_text(0, timeline(3600, 10), 1, None).1, 0);
        assert_eq!(all_text(5, timeline(5, 10), 1, None).1, 0);
    }

    #[test]
    fn every_line_has_ten_tags_ten_integer_fields_and_its_timestamp() {
        let scale = 7;
        let (text, rows, _) = all_text(scale, timeline(600, 10), 99, None);
        let text = String::from_utf8(text).unwrap();
        let mut n = 0u64;
        for (i, line) in text.lines().enumerate() {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 3, "{line}");
            let tags: Vec<&str> = parts[0].split(',').collect();
            assert_eq!(tags[0], "cpu");
            assert_eq!(tags.len(), 11, "{line}");
            for (kv, key) in tags[1..].iter().zip(CPU_TAGS) {
                let (k, v) = kv.split_once('=').unwrap();
                assert_eq!(k, key);
                assert!(!v.is_empty());
            }
            assert_eq!(tags[1], format!("hostname=host_{}", i as u64 % scale));
            let fields: Vec<&str> = parts[1].split(',').collect();
            assert_eq!(fields.len(), 10, "{line}");
            for (kv, key) in fields.iter().zip(CPU_FIELDS) {
                let (k, v) = kv.split_once('=').unwrap();
                assert_eq!(k, key);
                let v: i64 = v.strip_suffix('i').unwrap().parse().unwrap();
                assert!((0..=100).contains(&v), "{line}");
            }
            let ts: i64 = parts[2].parse().unwrap();
            assert_eq!(ts, START + (i as i64 / scale as i64) * 10 * SEC);
            n += 1;
        }
        assert_eq!(n, rows);
        assert_eq!(n, scale * 60);
    }

    #[test]
    fn tags_are_fixed_per_host_and_values_walk() {
        let (text, _, _) = all_text(3, timeline(3600, 10), 5, None);
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let tags = |l: &str| l.split(' ').next().unwrap().to_string();
        let fields = |l: &str| l.split(' ').nth(1).unwrap().to_string();
        for i in 3..lines.len() {
            assert_eq!(tags(lines[i]), tags(lines[i - 3]));
        }
        let changed = (3..lines.len())
            .filter(|&i| fields(lines[i]) != fields(lines[i - 3]))
            .count();
        assert!(changed > lines.len() / 2, "values barely move: {changed}");
        // Steps are standard normal: consecutive values of a host rarely jump far.
        let value = |l: &str| -> i64 {
            fields(l).split(',').next().unwrap()[11..]
                .trim_end_matches('i')
                .parse()
                .unwrap()
        };
        let big = (3..lines.len())
            .filter(|&i| (value(lines[i]) - value(lines[i - 3])).abs() > 5)
            .count();
        assert_eq!(big, 0);
    }
}
