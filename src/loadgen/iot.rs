//! TSBS "iot" data: `scale` trucks send `readings` (position, speed, fuel use) and
//! `diagnostics` (fuel, load, status) every interval, with TSBS's irregularities in a
//! seeded form: dropped batches and entries, late entries and batches, blanked fields and tags.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};

use super::LoadError;
use super::Timeline;
use super::source::{GenRng, LineSource, Normal, push_fixed, push_i64, uniform};

const FLEETS: [&str; 4] = ["East", "West", "North", "South"];
const DRIVERS: [&str; 6] = ["Derek", "Rodney", "Albert", "Andy", "Seth", "Trish"];
const DEVICE_VERSIONS: [&str; 4] = ["v1.0", "v1.5", "v2.0", "v2.3"];
/// Model name with its load capacity, fuel capacity and nominal fuel consumption,
/// written the way Go prints TSBS's float32 values.
const MODELS: [(&str, [&str; 3]); 3] = [
    ("F-150", ["2000", "200", "15"]),
    ("G-2000", ["5000", "300", "19"]),
    ("H-2", ["1500", "150", "12"]),
];

/// TSBS's eight truck "tags". The last three hold numbers, which TSBS's InfluxDB
/// serializer writes as the first fields of the line rather than as tags.
pub const TRUCK_TAGS: [&str; 8] = [
    "name",
    "fleet",
    "driver",
    "model",
    "device_version",
    "load_capacity",
    "fuel_capacity",
    "nominal_fuel_consumption",
];
/// How many of [`TRUCK_TAGS`] are written as string tags.
const STRING_TAGS: usize = 5;

pub const READINGS_FIELDS: [&str; 7] = [
    "latitude",
    "longitude",
    "elevation",
    "velocity",
    "heading",
    "grade",
    "fuel_consumption",
];
pub const DIAGNOSTICS_FIELDS: [&str; 3] = ["fuel_state", "current_load", "status"];

/// A clamped random walk with uniform steps, printed to a fixed number of decimals.
struct Walk {
    step: (f64, f64),
    bounds: (f64, f64),
    decimals: usize,
}

/// `readings` fields, as in TSBS's `iot/readings.go`.
const READINGS: [Walk; 7] = [
    Walk {
        step: (-0.005, 0.005),
        bounds: (-90.0, 90.0),
        decimals: 5,
    },
    Walk {
        step: (-0.005, 0.005),
        bounds: (-180.0, 180.0),
        decimals: 5,
    },
    Walk {
        step: (-10.0, 10.0),
        bounds: (0.0, 5000.0),
        decimals: 0,
    },
    Walk {
        step: (-10.0, 10.0),
        bounds: (0.0, 100.0),
        decimals: 0,
    },
    Walk {
        step: (-5.0, 5.0),
        bounds: (0.0, 360.0),
        decimals: 0,
    },
    Walk {
        step: (-5.0, 5.0),
        bounds: (0.0, 100.0),
        decimals: 0,
    },
    Walk {
        step: (-5.0, 5.0),
        bounds: (0.0, 50.0),
        decimals: 1,
    },
];

// TSBS's batch chances (iot/batch_config.go); a "batch" there is 10 entries.
const GROUP: usize = 10;
const GROUP_MISSING: f64 = 0.01;
const GROUP_LATE: f64 = 0.05;
const INSERT_LATE_GROUP: f64 = 0.5;
const ENTRY_MISSING: f64 = 0.1;
const ENTRY_LATE: f64 = 0.3;
const INSERT_LATE_ENTRY: f64 = 0.5;
const BLANK_FIELD: f64 = 0.1;
const BLANK_TAG: f64 = 0.01;
/// Bounds on what is held back, so memory stays small whatever the luck.
const MAX_LATE_ENTRIES: usize = 1000;
const MAX_LATE_GROUPS: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Readings,
    Diagnostics,
}

struct Truck {
    /// Values of name, fleet, driver, model, device_version.
    tags: [String; STRING_TAGS],
    model: usize,
    readings: [f64; 7],
    fuel: f64,
    load: f64,
    status: f64,
}

/// One finished line waiting to be emitted.
struct Line {
    text: Vec<u8>,
    fields: u32,
}

/// A position in the regular stream: which truck, which measurement, when.
struct Entry {
    truck: usize,
    kind: Kind,
    ts: i64,
}

/// Generates the iot data set: per interval, `readings` for every truck, then
/// `diagnostics` for every truck, reshuffled and thinned as TSBS does.
pub(crate) struct Iot {
    trucks: Vec<Truck>,
    rng: GenRng,
    normal: Normal,
    timeline: Timeline,
    // Position in the regular stream.
    epoch: u64,
    kind: Kind,
    next_truck: usize,
    // Irregular output.
    ready: VecDeque<Line>,
    late_entries: VecDeque<Line>,
    late_groups: VecDeque<Vec<Line>>,
}

