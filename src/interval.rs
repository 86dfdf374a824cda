//! Parsing of PostgreSQL interval text (`'1 day'`, `'15 minutes'`, `'1 month'`,
//! `'02:30:00'`) into months and microseconds, for chunk intervals and settings.

/// An interval split as PostgreSQL keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

impl Interval {
    /// Length in microseconds, counting a month as 30 days (as chunk intervals do).
    pub fn approx_micros(&self) -> i64 {
        (self.months as i64 * 30 + self.days as i64) * 86_400_000_000 + self.micros
    }
}

/// Parses interval text for chunk intervals and settings: a bare integer is
/// microseconds (as `create_hypertable`'s integer chunk interval), anything else
/// PostgreSQL's interval input ([`parse_pg_interval`]).
pub fn parse_interval(s: &str) -> Result<Interval, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i64>() {
        return Ok(Interval {
            micros: n,
            ..Default::default()
        });
    }
    parse_pg_interval(s)
}

/// Parses an interval and returns its length in microseconds.
pub fn parse_interval_micros(s: &str) -> Result<i64, String> {
    parse_interval(s).map(|i| i.approx_micros())
}

/// PostgreSQL accepts timestamps without seconds (`2024-01-01 10:00+02`) and with
/// one-digit fields (`2016-1-1 6:00`); Arrow wants two digits and seconds. Rewrites
/// such timestamp text in place to `YYYY-MM-DD HH:MM:SS` followed by the rest
/// (fraction, offset); other text is left alone.
pub fn complete_seconds(s: &mut String) {
    /// The next run of 1..=max ASCII digits at `*i`, advancing past it.
    fn num(b: &[u8], i: &mut usize, max: usize) -> Option<u32> {
        let start = *i;
        while *i < b.len() && *i - start < max && b[*i].is_ascii_digit() {
            *i += 1;
        }
        if *i == start || b.get(*i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(&b[start..*i]).ok()?.parse().ok()
    }
    let b = s.as_bytes();
    // Already whole (the common case, e.g. every COPY value): nothing to rewrite.
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let date = digits(0..4) && at(4, b'-') && digits(5..7) && at(7, b'-') && digits(8..10);
    let whole = date
        && (b.len() == 10
            || matches!(b.get(10), Some(b' ' | b'T'))
                && digits(11..13)
                && at(13, b':')
                && digits(14..16)
                && at(16, b':')
                && digits(17..19)
                && !b.get(19).is_some_and(u8::is_ascii_digit));
    if whole {
        return;
    }
    let mut i = 0;
    let Some(y) = num(b, &mut i, 4).filter(|_| i == 4) else {
        return;
    };
    let sep = |i: &mut usize, c: u8| {
        let ok = b.get(*i) == Some(&c);
        *i += usize::from(ok);
        ok
    };
    let Some(mo) = sep(&mut i, b'-').then(|| num(b, &mut i, 2)).flatten() else {
        return;
    };
    let Some(d) = sep(&mut i, b'-').then(|| num(b, &mut i, 2)).flatten() else {
        return;
    };
    let mut out = format!("{y:04}-{mo:02}-{d:02}");
    if let Some(&t @ (b' ' | b'T')) = b.get(i) {
        let mut j = i + 1;
        let Some(h) = num(b, &mut j, 2) else {
            return;
        };
        let Some(mi) = sep(&mut j, b':').then(|| num(b, &mut j, 2)).flatten() else {
            return;
        };
        let mut sec = 0;
        let mut k = j;
        if sep(&mut k, b':') {
            let Some(v) = num(b, &mut k, 2) else {
                return;
            };
            sec = v;
            j = k;
        }
        out.push_str(&format!("{}{h:02}:{mi:02}:{sec:02}", t as char));
        i = j;
    }
    out.push_str(&s[i..]);
    *s = out;
}

/// PostgreSQL's interval input (`interval_in`, IntervalStyle postgres): amounts
/// with units (`1.5 days`, `3h`), clock times (`01:02:03.5`, `01:02`, `1:02.5` as
/// minutes and seconds), a number before a clock time as days (`1 01:00`), a bare
/// last number as seconds, SQL's `Y-M`, `@` and `ago`, and ISO 8601's
/// `P1Y2M3DT4H5M6S`. Fractions carry down as PostgreSQL's do: years to whole
/// months, months to 30 days, weeks to 7 days, days to 24 hours.
pub fn parse_pg_interval(s: &str) -> Result<Interval, String> {
    let bad = || format!("invalid input syntax for type interval: \"{s}\"");
    let text = s.trim();
    let mut acc = Parts::default();
    if let Some(iso) = text.strip_prefix('P') {
        iso_interval(iso, &mut acc).ok_or_else(bad)?;
        return acc
            .finish(false)
            .ok_or_else(|| "interval out of range".into());
    }
    let mut tokens: Vec<String> = Vec::new();
    let text = match text.strip_prefix('@') {
        Some(rest) => {
            tokens.push("@".into());
            rest
        }
        None => text,
    };
    for word in text.split_whitespace() {
        // Numbers and units may be glued ("15min", "1h30m"); a clock time and "Y-M"
        // stay whole.
        let numeric_start = word.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c));
        if !numeric_start || word.contains(':') {
            tokens.push(word.to_string());
            continue;
        }
        let mut start = 0;
        let bytes = word.as_bytes();
        for i in 1..=bytes.len() {
            let boundary = i == bytes.len()
                || bytes[i].is_ascii_alphabetic() != bytes[i - 1].is_ascii_alphabetic();
            if boundary {
                tokens.push(word[start..i].to_string());
                start = i;
            }
        }
    }
    let mut ago = false;
    let mut i = 0;
    let mut any = false;
    while i < tokens.len() {
        let tok = tokens[i].as_str();
        i += 1;
        if tok == "@" && i == 1 {
            continue;
        }
        if tok.eq_ignore_ascii_case("ago") {
            ago = true;
            continue;
        }
        any = true;
        if tok.contains(':') {
            let clock = Unit::Hour.bit() | Unit::Minute.bit() | Unit::Second.bit();
            if acc.seen & clock != 0 {
                return Err(bad());
            }
            acc.seen |= clock;
            let micros = clock_micros(tok).ok_or_else(bad)?;
            acc.micros = acc.micros.checked_add(micros).ok_or_else(bad)?;
            continue;
        }
        if let Some(months) = year_month(tok) {
            acc.months = acc.months.checked_add(months).ok_or_else(bad)?;
            continue;
        }
        let n: f64 = tok.parse().map_err(|_| bad())?;
        if !n.is_finite() {
            return Err(bad());
        }
        match tokens.get(i).map(|t| t.to_ascii_lowercase()) {
            Some(unit) if unit.starts_with(|c: char| c.is_ascii_alphabetic()) && unit != "ago" => {
                i += 1;
                acc.add(n, unit.trim_end_matches(',')).ok_or_else(bad)?;
            }
            // "1 01:00": days before a clock time.
            Some(next) if next.contains(':') => acc.add(n, "day").ok_or_else(bad)?,
            // A bare number last is seconds.
            None => acc.add(n, "second").ok_or_else(bad)?,
            Some(next) if next == "ago" => acc.add(n, "second").ok_or_else(bad)?,
            Some(_) => return Err(bad()),
        }
    }
    if !any {
        return Err(bad());
    }
    acc.finish(ago)
        .ok_or_else(|| "interval out of range".into())
}

