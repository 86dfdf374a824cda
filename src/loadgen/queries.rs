//! TSBS query generation (`tsbs_generate_queries`, TimescaleDB flavour) for the single-table
//! schema `sundial bench load` creates: the 15 devops and 12 iot query types, with random
//! hosts, fleets and time windows drawn from a seed, written in SQL that PostgreSQL 15 also runs.

use std::fmt::Write as _;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::UseCase;
use super::devops::CPU_FIELDS;

const MINUTE_US: i64 = 60 * 1_000_000;
const HOUR_US: i64 = 60 * MINUTE_US;

/// TSBS's fleets (`iot.FleetChoices`), the same ones the iot data generator writes.
const FLEETS: [&str; 4] = ["East", "West", "North", "South"];

/// A ten-minute bucket in SQL that PostgreSQL 15 (no `time_bucket`) and Sundial both run:
/// `date_bin` with the epoch as origin, which aligns with `time_bucket('10 minutes', time)`.
const TEN_MINUTES: &str =
    "date_bin(INTERVAL '10 minutes', time, TIMESTAMPTZ '1970-01-01 00:00:00+00')";

/// Which SQL the iot queries are written in.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// Over the line-protocol tables alone (tags are columns): PostgreSQL 15 and
    /// Sundial run it as written.
    #[default]
    Sundial,
    /// TSBS's TimescaleDB text: trucks from a small `tags` table ([`IOT_TAGS_SETUP`])
    /// joined to `readings` / `diagnostics` by name (TSBS joins by `tags_id`), with
    /// `INNER JOIN LATERAL … ORDER BY time DESC LIMIT 1`, `time_bucket` and
    /// `avg(age(…))`; an ORDER BY is added where TSBS leaves the row order open, so
    /// answers compare. Needs `time_bucket` on the other server too.
    Timescaledb,
}

/// Creates and fills the `tags` table the TimescaleDB dialect reads (one row per
/// truck), when it is missing or empty.
pub const IOT_TAGS_SETUP: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS tags (name text, fleet text, driver text, model text, \
     device_version text, load_capacity double precision, fuel_capacity double precision, \
     nominal_fuel_consumption double precision)",
    "INSERT INTO tags SELECT name, max(fleet), max(driver), max(model), max(device_version), \
     max(load_capacity), max(fuel_capacity), max(nominal_fuel_consumption) FROM readings \
     WHERE name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tags) GROUP BY name",
];

/// What one query type asks, with TSBS's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryShape {
    /// `single-groupby-M-H-T`: max of `metrics` fields per minute for `hosts` random hosts
    /// over a random `hours`-hour window.
    SingleGroupby {
        metrics: usize,
        hosts: usize,
        hours: i64,
    },
    /// `cpu-max-all-H`: max of every field per hour for `hosts` hosts over 8 hours.
    MaxAllCpu { hosts: usize, hours: i64 },
    /// `double-groupby-M`: mean of `metrics` fields per hour and host over 12 hours.
    DoubleGroupby { metrics: usize },
    /// `high-cpu-H`: rows with usage_user > 90 over 12 hours, for `hosts` hosts (0: all).
    HighCpu { hosts: usize },
    /// `groupby-orderby-limit`: the last five minutes' max before a random time.
    GroupbyOrderbyLimit,
    /// `lastpoint`: the newest row of every host.
    Lastpoint,
    /// `last-loc`: the newest position of every truck of a random fleet.
    LastLoc,
    /// `low-fuel`: trucks of a fleet whose newest fuel state is under 10%.
    LowFuel,
    /// `high-load`: trucks of a fleet whose newest load is over 90% of capacity.
    HighLoad,
    /// `stationary-trucks`: trucks of a fleet averaging under 1 km/h over 10 minutes.
    StationaryTrucks,
    /// `long-driving-sessions`: trucks of a fleet that drove more than 22 of the
    /// ten-minute periods of a random 4-hour window.
    LongDrivingSessions,
    /// `long-daily-sessions`: the same over 24 hours with more than 60 periods.
    LongDailySessions,
    /// `avg-vs-projected-fuel-consumption`: mean vs nominal fuel consumption per fleet.
    AvgVsProjectedFuelConsumption,
    /// `avg-daily-driving-duration`: mean hours driven per day per driver.
    AvgDailyDrivingDuration,
    /// `avg-daily-driving-session`: mean length of a driving session per truck and day.
    AvgDailyDrivingSession,
    /// `avg-load`: mean load share per fleet, model and capacity.
    AvgLoad,
    /// `daily-activity`: share of each day trucks were in service, per fleet and model.
    DailyActivity,
    /// `breakdown-frequency`: how often trucks of each model broke down.
    BreakdownFrequency,
}

/// A named TSBS query type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryType {
    /// TSBS's name, e.g. `single-groupby-1-1-1`.
    pub name: &'static str,
    pub shape: QueryShape,
}

const fn qt(name: &'static str, shape: QueryShape) -> QueryType {
    QueryType { name, shape }
}