fn pick<'a>(rng: &mut GenRng, choices: &[&'a str]) -> &'a str {
    choices[rng.random_range(0..choices.len())]
}

impl Iot {
    pub fn new(scale: u64, timeline: Timeline, seed: u64) -> Result<Self, LoadError> {
        let count =
            usize::try_from(scale).map_err(|_| LoadError::arg("scale", scale, "too large"))?;
        let mut rng = GenRng::seed_from_u64(seed);
        let mut trucks = Vec::with_capacity(count);
        for id in 0..count {
            let readings = [
                rng.random::<f64>() * 90.0,
                rng.random::<f64>() * 180.0,
                rng.random::<f64>() * 500.0,
                0.0,
                rng.random::<f64>() * 360.0,
                0.0,
                25.0,
            ];
            let model = rng.random_range(0..MODELS.len());
            let fleet = pick(&mut rng, &FLEETS);
            let driver = pick(&mut rng, &DRIVERS);
            let version = pick(&mut rng, &DEVICE_VERSIONS);
            trucks.push(Truck {
                tags: [
                    format!("truck_{id}"),
                    fleet.to_string(),
                    driver.to_string(),
                    MODELS[model].0.to_string(),
                    version.to_string(),
                ],
                model,
                readings,
                fuel: 1.0,
                load: 0.0,
                status: 0.0,
            });
        }
        Ok(Iot {
            trucks,
            rng,
            normal: Normal::default(),
            timeline,
            epoch: 0,
            kind: Kind::Readings,
            next_truck: 0,
            ready: VecDeque::new(),
            late_entries: VecDeque::new(),
            late_groups: VecDeque::new(),
        })
    }

    fn base_done(&self) -> bool {
        self.trucks.is_empty() || self.epoch >= self.timeline.epochs
    }

    /// Steps the regular stream: advances the next truck's measurement (from the
    /// second interval on) and says which entry it is.
    fn advance(&mut self) -> Option<Entry> {
        if self.base_done() {
            return None;
        }
        let entry = Entry {
            truck: self.next_truck,
            kind: self.kind,
            ts: self.timeline.at(self.epoch),
        };
        if self.epoch > 0 {
            let truck = &mut self.trucks[entry.truck];
            let rng = &mut self.rng;
            match entry.kind {
                Kind::Readings => {
                    for (state, walk) in truck.readings.iter_mut().zip(&READINGS) {
                        let step = uniform(rng, walk.step.0, walk.step.1);
                        *state = (*state + step).clamp(walk.bounds.0, walk.bounds.1);
                    }
                }
                Kind::Diagnostics => {
                    // Fuel drains slowly and the truck refuels when it is empty.
                    truck.fuel = (truck.fuel + uniform(rng, -0.001, 0.0)).clamp(0.0, 1.0);
                    if truck.fuel == 0.0 {
                        truck.fuel = 1.0;
                    }
                    // The load changes rarely (5%), to anything up to 5000.
                    if rng.random::<f64>() >= 0.95 {
                        truck.load = uniform(rng, 0.0, 5000.0);
                    }
                    truck.status = (truck.status + self.normal.sample(rng)).clamp(0.0, 5.0);
                }
            }
        }
        self.next_truck += 1;
        if self.next_truck == self.trucks.len() {
            self.next_truck = 0;
            match self.kind {
                Kind::Readings => self.kind = Kind::Diagnostics,
                Kind::Diagnostics => {
                    self.kind = Kind::Readings;
                    self.epoch += 1;
                }
            }
        }
        Some(entry)
    }

