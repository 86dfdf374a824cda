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

/// Parses interval text; a bare integer is microseconds.
pub fn parse_interval(s: &str) -> Result<Interval, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i64>() {
        return Ok(Interval {
            micros: n,
            ..Default::default()
        });
    }
    let mut iv = Interval::default();
    let tokens: Vec<&str> = s.split_whitespace().collect();
    if tokens.is_empty() {
        return Err("empty interval".into());
    }
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        if tok.contains(':') {
            iv.micros += parse_clock(tok)?;
            i += 1;
            continue;
        }
        // number and unit may be glued: "15min", "1d"
        let split = tok
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
            .unwrap_or(tok.len());
        let (num, unit) = if split == tok.len() {
            let unit = tokens
                .get(i + 1)
                .ok_or_else(|| format!("interval `{s}`: number without unit"))?;
            i += 2;
            (tok, *unit)
        } else {
            i += 1;
            (&tok[..split], &tok[split..])
        };
        let n: f64 = num
            .parse()
            .map_err(|_| format!("invalid input syntax for type interval: \"{s}\""))?;
        let unit = unit.to_ascii_lowercase();
        let unit = unit.trim_end_matches(',');
        match unit {
            "us" | "usec" | "usecs" | "microsecond" | "microseconds" => iv.micros += n as i64,
            "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => {
                iv.micros += (n * 1e3) as i64
            }
            "s" | "sec" | "secs" | "second" | "seconds" => iv.micros += (n * 1e6) as i64,
            "m" | "min" | "mins" | "minute" | "minutes" => iv.micros += (n * 60e6) as i64,
            "h" | "hr" | "hrs" | "hour" | "hours" => iv.micros += (n * 3600e6) as i64,
            "d" | "day" | "days" => iv.days += n as i32,
            "w" | "week" | "weeks" => iv.days += (n * 7.0) as i32,
            "mon" | "mons" | "month" | "months" => iv.months += n as i32,
            "y" | "yr" | "yrs" | "year" | "years" => iv.months += (n * 12.0) as i32,
            _ => return Err(format!("invalid input syntax for type interval: \"{s}\"")),
        }
    }
    Ok(iv)
}

fn parse_clock(tok: &str) -> Result<i64, String> {
    let parts: Vec<&str> = tok.split(':').collect();
    let bad = || format!("invalid input syntax for type interval: \"{tok}\"");
    let h: i64 = parts.first().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let m: i64 = parts
        .get(1)
        .map(|p| p.parse())
        .transpose()
        .map_err(|_| bad())?
        .unwrap_or(0);
    let s: f64 = parts
        .get(2)
        .map(|p| p.parse())
        .transpose()
        .map_err(|_| bad())?
        .unwrap_or(0.0);
    Ok(h * 3_600_000_000 + m * 60_000_000 + (s * 1e6) as i64)
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
}
