//! Line sources (generators and line-protocol files), the batcher that cuts their
//! output into request bodies of exactly `batch_size` lines, and the small numeric
//! helpers (normal sampling, integer and fixed-point formatting) the generators share.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use rand::Rng;
use rand::rngs::SmallRng;

use super::LoadError;

/// Produces line-protocol lines one at a time.
pub(crate) trait LineSource {
    /// Appends the next line, newline included, to `out` and returns its number of
    /// field values; `None` once the source is exhausted.
    fn next_line(&mut self, out: &mut Vec<u8>) -> Result<Option<u32>, LoadError>;
}

/// One request body: whole lines, each ending in `\n`.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub body: Vec<u8>,
    pub rows: u64,
    pub metrics: u64,
}

/// Cuts a [`LineSource`] into batches of `batch_size` lines (the last one may be
/// smaller), stopping after `limit` lines when a limit is given.
pub(crate) struct Batcher<S> {
    source: S,
    batch_size: usize,
    remaining: Option<u64>,
    capacity_hint: usize,
}

impl<S: LineSource> Batcher<S> {
    pub fn new(source: S, batch_size: usize, limit: Option<u64>) -> Self {
        Batcher {
            source,
            batch_size: batch_size.max(1),
            remaining: limit,
            capacity_hint: 4096,
        }
    }

    /// The next batch, or `None` when the source or the limit is exhausted.
    pub fn next_batch(&mut self) -> Result<Option<Batch>, LoadError> {
        let mut batch = Batch {
            body: Vec::with_capacity(self.capacity_hint),
            ..Batch::default()
        };
        while batch.rows < self.batch_size as u64 && self.remaining != Some(0) {
            match self.source.next_line(&mut batch.body)? {
                Some(fields) => {
                    batch.rows += 1;
                    batch.metrics += u64::from(fields);
                    if let Some(left) = self.remaining.as_mut() {
                        *left -= 1;
                    }
                }
                None => break,
            }
        }
        if batch.rows == 0 {
            return Ok(None);
        }
        // Full batches look alike: reserve a little more than the last one needed.
        self.capacity_hint = self
            .capacity_hint
            .max(batch.body.len() + batch.body.len() / 16);
        Ok(Some(batch))
    }
}

/// Reads line protocol from a file (gzip-compressed when the name ends in `.gz`),
/// skipping blank lines and `#` comments.
pub(crate) struct FileSource {
    reader: Box<dyn BufRead + Send>,
    path: PathBuf,
    line_no: u64,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let file =
            File::open(path).map_err(|e| LoadError::io(format!("open {}", path.display()), e))?;
        let raw: Box<dyn Read + Send> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Ok(FileSource {
            reader: Box::new(BufReader::with_capacity(1 << 20, raw)),
            path: path.to_path_buf(),
            line_no: 0,
        })
    }

    #[cfg(test)]
    pub fn from_reader(reader: impl BufRead + Send + 'static) -> Self {
        FileSource {
            reader: Box::new(reader),
            path: PathBuf::from("<memory>"),
            line_no: 0,
        }
    }
}

impl LineSource for FileSource {
    fn next_line(&mut self, out: &mut Vec<u8>) -> Result<Option<u32>, LoadError> {
        loop {
            let start = out.len();
            let n = self.reader.read_until(b'\n', out).map_err(|e| {
                LoadError::io(
                    format!("read {} after line {}", self.path.display(), self.line_no),
                    e,
                )
            })?;
            if n == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            // Drop the line ending; it is put back as a plain `\n` below.
            while out.len() > start && matches!(out.last(), Some(b'\n' | b'\r')) {
                out.pop();
            }
            let line = &out[start..];
            let first = line.iter().position(|b| !b.is_ascii_whitespace());
            match first {
                None => out.truncate(start),
                Some(i) if line[i] == b'#' => out.truncate(start),
                Some(_) => {
                    let fields = count_fields(line);
                    out.push(b'\n');
                    return Ok(Some(fields));
                }
            }
        }
    }
}

/// Number of field values on a line-protocol line: the field set starts after the
/// first unescaped space and is split on commas that are neither escaped nor inside
/// a quoted string. A line without a field set counts 0 (the server will reject it).
pub(crate) fn count_fields(line: &[u8]) -> u32 {
    let mut escaped = false;
    let mut fields_at = None;
    for (i, &b) in line.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b' ' {
            fields_at = Some(i + 1);
            break;
        }
    }
    let Some(start) = fields_at else { return 0 };
    let rest = &line[start..];
    if rest.first().is_none_or(|&b| b == b' ') {
        return 0;
    }
    let (mut count, mut escaped, mut quoted) = (1, false, false);
    for &b in rest {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => count += 1,
            b' ' if !quoted => break,
            _ => {}
        }
    }
    count
}

/// The generators' random number generator: fast, and deterministic for a seed
/// with the `rand` version pinned in Cargo.lock.
pub(crate) type GenRng = SmallRng;

/// Standard normal samples by Marsaglia's polar method (`rand` 0.9 has no normal
/// distribution without `rand_distr`); each accepted pair yields two samples.
#[derive(Debug, Default)]
pub(crate) struct Normal {
    spare: Option<f64>,
}

impl Normal {
    pub fn sample(&mut self, rng: &mut GenRng) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        loop {
            let u = 2.0 * rng.random::<f64>() - 1.0;
            let v = 2.0 * rng.random::<f64>() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let m = (-2.0 * s.ln() / s).sqrt();
                self.spare = Some(v * m);
                return u * m;
            }
        }
    }
}