/// The devops (cpu-only) query types, in TSBS's order.
pub const DEVOPS_TYPES: [QueryType; 15] = {
    use QueryShape::*;
    [
        qt(
            "single-groupby-1-1-1",
            SingleGroupby {
                metrics: 1,
                hosts: 1,
                hours: 1,
            },
        ),
        qt(
            "single-groupby-1-1-12",
            SingleGroupby {
                metrics: 1,
                hosts: 1,
                hours: 12,
            },
        ),
        qt(
            "single-groupby-1-8-1",
            SingleGroupby {
                metrics: 1,
                hosts: 8,
                hours: 1,
            },
        ),
        qt(
            "single-groupby-5-1-1",
            SingleGroupby {
                metrics: 5,
                hosts: 1,
                hours: 1,
            },
        ),
        qt(
            "single-groupby-5-1-12",
            SingleGroupby {
                metrics: 5,
                hosts: 1,
                hours: 12,
            },
        ),
        qt(
            "single-groupby-5-8-1",
            SingleGroupby {
                metrics: 5,
                hosts: 8,
                hours: 1,
            },
        ),
        qt("cpu-max-all-1", MaxAllCpu { hosts: 1, hours: 8 }),
        qt("cpu-max-all-8", MaxAllCpu { hosts: 8, hours: 8 }),
        qt("double-groupby-1", DoubleGroupby { metrics: 1 }),
        qt("double-groupby-5", DoubleGroupby { metrics: 5 }),
        qt("double-groupby-all", DoubleGroupby { metrics: 10 }),
        qt("high-cpu-1", HighCpu { hosts: 1 }),
        qt("high-cpu-all", HighCpu { hosts: 0 }),
        qt("groupby-orderby-limit", GroupbyOrderbyLimit),
        qt("lastpoint", Lastpoint),
    ]
};

/// The iot query types, in TSBS's order.
pub const IOT_TYPES: [QueryType; 12] = {
    use QueryShape::*;
    [
        qt("last-loc", LastLoc),
        qt("low-fuel", LowFuel),
        qt("high-load", HighLoad),
        qt("stationary-trucks", StationaryTrucks),
        qt("long-driving-sessions", LongDrivingSessions),
        qt("long-daily-sessions", LongDailySessions),
        qt(
            "avg-vs-projected-fuel-consumption",
            AvgVsProjectedFuelConsumption,
        ),
        qt("avg-daily-driving-duration", AvgDailyDrivingDuration),
        qt("avg-daily-driving-session", AvgDailyDrivingSession),
        qt("avg-load", AvgLoad),
        qt("daily-activity", DailyActivity),
        qt("breakdown-frequency", BreakdownFrequency),
    ]
};

/// The query types of a use case.
pub fn query_types(use_case: UseCase) -> &'static [QueryType] {
    match use_case {
        UseCase::CpuOnly => &DEVOPS_TYPES,
        UseCase::Iot => &IOT_TYPES,
    }
}

/// Why query types or queries cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenerateError {
    #[error("unknown query type {name:?} for this use case; known: {known}")]
    UnknownType { name: String, known: String },
    #[error("no query types selected")]
    NoTypes,
    #[error("{query_type} needs {needed} hosts but --scale is {scale}")]
    ScaleTooSmall {
        query_type: &'static str,
        needed: usize,
        scale: u64,
    },
    #[error("the data window is empty (--timestamp-end must be after --timestamp-start)")]
    EmptyWindow,
}

/// Picks types by a comma-separated list of names, or `all`; unknown names are errors.
pub fn select_types(
    use_case: UseCase,
    list: &str,
) -> Result<Vec<&'static QueryType>, GenerateError> {
    let known = query_types(use_case);
    if list.trim().eq_ignore_ascii_case("all") {
        return Ok(known.iter().collect());
    }
    let mut out: Vec<&'static QueryType> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let ty =
            known
                .iter()
                .find(|t| t.name == name)
                .ok_or_else(|| GenerateError::UnknownType {
                    name: name.to_string(),
                    known: known.iter().map(|t| t.name).collect::<Vec<_>>().join(", "),
                })?;
        if !out.contains(&ty) {
            out.push(ty);
        }
    }
    if out.is_empty() {
        return Err(GenerateError::NoTypes);
    }
    Ok(out)
}

/// One generated query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The type's TSBS name.
    pub query_type: &'static str,
    /// TSBS's human description with the random choices.
    pub description: String,
    pub sql: String,
    /// The time window the query filters on, `[start, end)` in microseconds since the
    /// epoch (`None` when it reads all the data).
    pub window: Option<(i64, i64)>,
}

/// Makes TSBS queries over data from `start_us` (inclusive) to `end_us` (exclusive) for
/// `scale` hosts or trucks; the same seed gives the same queries.
#[derive(Debug, Clone, Copy)]
pub struct QueryGenerator {
    start_us: i64,
    end_us: i64,
    scale: u64,
    seed: u64,
    dialect: Dialect,
}

/// FNV-1a, so each type draws from its own stream whatever else is selected.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, which PostgreSQL and Sundial both read as a timestamptz.
pub fn format_time_us(us: i64) -> String {
    match chrono::DateTime::from_timestamp_micros(us) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        None => us.to_string(),
    }
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// TSBS's `tenMinutePeriods`: ten-minute periods in `hours` when resting
/// `rest_minutes_per_hour` minutes of each hour.
fn ten_minute_periods(rest_minutes_per_hour: i64, hours: i64) -> i64 {
    (hours * 60 - rest_minutes_per_hour * hours) / 10
}

impl QueryGenerator {
    pub fn new(start_us: i64, end_us: i64, scale: u64, seed: u64) -> Result<Self, GenerateError> {
        if end_us <= start_us {
            return Err(GenerateError::EmptyWindow);
        }
        Ok(QueryGenerator {
            start_us,
            end_us,
            scale,
            seed,
            dialect: Dialect::default(),
        })
    }