    /// Writes an entry as line protocol, leaving out tag `skip_tag` (an index into
    /// [`TRUCK_TAGS`]) and field `skip_field` (an index into the measurement's fields).
    fn render(&self, e: &Entry, skip_tag: Option<usize>, skip_field: Option<usize>) -> Line {
        let truck = &self.trucks[e.truck];
        let mut text = Vec::with_capacity(256);
        text.extend_from_slice(match e.kind {
            Kind::Readings => b"readings",
            Kind::Diagnostics => b"diagnostics",
        });
        for (i, value) in truck.tags.iter().enumerate() {
            if skip_tag != Some(i) {
                text.push(b',');
                text.extend_from_slice(TRUCK_TAGS[i].as_bytes());
                text.push(b'=');
                text.extend_from_slice(value.as_bytes());
            }
        }
        text.push(b' ');
        let mut fields = 0u32;
        let mut key = |text: &mut Vec<u8>, name: &str| {
            if fields > 0 {
                text.push(b',');
            }
            fields += 1;
            text.extend_from_slice(name.as_bytes());
            text.push(b'=');
        };
        for (i, value) in MODELS[truck.model].1.iter().enumerate() {
            if skip_tag != Some(STRING_TAGS + i) {
                key(&mut text, TRUCK_TAGS[STRING_TAGS + i]);
                text.extend_from_slice(value.as_bytes());
            }
        }
        match e.kind {
            Kind::Readings => {
                for (i, (state, walk)) in truck.readings.iter().zip(&READINGS).enumerate() {
                    if skip_field != Some(i) {
                        key(&mut text, READINGS_FIELDS[i]);
                        push_fixed(&mut text, *state, walk.decimals);
                    }
                }
            }
            Kind::Diagnostics => {
                if skip_field != Some(0) {
                    key(&mut text, DIAGNOSTICS_FIELDS[0]);
                    push_fixed(&mut text, truck.fuel, 1);
                }
                if skip_field != Some(1) {
                    key(&mut text, DIAGNOSTICS_FIELDS[1]);
                    push_fixed(&mut text, truck.load, 0);
                }
                if skip_field != Some(2) {
                    key(&mut text, DIAGNOSTICS_FIELDS[2]);
                    push_i64(&mut text, truck.status as i64);
                    text.push(b'i');
                }
            }
        }
        text.push(b' ');
        push_i64(&mut text, e.ts);
        text.push(b'\n');
        Line { text, fields }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random::<f64>() < p
    }

    /// Fills `ready` with the next group of lines; leaves it empty at the end.
    fn refill(&mut self) {
        loop {
            if self.base_done() {
                // Flush what was held back: late groups first, then late entries.
                if let Some(group) = self.late_groups.pop_front() {
                    self.ready.extend(group);
                } else {
                    self.ready.extend(self.late_entries.drain(..));
                }
                return;
            }
            if self.chance(GROUP_MISSING) {
                for _ in 0..GROUP {
                    self.advance();
                }
                continue;
            }
            let hold_group = self.chance(GROUP_LATE);
            if !self.late_groups.is_empty()
                && (self.chance(INSERT_LATE_GROUP) || self.late_groups.len() >= MAX_LATE_GROUPS)
            {
                if let Some(group) = self.late_groups.pop_front() {
                    self.ready.extend(group);
                }
                return;
            }
            let mut group = Vec::with_capacity(GROUP);
            while group.len() < GROUP {
                if !self.late_entries.is_empty()
                    && (self.chance(INSERT_LATE_ENTRY)
                        || self.late_entries.len() >= MAX_LATE_ENTRIES)
                {
                    group.extend(self.late_entries.pop_front());
                    continue;
                }
                let Some(entry) = self.advance() else { break };
                if self.chance(ENTRY_MISSING) {
                    continue;
                }
                let field_count = match entry.kind {
                    Kind::Readings => READINGS_FIELDS.len(),
                    Kind::Diagnostics => DIAGNOSTICS_FIELDS.len(),
                };
                let skip_field = self
                    .chance(BLANK_FIELD)
                    .then(|| self.rng.random_range(0..field_count));
                let skip_tag = self
                    .chance(BLANK_TAG)
                    .then(|| self.rng.random_range(0..TRUCK_TAGS.len()));
                let line = self.render(&entry, skip_tag, skip_field);
                if self.chance(ENTRY_LATE) {
                    self.late_entries.push_back(line);
                } else {
                    group.push(line);
                }
            }
            if group.is_empty() {
                continue;
            }
            if hold_group {
                self.late_groups.push_back(group);
            } else {
                self.ready.extend(group);
                return;
            }
        }
    }
}