/// A uniform sample in `[low, high)`.
pub(crate) fn uniform(rng: &mut GenRng, low: f64, high: f64) -> f64 {
    low + rng.random::<f64>() * (high - low)
}

/// Appends the decimal digits of `v`.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends `v` (an i64) in decimal.
pub(crate) fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

const POW10: [f64; 6] = [1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0];

/// Appends `x` truncated toward zero to `decimals` (0..=5) decimal places, printed
/// the shortest way (no trailing zeros, no exponent): what TSBS's `FP` wrapper
/// followed by Go's `strconv.AppendFloat(v, 'f', -1, 64)` prints.
pub(crate) fn push_fixed(out: &mut Vec<u8>, x: f64, decimals: usize) {
    let decimals = decimals.min(5);
    let scaled = (x * POW10[decimals]) as i64; // `as` truncates toward zero, like Go's int()
    if scaled < 0 {
        out.push(b'-');
    }
    let mag = scaled.unsigned_abs();
    let unit = POW10[decimals] as u64;
    push_u64(out, mag / unit);
    let mut frac = mag % unit;
    if frac == 0 {
        return;
    }
    let mut width = decimals;
    while frac.is_multiple_of(10) {
        frac /= 10;
        width -= 1;
    }
    out.push(b'.');
    let digits_start = out.len();
    push_u64(out, frac);
    let pad = width - (out.len() - digits_start);
    out.splice(digits_start..digits_start, std::iter::repeat_n(b'0', pad));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    struct Counting(u64);
    impl LineSource for Counting {
        fn next_line(&mut self, out: &mut Vec<u8>) -> Result<Option<u32>, LoadError> {
            if self.0 == 0 {
                return Ok(None);
            }
            self.0 -= 1;
            out.extend_from_slice(b"m f=1i,g=2i 1\n");
            Ok(Some(2))
        }
    }

    fn sizes<S: LineSource>(mut b: Batcher<S>) -> Vec<u64> {
        let mut v = Vec::new();
        while let Some(batch) = b.next_batch().unwrap() {
            assert_eq!(
                batch.body.iter().filter(|&&c| c == b'\n').count() as u64,
                batch.rows
            );
            assert_eq!(batch.metrics, batch.rows * 2);
            v.push(batch.rows);
        }
        v
    }

    #[test]
    fn batches_have_exactly_batch_size_lines_and_a_smaller_last_one() {
        assert_eq!(sizes(Batcher::new(Counting(23), 5, None)), [5, 5, 5, 5, 3]);
        assert_eq!(sizes(Batcher::new(Counting(20), 5, None)), [5, 5, 5, 5]);
        assert_eq!(sizes(Batcher::new(Counting(23), 5, Some(12))), [5, 5, 2]);
        assert_eq!(sizes(Batcher::new(Counting(3), 5, Some(12))), [3]);
        assert!(sizes(Batcher::new(Counting(0), 5, None)).is_empty());
        assert!(sizes(Batcher::new(Counting(9), 5, Some(0))).is_empty());
    }

    #[test]
    fn file_source_skips_blank_and_comment_lines_and_counts_fields() {
        let text =
            "# header\n\ncpu,host=a usage=1i,idle=2i 10\r\n   \n  # indented comment\nmem v=1.5 20";
        let src = FileSource::from_reader(Cursor::new(text.as_bytes().to_vec()));
        let mut b = Batcher::new(src, 10, None);
        let batch = b.next_batch().unwrap().unwrap();
        assert_eq!(batch.rows, 2);
        assert_eq!(batch.metrics, 3);
        assert_eq!(
            batch.body,
            b"cpu,host=a usage=1i,idle=2i 10\nmem v=1.5 20\n"
        );
        assert!(b.next_batch().unwrap().is_none());
    }

    #[test]
    fn count_fields_handles_escapes_and_quoted_strings() {
        assert_eq!(count_fields(b"cpu,host=a usage=1i,idle=2i 10"), 2);
        assert_eq!(count_fields(b"cpu v=1"), 1);
        assert_eq!(count_fields(br"my\ cpu,ho\,st=a\ b x=1,y=2,z=3 10"), 3);
        assert_eq!(count_fields(br#"log msg="a, b c",n=1i 10"#), 2);
        assert_eq!(count_fields(br#"log msg="say \"hi, there\"",n=1i 10"#), 2);
        assert_eq!(count_fields(b"no-fields"), 0);
        assert_eq!(count_fields(b"cpu  10"), 0);
    }

    #[test]
    fn fixed_point_matches_go_shortest_formatting() {
        let cases: [(f64, usize, &str); 10] = [
            (52.318549, 5, "52.31854"),
            (-0.0005, 5, "-0.0005"),
            (-0.000001, 5, "0"),
            (124.9, 0, "124"),
            (25.0, 1, "25"),
            (0.95, 1, "0.9"),
            (4999.99, 0, "4999"),
            (-12.300004, 5, "-12.3"),
            (0.010025, 5, "0.01002"),
            (180.0, 5, "180"),
        ];
        for (x, d, want) in cases {
            let mut out = Vec::new();
            push_fixed(&mut out, x, d);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{x} to {d} places");
        }
        let mut out = Vec::new();
        push_i64(&mut out, -1_451_606_400_000_000_000);
        push_u64(&mut out, 0);
        assert_eq!(out, b"-14516064000000000000");
    }

    #[test]
    fn normal_samples_have_unit_variance() {
        use rand::SeedableRng;
        let mut rng = GenRng::seed_from_u64(7);
        let mut n = Normal::default();
        let xs: Vec<f64> = (0..200_000).map(|_| n.sample(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
    }
}