    /// The same generator writing the iot queries in `dialect`.
    pub fn with_dialect(self, dialect: Dialect) -> Self {
        QueryGenerator { dialect, ..self }
    }

    /// `count` queries of type `ty`.
    pub fn generate(&self, ty: &QueryType, count: usize) -> Result<Vec<Query>, GenerateError> {
        let needed = match ty.shape {
            QueryShape::SingleGroupby { hosts, .. } | QueryShape::MaxAllCpu { hosts, .. } => hosts,
            QueryShape::HighCpu { hosts } => hosts,
            _ => 0,
        };
        if needed as u64 > self.scale {
            return Err(GenerateError::ScaleTooSmall {
                query_type: ty.name,
                needed,
                scale: self.scale,
            });
        }
        let mut rng = SmallRng::seed_from_u64(self.seed ^ name_hash(ty.name));
        let mut clamped = false;
        let queries = (0..count)
            .map(|_| self.one(ty, &mut rng, &mut clamped))
            .collect();
        if clamped {
            tracing::warn!(
                query_type = ty.name,
                "the data covers less than the query's window: using the whole data range"
            );
        }
        Ok(queries)
    }

    /// A uniformly random window of `len_us` inside the data, as TSBS's `RandWindow`;
    /// the whole range when the data is shorter than the window.
    fn window(&self, rng: &mut SmallRng, len_us: i64, clamped: &mut bool) -> (i64, i64) {
        let span = self.end_us - self.start_us;
        if len_us >= span {
            *clamped = true;
            return (self.start_us, self.end_us);
        }
        let start = self.start_us + rng.random_range(0..span - len_us);
        (start, start + len_us)
    }

    /// `n` distinct random host names (`host_N` for N < scale), as TSBS's `GetRandomSubsetPerm`.
    fn hosts(&self, rng: &mut SmallRng, n: usize) -> Vec<String> {
        let mut picked: Vec<u64> = Vec::with_capacity(n);
        while picked.len() < n {
            let candidate = rng.random_range(0..self.scale);
            if !picked.contains(&candidate) {
                picked.push(candidate);
            }
        }
        picked.into_iter().map(|n| format!("host_{n}")).collect()
    }