impl LineSource for Iot {
    fn next_line(&mut self, out: &mut Vec<u8>) -> Result<Option<u32>, LoadError> {
        if self.ready.is_empty() {
            self.refill();
        }
        Ok(self.ready.pop_front().map(|line| {
            out.extend_from_slice(&line.text);
            line.fields
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::source::Batcher;
    use super::*;

    const START: i64 = 1_451_606_400_000_000_000;
    const SEC: i64 = 1_000_000_000;

    fn generate(scale: u64, seconds: i64, seed: u64, limit: Option<u64>) -> (String, u64, u64) {
        let tl = Timeline::new(START, START + seconds * SEC, 10 * SEC);
        let mut b = Batcher::new(Iot::new(scale, tl, seed).unwrap(), 333, limit);
        let (mut text, mut rows, mut metrics) = (Vec::new(), 0, 0);
        while let Some(batch) = b.next_batch().unwrap() {
            text.extend_from_slice(&batch.body);
            rows += batch.rows;
            metrics += batch.metrics;
        }
        (String::from_utf8(text).unwrap(), rows, metrics)
    }

    #[test]
    fn deterministic_for_a_seed() {
        let a = generate(10, 3600, 123, None);
        assert_eq!(a, generate(10, 3600, 123, None));
        assert_ne!(a.0, generate(10, 3600, 321, None).0);
    }

    #[test]
    fn lines_are_well_formed() {
        let (text, rows, metrics) = generate(20, 3600, 7, None);
        let (mut n, mut counted) = (0u64, 0u64);
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 3, "{line}");
            let mut series = parts[0].split(',');
            let measurement = series.next().unwrap();
            let allowed: &[&str] = match measurement {
                "readings" => &READINGS_FIELDS,
                "diagnostics" => &DIAGNOSTICS_FIELDS,
                other => panic!("measurement {other}"),
            };
            let tag_keys: Vec<&str> = series.map(|kv| kv.split_once('=').unwrap().0).collect();
            assert!(tag_keys.len() >= STRING_TAGS - 1, "{line}");
            assert!(
                tag_keys
                    .iter()
                    .all(|k| TRUCK_TAGS[..STRING_TAGS].contains(k)),
                "{line}"
            );
            let fields: Vec<&str> = parts[1].split(',').collect();
            assert!(fields.len() >= allowed.len() - 1, "{line}");
            for kv in &fields {
                let (k, v) = kv.split_once('=').unwrap();
                if k == "status" {
                    let s: i64 = v.strip_suffix('i').unwrap().parse().unwrap();
                    assert!((0..=5).contains(&s), "{line}");
                } else {
                    assert!(
                        allowed.contains(&k) || TRUCK_TAGS[STRING_TAGS..].contains(&k),
                        "{line}"
                    );
                    let x: f64 = v.parse().unwrap();
                    assert!(x.is_finite(), "{line}");
                }
            }
            let ts: i64 = parts[2].parse().unwrap();
            assert!((START..START + 3600 * SEC).contains(&ts) && (ts - START) % (10 * SEC) == 0);
            n += 1;
            counted += fields.len() as u64;
        }
        assert_eq!(n, rows);
        assert_eq!(counted, metrics);
    }

    #[test]
    fn irregularities_appear_in_tsbs_proportions() {
        let (scale, seconds) = (50u64, 3600i64);
        let (text, rows, _) = generate(scale, seconds, 11, None);
        let regular = scale * 2 * (seconds as u64 / 10);
        // About 1% of groups and 10% of entries are dropped.
        assert!(
            rows > regular * 80 / 100 && rows < regular * 95 / 100,
            "{rows} of {regular}"
        );
        let (mut missing_tag, mut missing_field, mut late, mut max_ts) = (0, 0, 0, 0i64);
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let tags = parts[0].split(',').count() - 1;
            let keys: Vec<&str> = parts[1]
                .split(',')
                .map(|kv| kv.split_once('=').unwrap().0)
                .collect();
            let numeric_tags = keys
                .iter()
                .filter(|k| TRUCK_TAGS[STRING_TAGS..].contains(k))
                .count();
            let own_fields = keys.len() - numeric_tags;
            let readings = parts[0].starts_with("readings");
            let full = if readings {
                READINGS_FIELDS.len()
            } else {
                DIAGNOSTICS_FIELDS.len()
            };
            if tags < STRING_TAGS || numeric_tags < 3 {
                missing_tag += 1;
            }
            if own_fields < full {
                missing_field += 1;
            }
            let ts: i64 = parts[2].parse().unwrap();
            if ts < max_ts {
                late += 1;
            }
            max_ts = max_ts.max(ts);
            // No entry is ever emitted twice.
            let name = parts[0].split(',').find(|kv| kv.starts_with("name="));
            if let Some(name) = name {
                assert!(
                    seen.insert((readings, name.to_string(), ts)),
                    "duplicate: {line}"
                );
            }
        }
        let rows = rows as usize;
        assert!(
            missing_field > rows / 20 && missing_field < rows / 5,
            "{missing_field} missing fields"
        );
        assert!(
            missing_tag > rows / 300 && missing_tag < rows / 30,
            "{missing_tag} missing tags"
        );
        assert!(late > rows / 100, "{late} late rows");
    }

    #[test]
    fn limit_and_empty_inputs() {
        assert_eq!(generate(10, 3600, 1, Some(777)).1, 777);
        assert_eq!(generate(0, 3600, 1, None).1, 0);
        assert_eq!(generate(10, 5, 1, None).1, 0);
        // One interval of one truck: at most its two lines.
        assert!(generate(1, 10, 1, None).1 <= 2);
    }
}