/// An interval being summed, wider than [`Interval`] until it is checked.
#[derive(Default)]
struct Parts {
    months: i64,
    days: i64,
    micros: i64,
    /// The [`Unit`]s given so far (bits).
    seen: u32,
}

/// The units of interval text.
#[derive(Clone, Copy)]
enum Unit {
    Micro,
    Milli,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    Decade,
    Century,
    Millennium,
}

impl Unit {
    /// A unit's name or abbreviation (lower case), as PostgreSQL knows them.
    fn of(name: &str) -> Option<Unit> {
        Some(match name {
            "us" | "usec" | "usecs" | "usecond" | "useconds" | "microsecond" | "microseconds" => {
                Unit::Micro
            }
            "ms" | "msec" | "msecs" | "msecond" | "mseconds" | "millisecond" | "milliseconds" => {
                Unit::Milli
            }
            "s" | "sec" | "secs" | "second" | "seconds" => Unit::Second,
            "m" | "min" | "mins" | "minute" | "minutes" => Unit::Minute,
            "h" | "hr" | "hrs" | "hour" | "hours" => Unit::Hour,
            "d" | "day" | "days" => Unit::Day,
            "w" | "week" | "weeks" => Unit::Week,
            "mon" | "mons" | "month" | "months" => Unit::Month,
            "y" | "yr" | "yrs" | "year" | "years" => Unit::Year,
            "dec" | "decs" | "decade" | "decades" => Unit::Decade,
            "c" | "cent" | "century" | "centuries" => Unit::Century,
            "mil" | "mils" | "millennium" | "millennia" => Unit::Millennium,
            _ => return None,
        })
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl Parts {
    /// Adds `n` of `unit`, fractions carried down as PostgreSQL's DecodeInterval does.
    fn add(&mut self, n: f64, unit: &str) -> Option<()> {
        let whole = n.trunc();
        let frac = n - whole;
        let micros = |x: f64| -> Option<i64> {
            let v = x.round_ties_even();
            (v.abs() < 9.2e18).then_some(v as i64)
        };
        // Whole days and the rest in microseconds, of `days` days.
        let fraction_days = |p: &mut Parts, days: f64| -> Option<()> {
            let d = days.trunc();
            p.days = p.days.checked_add(d as i64)?;
            p.micros = p.micros.checked_add(micros((days - d) * 86_400e6)?)?;
            Some(())
        };
        let in_months = |p: &mut Parts, per: f64| -> Option<()> {
            let m = whole * per + (frac * per).round_ties_even();
            if m.abs() > 1e12 {
                return None;
            }
            p.months = p.months.checked_add(m as i64)?;
            Some(())
        };
        let unit = Unit::of(unit)?;
        // Each unit once, as PostgreSQL's field mask allows.
        if self.seen & unit.bit() != 0 {
            return None;
        }
        self.seen |= unit.bit();
        let per_micro = match unit {
            Unit::Micro => 1.0,
            Unit::Milli => 1e3,
            Unit::Second => 1e6,
            Unit::Minute => 60e6,
            Unit::Hour => 3600e6,
            Unit::Day | Unit::Week | Unit::Month => {
                if whole.abs() > 1e12 {
                    return None;
                }
                let (whole, per) = match unit {
                    Unit::Day => (whole as i64, 1.0),
                    Unit::Week => (whole as i64 * 7, 7.0),
                    _ => {
                        self.months = self.months.checked_add(whole as i64)?;
                        (0, 30.0)
                    }
                };
                self.days = self.days.checked_add(whole)?;
                return fraction_days(self, frac * per);
            }
            Unit::Year => return in_months(self, 12.0),
            Unit::Decade => return in_months(self, 120.0),
            Unit::Century => return in_months(self, 1200.0),
            Unit::Millennium => return in_months(self, 12_000.0),
        };
        self.micros = self.micros.checked_add(micros(n * per_micro)?)?;
        Some(())
    }

    /// The interval, negated for `ago`; `None` when a part does not fit.
    fn finish(self, ago: bool) -> Option<Interval> {
        let sign = if ago { -1 } else { 1 };
        Some(Interval {
            months: i32::try_from(self.months.checked_mul(sign)?).ok()?,
            days: i32::try_from(self.days.checked_mul(sign)?).ok()?,
            micros: self.micros.checked_mul(sign)?,
        })
    }
}

/// `[-]h:mm[:ss[.f]]`, or `[-]mm:ss.f`, in microseconds.
fn clock_micros(tok: &str) -> Option<i64> {
    let (negative, body) = match tok.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, tok.strip_prefix('+').unwrap_or(tok)),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let int = |p: &str| -> Option<i64> {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse().ok())
            .flatten()
    };
    let secs = |p: &str| -> Option<f64> {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .then(|| p.parse().ok())
            .flatten()
    };
    let (h, m, s) = match parts.as_slice() {
        [m, s] if s.contains('.') => (0, int(m)?, secs(s)?),
        [h, m] => (int(h)?, int(m)?, 0.0),
        [h, m, s] => (int(h)?, int(m)?, secs(s)?),
        _ => return None,
    };
    if m > 59 || s >= 60.0 {
        return None;
    }
    let micros = h
        .checked_mul(3_600_000_000)?
        .checked_add(m * 60_000_000)?
        .checked_add((s * 1e6).round_ties_even() as i64)?;
    Some(if negative { -micros } else { micros })
}