    /// TSBS's TimescaleDB text of an iot type (see [`Dialect::Timescaledb`]), drawing
    /// its parameters in the same order as the Sundial text does.
    fn timescaledb(&self, ty: &QueryType, rng: &mut SmallRng, clamped: &mut bool) -> Option<Query> {
        let newest = |column: &str, table: &str, fleet: &str, extra: &str| {
            format!(
                "SELECT t.name AS name, t.driver AS driver, r.*\n\
                 FROM tags t INNER JOIN LATERAL\n  \
                   (SELECT {column}\n   \
                    FROM {table} r\n   \
                    WHERE r.name = t.name\n   \
                    ORDER BY time DESC LIMIT 1) r ON true\n\
                 WHERE t.name IS NOT NULL{extra}\n\
                 AND t.fleet = '{fleet}'\n\
                 ORDER BY 1"
            )
        };
        let (description, sql, window) = match ty.shape {
            QueryShape::LastLoc => {
                let fleet = Self::fleet(rng);
                (
                    format!("TimescaleDB last location per truck, fleet {fleet}"),
                    newest("longitude, latitude", "readings", fleet, ""),
                    None,
                )
            }
            QueryShape::LowFuel => {
                let fleet = Self::fleet(rng);
                (
                    format!("TimescaleDB trucks with low fuel, fleet {fleet}"),
                    newest("fuel_state", "diagnostics", fleet, "\nAND r.fuel_state < 0.1"),
                    None,
                )
            }
            QueryShape::HighLoad => {
                let fleet = Self::fleet(rng);
                let sql = newest(
                    "current_load",
                    "diagnostics",
                    fleet,
                    "\nAND r.current_load / t.load_capacity > 0.9",
                )
                .replace("r.*", "r.*, t.load_capacity");
                (
                    format!("TimescaleDB trucks with high load, fleet {fleet}"),
                    sql,
                    None,
                )
            }
            QueryShape::StationaryTrucks => {
                let window = self.window(rng, 10 * MINUTE_US, clamped);
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT t.name AS name, t.driver AS driver\n\
                     FROM tags t\n\
                     INNER JOIN readings r ON r.name = t.name\n\
                     WHERE time >= '{}' AND time < '{}'\n\
                     AND t.name IS NOT NULL\n\
                     AND t.fleet = '{fleet}'\n\
                     GROUP BY 1, 2\n\
                     HAVING avg(r.velocity) < 1\n\
                     ORDER BY 1, 2",
                    format_time_us(window.0),
                    format_time_us(window.1),
                );
                (
                    format!("TimescaleDB stationary trucks, fleet {fleet}"),
                    sql,
                    Some(window),
                )
            }
            QueryShape::LongDrivingSessions | QueryShape::LongDailySessions => {
                let (hours, rest) = if ty.shape == QueryShape::LongDrivingSessions {
                    (4, 5)
                } else {
                    (24, 35)
                };
                let window = self.window(rng, hours * HOUR_US, clamped);
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT t.name AS name, t.driver AS driver\n\
                     FROM tags t\n\
                     INNER JOIN LATERAL\n  \
                       (SELECT time_bucket('10 minutes', time) AS ten_minutes, name\n   \
                        FROM readings\n   \
                        WHERE time >= '{}' AND time < '{}'\n   \
                        GROUP BY ten_minutes, name\n   \
                        HAVING avg(velocity) > 1\n   \
                        ORDER BY ten_minutes, name) AS r ON t.name = r.name\n\
                     WHERE t.name IS NOT NULL\n\
                     AND t.fleet = '{fleet}'\n\
                     GROUP BY t.name, driver\n\
                     HAVING count(r.ten_minutes) > {}\n\
                     ORDER BY 1, 2",
                    format_time_us(window.0),
                    format_time_us(window.1),
                    ten_minute_periods(rest, hours),
                );
                (
                    format!("TimescaleDB trucks with longer sessions ({hours}h), fleet {fleet}"),
                    sql,
                    Some(window),
                )
            }
            QueryShape::AvgVsProjectedFuelConsumption => (
                "TimescaleDB average vs projected fuel consumption per fleet".into(),
                "SELECT t.fleet AS fleet, avg(r.fuel_consumption) AS avg_fuel_consumption,\n\
                   avg(t.nominal_fuel_consumption) AS projected_fuel_consumption\n\
                 FROM tags t\n\
                 INNER JOIN LATERAL (SELECT name, fuel_consumption FROM readings r\n\
                   WHERE r.name = t.name AND velocity > 1) r ON true\n\
                 WHERE t.fleet IS NOT NULL\n\
                 AND t.nominal_fuel_consumption IS NOT NULL\n\
                 AND t.name IS NOT NULL\n\
                 GROUP BY fleet\n\
                 ORDER BY fleet"
                    .into(),
                None,
            ),
            QueryShape::AvgDailyDrivingDuration => (
                "TimescaleDB average driver driving duration per day".into(),
                "WITH ten_minute_driving_sessions AS (\n  \
                   SELECT time_bucket('10 minutes', time) AS ten_minutes, name\n  \
                   FROM readings r\n  \
                   GROUP BY name, ten_minutes\n  \
                   HAVING avg(velocity) > 1\n\
                 ), daily_total_session AS (\n  \
                   SELECT time_bucket('24 hours', ten_minutes) AS day, name, count(*) / 6 AS hours\n  \
                   FROM ten_minute_driving_sessions\n  \
                   GROUP BY day, name\n\
                 )\n\
                 SELECT t.fleet AS fleet, t.name AS name, t.driver AS driver, avg(d.hours) AS avg_daily_hours\n\
                 FROM daily_total_session d\n\
                 INNER JOIN tags t ON t.name = d.name\n\
                 GROUP BY fleet, t.name, driver\n\
                 ORDER BY 1, 2, 3"
                    .into(),
                None,
            ),
            QueryShape::AvgDailyDrivingSession => (
                "TimescaleDB average driver driving session without stopping per day".into(),
                "WITH driver_status AS (\n  \
                   SELECT name, time_bucket('10 mins', time) AS ten_minutes, avg(velocity) > 5 AS driving\n  \
                   FROM readings\n  \
                   GROUP BY name, ten_minutes\n  \
                   ORDER BY name, ten_minutes\n\
                 ), driver_status_change AS (\n  \
                   SELECT name, ten_minutes AS start,\n    \
                     lead(ten_minutes) OVER (PARTITION BY name ORDER BY ten_minutes) AS stop, driving\n  \
                   FROM (\n    \
                     SELECT name, ten_minutes, driving,\n      \
                       lag(driving) OVER (PARTITION BY name ORDER BY ten_minutes) AS prev_driving\n    \
                     FROM driver_status\n  \
                   ) x\n  \
                   WHERE x.driving <> x.prev_driving\n\
                 )\n\
                 SELECT t.name AS name, time_bucket('24 hours', start) AS day, avg(age(stop, start)) AS duration\n\
                 FROM tags t\n\
                 INNER JOIN driver_status_change d ON t.name = d.name\n\
                 WHERE t.name IS NOT NULL\n\
                 AND d.driving = true\n\
                 GROUP BY t.name, day\n\
                 ORDER BY t.name, day"
                    .into(),
                None,
            ),
            QueryShape::AvgLoad => (
                "TimescaleDB average load per truck model per fleet".into(),
                "SELECT t.fleet AS fleet, t.model AS model, t.load_capacity AS load_capacity,\n  \
                   avg(d.avg_load / t.load_capacity) AS avg_load_percentage\n\
                 FROM tags t\n\
                 INNER JOIN (\n  \
                   SELECT name, avg(current_load) AS avg_load\n  \
                   FROM diagnostics d\n  \
                   GROUP BY name\n\
                 ) d ON t.name = d.name\n\
                 WHERE t.name IS NOT NULL\n\
                 GROUP BY fleet, model, load_capacity\n\
                 ORDER BY 1, 2, 3"
                    .into(),
                None,
            ),
            QueryShape::DailyActivity => (
                "TimescaleDB daily truck activity per fleet per model".into(),
                "SELECT t.fleet AS fleet, t.model AS model, y.day, sum(y.ten_mins_per_day) / 144 AS daily_activity\n\
                 FROM tags t\n\
                 INNER JOIN (\n  \
                   SELECT time_bucket('24 hours', time) AS day, time_bucket('10 minutes', time) AS ten_minutes,\n    \
                     name, count(*) AS ten_mins_per_day\n  \
                   FROM diagnostics\n  \
                   GROUP BY day, ten_minutes, name\n  \
                   HAVING avg(status) < 1\n\
                 ) y ON y.name = t.name\n\
                 WHERE t.name IS NOT NULL\n\
                 GROUP BY fleet, model, y.day\n\
                 ORDER BY y.day, 1, 2"
                    .into(),
                None,
            ),
            QueryShape::BreakdownFrequency => (
                "TimescaleDB truck breakdown frequency per model".into(),
                "WITH breakdown_per_truck_per_ten_minutes AS (\n  \
                   SELECT time_bucket('10 minutes', time) AS ten_minutes, name,\n    \
                     count(status = 0) / count(*) >= 0.5 AS broken_down\n  \
                   FROM diagnostics\n  \
                   GROUP BY ten_minutes, name\n\
                 ), breakdowns_per_truck AS (\n  \
                   SELECT ten_minutes, name, broken_down,\n    \
                     lead(broken_down) OVER (PARTITION BY name ORDER BY ten_minutes) AS next_broken_down\n  \
                   FROM breakdown_per_truck_per_ten_minutes\n\
                 )\n\
                 SELECT t.model AS model, count(*)\n\
                 FROM tags t\n\
                 INNER JOIN breakdowns_per_truck b ON t.name = b.name\n\
                 WHERE t.name IS NOT NULL\n\
                 AND broken_down = false AND next_broken_down = true\n\
                 GROUP BY model\n\
                 ORDER BY 1"
                    .into(),
                None,
            ),
            _ => return None,
        };
        Some(Query {
            query_type: ty.name,
            description,
            sql,
            window,
        })
    }

    fn fleet(rng: &mut SmallRng) -> &'static str {
        FLEETS[rng.random_range(0..FLEETS.len())]
    }

    fn one(&self, ty: &QueryType, rng: &mut SmallRng, clamped: &mut bool) -> Query {
        if self.dialect == Dialect::Timescaledb
            && let Some(q) = self.timescaledb(ty, rng, clamped)
        {
            return q;
        }
        let (description, sql, window) = match ty.shape {
            QueryShape::SingleGroupby {
                metrics,
                hosts,
                hours,
            } => {
                let window = self.window(rng, hours * HOUR_US, clamped);
                let hosts = self.hosts(rng, hosts);
                let sql = format!(
                    "SELECT date_trunc('minute', time) AS minute,\n       {}\n\
                     FROM cpu\n\
                     WHERE hostname IN ({}) AND time >= '{}' AND time < '{}'\n\
                     GROUP BY minute ORDER BY minute ASC",
                    aggregates("max", &CPU_FIELDS[..metrics]),
                    quoted_list(&hosts),
                    format_time_us(window.0),
                    format_time_us(window.1),
                );
                let label = format!(
                    "{metrics} cpu metric(s), random {:4} hosts, random {hours}h0m0s by 1m",
                    hosts.len()
                );
                (label, sql, Some(window))
            }
            QueryShape::MaxAllCpu { hosts, hours } => {
                let window = self.window(rng, hours * HOUR_US, clamped);
                let hosts = self.hosts(rng, hosts);
                let sql = format!(
                    "SELECT date_trunc('hour', time) AS hour,\n       {}\n\
                     FROM cpu\n\
                     WHERE hostname IN ({}) AND time >= '{}' AND time < '{}'\n\
                     GROUP BY hour ORDER BY hour",
                    aggregates("max", &CPU_FIELDS),
                    quoted_list(&hosts),
                    format_time_us(window.0),
                    format_time_us(window.1),
                );
                let label = format!(
                    "max of all CPU metrics, random {:4} hosts, random {hours}h0m0s by 1h",
                    hosts.len()
                );
                (label, sql, Some(window))
            }
            QueryShape::DoubleGroupby { metrics } => {
                let window = self.window(rng, 12 * HOUR_US, clamped);
                let fields = &CPU_FIELDS[..metrics];
                let averages = fields
                    .iter()
                    .map(|f| format!("avg({f}) AS mean_{f}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let means = fields
                    .iter()
                    .map(|f| format!("mean_{f}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let sql = format!(
                    "WITH cpu_avg AS (\n  \
                       SELECT date_trunc('hour', time) AS hour, hostname,\n         {averages}\n  \
                       FROM cpu\n  \
                       WHERE time >= '{}' AND time < '{}'\n  \
                       GROUP BY 1, 2\n\
                     )\n\
                     SELECT hour, hostname, {means}\n\
                     FROM cpu_avg\n\
                     ORDER BY hour, hostname",
                    format_time_us(window.0),
                    format_time_us(window.1),
                );
                let label = format!("mean of {metrics} metrics, all hosts, random 12h0m0s by 1h");
                (label, sql, Some(window))
            }
            QueryShape::HighCpu { hosts } => {
                let window = self.window(rng, 12 * HOUR_US, clamped);
                let (host_filter, label) = if hosts == 0 {
                    (String::new(), "CPU over threshold, all hosts".to_string())
                } else {
                    let hosts = self.hosts(rng, hosts);
                    (
                        format!(" AND hostname IN ({})", quoted_list(&hosts)),
                        format!("CPU over threshold, {} host(s)", hosts.len()),
                    )
                };
                let sql = format!(
                    "SELECT * FROM cpu\n\
                     WHERE usage_user > 90.0 AND time >= '{}' AND time < '{}'{host_filter}\n\
                     ORDER BY time, hostname",
                    format_time_us(window.0),
                    format_time_us(window.1),
                );
                (label, sql, Some(window))
            }
            QueryShape::GroupbyOrderbyLimit => {
                let window = self.window(rng, HOUR_US, clamped);
                let sql = format!(
                    "SELECT date_trunc('minute', time) AS minute, max(usage_user)\n\
                     FROM cpu\n\
                     WHERE time < '{}'\n\
                     GROUP BY minute\n\
                     ORDER BY minute DESC\n\
                     LIMIT 5",
                    format_time_us(window.1),
                );
                let label = "max cpu over last 5 min-intervals (random end)".to_string();
                (label, sql, Some((self.start_us, window.1)))
            }
            QueryShape::Lastpoint => (
                "last row per host".to_string(),
                "SELECT DISTINCT ON (hostname) * FROM cpu ORDER BY hostname, time DESC".to_string(),
                None,
            ),
            QueryShape::LastLoc => {
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT DISTINCT ON (name) name, driver, longitude, latitude\n\
                     FROM readings\n\
                     WHERE name IS NOT NULL AND fleet = '{fleet}'\n\
                     ORDER BY name, time DESC"
                );
                (format!("last location per truck, fleet {fleet}"), sql, None)
            }
            QueryShape::LowFuel => {
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT name, driver, fuel_state\n\
                     FROM (\n  \
                       SELECT DISTINCT ON (name) name, driver, fuel_state\n  \
                       FROM diagnostics\n  \
                       WHERE name IS NOT NULL AND fleet = '{fleet}'\n  \
                       ORDER BY name, time DESC\n\
                     ) d\n\
                     WHERE fuel_state < 0.1\n\
                     ORDER BY name"
                );
                (
                    format!("trucks with low fuel: under 10 percent, fleet {fleet}"),
                    sql,
                    None,
                )
            }
            QueryShape::HighLoad => {
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT name, driver, current_load, load_capacity\n\
                     FROM (\n  \
                       SELECT DISTINCT ON (name) name, driver, current_load, load_capacity\n  \
                       FROM diagnostics\n  \
                       WHERE name IS NOT NULL AND fleet = '{fleet}'\n  \
                       ORDER BY name, time DESC\n\
                     ) d\n\
                     WHERE current_load / load_capacity > 0.9\n\
                     ORDER BY name"
                );
                (
                    format!("trucks with high load: over 90 percent, fleet {fleet}"),
                    sql,
                    None,
                )
            }
            QueryShape::StationaryTrucks => {
                let window = self.window(rng, 10 * MINUTE_US, clamped);
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT name, driver\n\
                     FROM readings\n\
                     WHERE time >= '{}' AND time < '{}'\n  \
                       AND name IS NOT NULL AND fleet = '{fleet}'\n\
                     GROUP BY 1, 2\n\
                     HAVING avg(velocity) < 1\n\
                     ORDER BY 1, 2",
                    format_time_us(window.0),
                    format_time_us(window.1),
                );
                (
                    format!("stationary trucks: low avg velocity in 10 minutes, fleet {fleet}"),
                    sql,
                    Some(window),
                )
            }
            QueryShape::LongDrivingSessions | QueryShape::LongDailySessions => {
                let (hours, rest, what) = if ty.shape == QueryShape::LongDrivingSessions {
                    (4, 5, "stopped less than 20 mins in 4 hour period")
                } else {
                    (24, 35, "drove more than 10 hours in 24 hours")
                };
                let window = self.window(rng, hours * HOUR_US, clamped);
                let fleet = Self::fleet(rng);
                let sql = format!(
                    "SELECT name, driver\n\
                     FROM (\n  \
                       SELECT name, driver, {TEN_MINUTES} AS ten_minutes\n  \
                       FROM readings\n  \
                       WHERE time >= '{}' AND time < '{}'\n    \
                         AND name IS NOT NULL AND fleet = '{fleet}'\n  \
                       GROUP BY name, driver, ten_minutes\n  \
                       HAVING avg(velocity) > 1\n\
                     ) r\n\
                     GROUP BY name, driver\n\
                     HAVING count(r.ten_minutes) > {}\n\
                     ORDER BY name, driver",
                    format_time_us(window.0),
                    format_time_us(window.1),
                    ten_minute_periods(rest, hours),
                );
                (
                    format!("trucks with longer driving sessions: {what}, fleet {fleet}"),
                    sql,
                    Some(window),
                )
            }
            QueryShape::AvgVsProjectedFuelConsumption => (
                "average vs projected fuel consumption per fleet".to_string(),
                "SELECT fleet, avg(fuel_consumption) AS avg_fuel_consumption,\n       \
                   avg(nominal_fuel_consumption) AS projected_fuel_consumption\n\
                 FROM readings\n\
                 WHERE velocity > 1 AND fleet IS NOT NULL\n  \
                   AND nominal_fuel_consumption IS NOT NULL AND name IS NOT NULL\n\
                 GROUP BY fleet\n\
                 ORDER BY fleet"
                    .to_string(),
                None,
            ),
            QueryShape::AvgDailyDrivingDuration => (
                "average driver driving duration per day".to_string(),
                format!(
                    "WITH ten_minute_driving_sessions AS (\n  \
                       SELECT {TEN_MINUTES} AS ten_minutes, fleet, name, driver\n  \
                       FROM readings\n  \
                       WHERE name IS NOT NULL\n  \
                       GROUP BY fleet, name, driver, ten_minutes\n  \
                       HAVING avg(velocity) > 1\n\
                     ), daily_total_session AS (\n  \
                       SELECT date_trunc('day', ten_minutes) AS day, fleet, name, driver,\n         \
                         count(*) / 6 AS hours\n  \
                       FROM ten_minute_driving_sessions\n  \
                       GROUP BY day, fleet, name, driver\n\
                     )\n\
                     SELECT fleet, name, driver, avg(hours) AS avg_daily_hours\n\
                     FROM daily_total_session\n\
                     GROUP BY fleet, name, driver\n\
                     ORDER BY fleet, name, driver"
                ),
                None,
            ),
            QueryShape::AvgDailyDrivingSession => (
                "average driver driving session without stopping per day".to_string(),
                format!(
                    "WITH driver_status AS (\n  \
                       SELECT name, {TEN_MINUTES} AS ten_minutes, avg(velocity) > 5 AS driving\n  \
                       FROM readings\n  \
                       WHERE name IS NOT NULL\n  \
                       GROUP BY name, ten_minutes\n\
                     ), driver_status_change AS (\n  \
                       SELECT name, ten_minutes AS start,\n         \
                         lead(ten_minutes) OVER (PARTITION BY name ORDER BY ten_minutes) AS stop,\n         \
                         driving\n  \
                       FROM (\n    \
                         SELECT name, ten_minutes, driving,\n           \
                           lag(driving) OVER (PARTITION BY name ORDER BY ten_minutes) AS prev_driving\n    \
                         FROM driver_status\n  \
                       ) x\n  \
                       WHERE x.driving <> x.prev_driving\n\
                     )\n\
                     SELECT name, date_trunc('day', start) AS day,\n       \
                       avg(extract(epoch FROM stop) - extract(epoch FROM start)) AS duration_seconds\n\
                     FROM driver_status_change\n\
                     WHERE driving = true\n\
                     GROUP BY name, day\n\
                     ORDER BY name, day"
                ),
                None,
            ),
            QueryShape::AvgLoad => (
                "average load per truck model per fleet".to_string(),
                "SELECT fleet, model, load_capacity, avg(avg_load / load_capacity) AS avg_load_percentage\n\
                 FROM (\n  \
                   SELECT name, fleet, model, load_capacity, avg(current_load) AS avg_load\n  \
                   FROM diagnostics\n  \
                   WHERE name IS NOT NULL\n  \
                   GROUP BY name, fleet, model, load_capacity\n\
                 ) d\n\
                 GROUP BY fleet, model, load_capacity\n\
                 ORDER BY fleet, model, load_capacity"
                    .to_string(),
                None,
            ),
            QueryShape::DailyActivity => (
                "daily truck activity per fleet per model".to_string(),
                format!(
                    "SELECT fleet, model, day, sum(ten_mins_per_day) / 144 AS daily_activity\n\
                     FROM (\n  \
                       SELECT date_trunc('day', time) AS day, {TEN_MINUTES} AS ten_minutes,\n         \
                         name, fleet, model, count(*) AS ten_mins_per_day\n  \
                       FROM diagnostics\n  \
                       WHERE name IS NOT NULL\n  \
                       GROUP BY day, ten_minutes, name, fleet, model\n  \
                       HAVING avg(status) < 1\n\
                     ) y\n\
                     GROUP BY fleet, model, day\n\
                     ORDER BY day, fleet, model"
                ),
                None,
            ),
            QueryShape::BreakdownFrequency => (
                "truck breakdown frequency per model".to_string(),
                // TSBS writes `count(STATUS = 0) / count(*) >= 0.5`, which counts every
                // non-null status; this counts the zeros, as the description means.
                format!(
                    "WITH breakdown_per_truck_per_ten_minutes AS (\n  \
                       SELECT {TEN_MINUTES} AS ten_minutes, name, model,\n         \
                         count(CASE WHEN status = 0 THEN 1 END) * 2 >= count(*) AS broken_down\n  \
                       FROM diagnostics\n  \
                       WHERE name IS NOT NULL\n  \
                       GROUP BY ten_minutes, name, model\n\
                     ), breakdowns_per_truck AS (\n  \
                       SELECT ten_minutes, name, model, broken_down,\n         \
                         lead(broken_down) OVER (PARTITION BY name, model ORDER BY ten_minutes) AS next_broken_down\n  \
                       FROM breakdown_per_truck_per_ten_minutes\n\
                     )\n\
                     SELECT model, count(*)\n\
                     FROM breakdowns_per_truck\n\
                     WHERE broken_down = false AND next_broken_down = true\n\
                     GROUP BY model\n\
                     ORDER BY model"
                ),
                None,
            ),
        };
        Query {
            query_type: ty.name,
            description,
            sql,
            window,
        }
    }
}

/// `agg(f) AS agg_f, ...`.
fn aggregates(agg: &str, fields: &[&str]) -> String {
    let mut out = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{agg}({f}) AS {agg}_{f}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    const START: i64 = 1_451_606_400_000_000; // 2016-01-01T00:00:00Z
    const DAY: i64 = 24 * HOUR_US;

    fn all_types() -> impl Iterator<Item = &'static QueryType> {
        DEVOPS_TYPES.iter().chain(IOT_TYPES.iter())
    }

    #[test]
    fn same_seed_same_queries_other_seed_other_queries() {
        let a = QueryGenerator::new(START, START + DAY, 100, 1).unwrap();
        let b = QueryGenerator::new(START, START + DAY, 100, 1).unwrap();
        let c = QueryGenerator::new(START, START + DAY, 100, 2).unwrap();
        for ty in all_types() {
            let qa = a.generate(ty, 10).unwrap();
            assert_eq!(qa, b.generate(ty, 10).unwrap(), "{}", ty.name);
            assert_eq!(qa.len(), 10);
            let random = !matches!(
                ty.shape,
                QueryShape::Lastpoint
                    | QueryShape::AvgVsProjectedFuelConsumption
                    | QueryShape::AvgDailyDrivingDuration
                    | QueryShape::AvgDailyDrivingSession
                    | QueryShape::AvgLoad
                    | QueryShape::DailyActivity
                    | QueryShape::BreakdownFrequency
            );
            if random {
                assert_ne!(qa, c.generate(ty, 10).unwrap(), "{}", ty.name);
                // Ten draws of a random window (or fleet) are not all alike.
                assert!(qa.iter().any(|q| q.sql != qa[0].sql), "{}", ty.name);
            }
        }
        // A type's queries do not depend on which other types were generated before.
        let first = a.generate(&DEVOPS_TYPES[3], 5).unwrap();
        let _ = a.generate(&DEVOPS_TYPES[0], 5).unwrap();
        assert_eq!(first, a.generate(&DEVOPS_TYPES[3], 5).unwrap());
    }

    #[test]
    fn every_query_parses_as_postgresql() {
        let generator = QueryGenerator::new(START, START + 3 * DAY, 100, 7).unwrap();
        for ty in all_types() {
            for q in generator.generate(ty, 3).unwrap() {
                let parsed = Parser::parse_sql(&PostgreSqlDialect {}, &q.sql)
                    .unwrap_or_else(|e| panic!("{}: {e}\n{}", ty.name, q.sql));
                assert_eq!(parsed.len(), 1, "{}", q.sql);
                assert!(q.sql.contains("ORDER BY"), "{}: no total order", ty.name);
            }
        }
    }

    #[test]
    fn windows_fall_inside_the_data() {
        let end = START + DAY + 7 * HOUR_US;
        let generator = QueryGenerator::new(START, end, 100, 3).unwrap();
        for ty in all_types() {
            for q in generator.generate(ty, 50).unwrap() {
                if let Some((from, to)) = q.window {
                    assert!(START <= from && from < to && to <= end, "{}", q.sql);
                    assert!(q.sql.contains(&format!("'{}'", format_time_us(to))));
                }
            }
        }
        let single = generator.generate(&DEVOPS_TYPES[1], 20).unwrap();
        for q in single {
            let (from, to) = q.window.unwrap();
            assert_eq!(to - from, 12 * HOUR_US);
            assert!(
                q.sql
                    .contains(&format!("time >= '{}'", format_time_us(from)))
            );
        }
        // A window longer than the data is the whole data range.
        let short = QueryGenerator::new(START, START + HOUR_US, 10, 3).unwrap();
        let q = &short.generate(&DEVOPS_TYPES[1], 1).unwrap()[0];
        assert_eq!(q.window, Some((START, START + HOUR_US)));
    }

    #[test]
    fn hosts_are_distinct_and_within_scale() {
        let generator = QueryGenerator::new(START, START + DAY, 8, 5).unwrap();
        for q in generator.generate(&DEVOPS_TYPES[7], 20).unwrap() {
            let list = q
                .sql
                .split("IN (")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap();
            let mut hosts: Vec<&str> = list.split(',').collect();
            assert_eq!(hosts.len(), 8);
            assert!(hosts.iter().all(|h| {
                let n: u64 = h
                    .trim_matches('\'')
                    .strip_prefix("host_")
                    .unwrap()
                    .parse()
                    .unwrap();
                n < 8
            }));
            hosts.sort();
            hosts.dedup();
            assert_eq!(hosts.len(), 8, "{}", q.sql);
        }
        assert_eq!(
            generator.generate(&DEVOPS_TYPES[2], 1).unwrap()[0]
                .sql
                .matches("host_")
                .count(),
            8
        );
        let small = QueryGenerator::new(START, START + DAY, 4, 5).unwrap();
        assert!(matches!(
            small.generate(&DEVOPS_TYPES[2], 1),
            Err(GenerateError::ScaleTooSmall { needed: 8, .. })
        ));
    }

    #[test]
    fn selecting_types() {
        assert_eq!(select_types(UseCase::CpuOnly, "all").unwrap().len(), 15);
        assert_eq!(select_types(UseCase::Iot, "ALL").unwrap().len(), 12);
        let some = select_types(UseCase::CpuOnly, "lastpoint, high-cpu-1,lastpoint").unwrap();
        assert_eq!(
            some.iter().map(|t| t.name).collect::<Vec<_>>(),
            ["lastpoint", "high-cpu-1"]
        );
        assert!(matches!(
            select_types(UseCase::Iot, "lastpoint"),
            Err(GenerateError::UnknownType { .. })
        ));
        assert_eq!(
            select_types(UseCase::Iot, " , "),
            Err(GenerateError::NoTypes)
        );
        assert_eq!(
            QueryGenerator::new(START, START, 1, 1).err(),
            Some(GenerateError::EmptyWindow)
        );
    }

    #[test]
    fn tsbs_constants() {
        assert_eq!(ten_minute_periods(5, 4), 22);
        assert_eq!(ten_minute_periods(35, 24), 60);
        assert_eq!(format_time_us(START + 1), "2016-01-01T00:00:00.000001Z");
        let q = &QueryGenerator::new(START, START + DAY, 10, 1)
            .unwrap()
            .generate(&DEVOPS_TYPES[10], 1)
            .unwrap()[0];
        assert!(
            q.sql
                .contains("avg(usage_guest_nice) AS mean_usage_guest_nice")
        );
    }
}