/// SQL's `[-]years-months` in months.
fn year_month(tok: &str) -> Option<i64> {
    let (negative, body) = match tok.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, tok.strip_prefix('+').unwrap_or(tok)),
    };
    let (y, m) = body.split_once('-')?;
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(y) || !all_digits(m) {
        return None;
    }
    let months = y
        .parse::<i64>()
        .ok()?
        .checked_mul(12)?
        .checked_add(m.parse::<i64>().ok()?)?;
    Some(if negative { -months } else { months })
}

/// ISO 8601's `P…` with unit designators (the text after `P`).
fn iso_interval(text: &str, acc: &mut Parts) -> Option<()> {
    let mut time = false;
    let mut rest = text;
    let mut any = false;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('T') {
            if time {
                return None;
            }
            time = true;
            rest = r;
            continue;
        }
        let end = rest.find(|c: char| c.is_ascii_alphabetic())?;
        let n: f64 = rest[..end].parse().ok()?;
        let unit = match (&rest[end..end + 1], time) {
            ("Y", false) => "year",
            ("M", false) => "month",
            ("W", false) => "week",
            ("D", false) => "day",
            ("H", true) => "hour",
            ("M", true) => "minute",
            ("S", true) => "second",
            _ => return None,
        };
        acc.add(n, unit)?;
        any = true;
        rest = &rest[end + 1..];
    }
    any.then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widens_bare_hour_offsets_only() {
        for (input, want) in [
            ("2024-01-01 10:00+00", "2024-01-01 10:00:00+00"),
            ("2024-01-01 10:00:00.5-05", "2024-01-01 10:00:00.5-05"),
            ("2024-01-01T10:00+05:30", "2024-01-01T10:00:00+05:30"),
            ("2024-01-01 10:00", "2024-01-01 10:00:00"),
            ("2024-01-01", "2024-01-01"),
            ("1 day", "1 day"),
            ("2024-01-01 10:00:00", "2024-01-01 10:00:00"),
            ("2016-01-01 6:00:00+00", "2016-01-01 06:00:00+00"),
            ("2016-1-2 6:5", "2016-01-02 06:05:00"),
            (
                "2016-01-01 6:00:00.25 America/New_York",
                "2016-01-01 06:00:00.25 America/New_York",
            ),
            ("2016-01-01 6", "2016-01-01 6"),
            ("12016-01-01", "12016-01-01"),
            ("2016-01-01 10:00:00:00", "2016-01-01 10:00:00:00"),
        ] {
            let mut s = input.to_string();
            complete_seconds(&mut s);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval_micros("1 day").unwrap(), 86_400_000_000);
        assert_eq!(parse_interval_micros("7 days").unwrap(), 7 * 86_400_000_000);
        assert_eq!(parse_interval_micros("15 minutes").unwrap(), 900_000_000);
        assert_eq!(parse_interval_micros("1h").unwrap(), 3_600_000_000);
        assert_eq!(parse_interval_micros("02:30:00").unwrap(), 9_000_000_000);
        assert_eq!(parse_interval("1 month").unwrap().months, 1);
        assert!(parse_interval("1 fortnight").is_err());
        assert_eq!(
            parse_interval_micros("86400000000").unwrap(),
            86_400_000_000
        );
    }
    #[test]
    fn pg_interval_input() {
        let iv = |months, days, micros| Interval {
            months,
            days,
            micros,
        };
        let h = 3_600_000_000i64;
        for (text, want) in [
            ("1 day 01:00", iv(0, 1, h)),
            ("1 mon 1 day 01:00", iv(1, 1, h)),
            ("01:00", iv(0, 0, h)),
            ("-1 day -02:00", iv(0, -1, -2 * h)),
            (
                "1 year 2 mons 3 days 04:05:06.7",
                iv(14, 3, 4 * h + 306_700_000),
            ),
            ("@ 1 hour ago", iv(0, 0, -h)),
            ("P1DT2H", iv(0, 1, 2 * h)),
            ("P1Y2M3W", iv(14, 21, 0)),
            ("1.5 months", iv(1, 15, 0)),
            ("1.5 days", iv(0, 1, 12 * h)),
            ("1.5 years", iv(18, 0, 0)),
            ("1 01:00:00", iv(0, 1, h)),
            ("5", iv(0, 0, 5_000_000)),
            ("15min", iv(0, 0, h / 4)),
            ("1h30m", iv(0, 0, h + h / 2)),
            ("1-2", iv(14, 0, 0)),
            ("01:02.5", iv(0, 0, 62_500_000)),
            ("2 weeks", iv(0, 14, 0)),
        ] {
            assert_eq!(parse_pg_interval(text), Ok(want), "{text}");
        }
        assert_eq!(parse_pg_interval("1 day 2"), Ok(iv(0, 1, 2_000_000)));
        assert_eq!(
            parse_pg_interval("1 hour ago 2"),
            Ok(iv(0, 0, -h - 2_000_000))
        );
        assert_eq!(parse_pg_interval("@1 hour"), Ok(iv(0, 0, h)));
        assert_eq!(
            parse_pg_interval("1-2 3 4:05:06"),
            Ok(iv(14, 3, 4 * h + 306_000_000))
        );
        assert_eq!(parse_pg_interval("1 week 1.5 months"), Ok(iv(1, 22, 0)));
        for bad in [
            "",
            "1 fortnight",
            "1 2",
            "ago",
            "01:99",
            "1:60",
            "P",
            "@",
            "1 day 1 days",
            "1 hour 01:00",
            "01:00 01:00",
            "9223372036854775807-9223372036854775807",
            "9100000000000000000 us 2562047788:00:00",
        ] {
            assert!(parse_pg_interval(bad).is_err(), "{bad}");
        }
    }
}
