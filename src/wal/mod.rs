//! Write-ahead log: append-only segment files of framed records
//! (`len | crc32c | seq | snappy payload`), group-committed by one writer thread so
//! that concurrent writers share an fsync; replayed on start, trimmed after a flush.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use tokio::sync::oneshot;

use crate::config::FsyncPolicy;
use crate::error::{Error, Result};

/// First bytes of every segment.
pub const SEGMENT_MAGIC: &[u8; 8] = b"SUNDWAL1";
/// `len u32 | crc32c u32 | seq u64`.
pub const RECORD_HEADER: usize = 16;
/// Largest compressed or uncompressed record accepted.
pub const MAX_RECORD: usize = 1 << 30;
const SEGMENT_TARGET: u64 = 64 * 1024 * 1024;

/// Rate of "WAL write failed" log lines (a full disk fails every write).
static WRITE_FAILED: crate::error::Throttle = crate::error::Throttle::new();

/// Counters for `/metrics` and benchmarks.
#[derive(Debug, Default)]
pub struct WalStats {
    pub appends: AtomicU64,
    pub fsyncs: AtomicU64,
    pub bytes: AtomicU64,
}

enum Command {
    Append {
        payload: Vec<u8>,
        reply: oneshot::Sender<Result<u64>>,
    },
    Checkpoint {
        flushed: u64,
        reply: oneshot::Sender<Result<()>>,
    },
}

/// Handle to the WAL; cheap to clone.
#[derive(Clone)]
pub struct Wal {
    tx: mpsc::Sender<Command>,
    last_seq: Arc<AtomicU64>,
    pub stats: Arc<WalStats>,
    /// Whether opening went on past missing records (`accept_loss`).
    lost: bool,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("last_seq", &self.last_seq.load(Ordering::Relaxed))
            .finish()
    }
}

/// A record read back during replay.
#[derive(Debug)]
pub struct Replayed {
    pub seq: u64,
    pub payload: Vec<u8>,
}

impl Wal {
    /// Opens the WAL in `dir`, returning the handle and every record with a sequence
    /// number greater than `after`, in order. A torn tail is truncated with a warning;
    /// damage anywhere else is an error naming the file and offset. Sequence numbers
    /// have no holes, so a missing range (a segment deleted or lost) is an error too,
    /// unless `accept_loss` is set: then it is logged and start-up goes on.
    pub fn open(
        dir: &Path,
        policy: FsyncPolicy,
        after: u64,
        accept_loss: bool,
    ) -> Result<(Wal, Vec<Replayed>)> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create WAL dir {}", dir.display()), e))?;
        let segments = list_segments(dir)?;
        let mut records = vec![];
        let mut last_seq = after;
        // The sequence number the next record must have, once known.
        let mut expect: Option<u64> = None;
        let mut lost = false;
        for (i, (first, path)) in segments.iter().enumerate() {
            let is_last = i + 1 == segments.len();
            let recs = read_segment(path, is_last)?;
            let begins = recs.first().map(|r| r.seq).unwrap_or(*first);
            let want = expect.unwrap_or(after + 1);
            // The first segment may begin before `after` (its early records are flushed).
            if begins > want {
                let e = Error::WalGap {
                    first: want,
                    last: begins - 1,
                    file: path.display().to_string(),
                };
                if !accept_loss {
                    return Err(e);
                }
                tracing::error!(error = %e, "going on without the missing WAL records (--wal-accept-loss)");
                lost = true;
            } else if expect.is_some() && begins < want {
                return Err(Error::WalCorrupt {
                    file: path.display().to_string(),
                    offset: 0,
                    reason: format!("begins at record {begins}, expected {want}"),
                });
            }
            for pair in recs.windows(2) {
                if pair[1].seq != pair[0].seq + 1 {
                    let e = Error::WalGap {
                        first: pair[0].seq + 1,
                        last: pair[1].seq - 1,
                        file: path.display().to_string(),
                    };
                    if !accept_loss {
                        return Err(e);
                    }
                    tracing::error!(error = %e, "going on without the missing WAL records (--wal-accept-loss)");
                    lost = true;
                }
            }
            if let Some(r) = recs.last() {
                last_seq = last_seq.max(r.seq);
                expect = Some(r.seq + 1);
            } else {
                last_seq = last_seq.max(first.saturating_sub(1));
                expect = Some(*first);
            }
            records.extend(recs.into_iter().filter(|r| r.seq > after));
        }
        let next = last_seq + 1;
        let path = dir.join(segment_name(next));
        let file = match new_segment(&path, dir) {
            Ok(f) => Some(f),
            Err(e) if e.is_disk_full() => {
                tracing::warn!(error = %e, "the disk is full: writes are refused (53100) until there is room; queries are served");
                None
            }
            Err(e) => return Err(e),
        };
        let stats = Arc::new(WalStats::default());
        let last = Arc::new(AtomicU64::new(last_seq));
        let (tx, rx) = mpsc::channel();
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            policy,
            file,
            path,
            size: SEGMENT_MAGIC.len() as u64,
            next_seq: next,
            stats: stats.clone(),
            last_seq: last.clone(),
        };
        std::thread::Builder::new()
            .name("sundial-wal".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::io("cannot start WAL thread", e))?;
        Ok((
            Wal {
                tx,
                last_seq: last,
                stats,
                lost,
            },
            records,
        ))
    }

    /// Whether opening went on without missing records (`accept_loss`): the rows
    /// replayed must then be flushed so that the next start finds no gap.
    pub fn accepted_loss(&self) -> bool {
        self.lost
    }

    /// Appends one record; resolves with its sequence number once durable under the policy.
    /// The payload is compressed here, on the caller's thread.
    pub async fn append(&self, payload: &[u8]) -> Result<u64> {
        let compressed = snap::raw::Encoder::new()
            .compress_vec(payload)
            .map_err(|e| Error::Wal(format!("snappy: {e}")))?;
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Append {
                payload: compressed,
                reply,
            })
            .map_err(|_| Error::Wal("WAL writer has stopped".into()))?;
        rx.await
            .map_err(|_| Error::Wal("WAL writer has stopped".into()))?
    }

    /// Highest sequence number handed out so far.
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::SeqCst)
    }

    /// Starts a new segment and deletes the segments whose records are all `<= flushed`.
    pub async fn checkpoint(&self, flushed: u64) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Checkpoint { flushed, reply })
            .map_err(|_| Error::Wal("WAL writer has stopped".into()))?;
        rx.await
            .map_err(|_| Error::Wal("WAL writer has stopped".into()))?
    }
}

struct Writer {
    dir: PathBuf,
    policy: FsyncPolicy,
    /// The segment being written; none while the disk had no room to create it
    /// (every append tries again, and fails with 53100 until there is room).
    file: Option<File>,
    path: PathBuf,
    size: u64,
    next_seq: u64,
    stats: Arc<WalStats>,
    last_seq: Arc<AtomicU64>,
}

impl Writer {
    fn run(&mut self, rx: mpsc::Receiver<Command>) {
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
                if batch.len() >= 4096 {
                    break;
                }
            }
            let mut replies = vec![];
            buf.clear();
            for cmd in batch {
                match cmd {
                    Command::Append { payload, reply } => {
                        let seq = self.next_seq;
                        self.next_seq += 1;
                        encode_record(&mut buf, seq, &payload);
                        replies.push((seq, reply));
                    }
                    Command::Checkpoint { flushed, reply } => {
                        // Write what is pending first so ordering holds.
                        let res = self
                            .commit(&buf, &mut replies)
                            .and_then(|_| self.checkpoint(flushed));
                        buf.clear();
                        let _ = reply.send(res);
                    }
                }
            }
            if let Err(e) = self.commit(&buf, &mut replies)
                && let Some(left_out) = WRITE_FAILED.allow()
            {
                tracing::error!(error = %e, left_out, "WAL write failed");
            }
        }
    }

    /// Writes `buf`, fsyncs per policy and answers the waiting writers.
    fn commit(
        &mut self,
        buf: &[u8],
        replies: &mut Vec<(u64, oneshot::Sender<Result<u64>>)>,
    ) -> Result<()> {
        if replies.is_empty() {
            return Ok(());
        }
        let (policy, stats) = (self.policy, self.stats.clone());
        let io = self.segment().and_then(|file| {
            file.write_all(buf)?;
            if policy == FsyncPolicy::Fsync {
                stats.fsyncs.fetch_add(1, Ordering::Relaxed);
                file.sync_data()
            } else {
                Ok(())
            }
        });
        let full = matches!(&io, Err(e) if e.kind() == std::io::ErrorKind::StorageFull
            || e.raw_os_error() == Some(libc::ENOSPC));
        let res = io.map_err(|e| Error::io(format!("WAL write to {}", self.path.display()), e));
        match &res {
            Ok(()) => {
                self.size += buf.len() as u64;
                self.stats
                    .appends
                    .fetch_add(replies.len() as u64, Ordering::Relaxed);
                self.stats
                    .bytes
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                if let Some((seq, _)) = replies.last() {
                    self.last_seq.store(*seq, Ordering::SeqCst);
                }
                for (seq, reply) in replies.drain(..) {
                    let _ = reply.send(Ok(seq));
                }
            }
            Err(e) => {
                // The segment may now hold a partial write: cut it back so later records
                // are never appended after garbage. The failed records were never
                // acknowledged; their sequence numbers are used again, so the log has no
                // holes (a hole means lost records at replay).
                if let Some((first, _)) = replies.first() {
                    self.next_seq = *first;
                }
                let msg = e.to_string();
                for (_, reply) in replies.drain(..) {
                    let err = match full {
                        true => Error::DiskFull(msg.clone()),
                        false => Error::Wal(msg.clone()),
                    };
                    let _ = reply.send(Err(err));
                }
                if let Some(file) = self.file.as_mut() {
                    let _ = file.set_len(self.size);
                    let _ = file.seek(SeekFrom::Start(self.size));
                }
            }
        }
        if self.size >= SEGMENT_TARGET {
            self.rotate()?;
        }
        res
    }

    /// The segment to append to, created first when the disk had no room for it.
    fn segment(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let made = new_segment(&self.path, &self.dir).map_err(|e| match e {
                Error::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            })?;
            tracing::info!(segment = %self.path.display(), "the WAL has room again: writes are accepted");
            self.file = Some(made);
        }
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no WAL segment"))
    }

    fn rotate(&mut self) -> Result<()> {
        let path = self.dir.join(segment_name(self.next_seq));
        if path == self.path {
            return Ok(());
        }
        // The segment being left is complete and durable before the next one exists,
        // whatever the fsync policy: a hole in the middle of the log is an error at
        // start-up, a torn end of the last segment is not.
        if let Some(file) = &self.file {
            file.sync_data()
                .map_err(|e| Error::io(format!("cannot sync {}", self.path.display()), e))?;
        }
        self.file = Some(new_segment(&path, &self.dir)?);
        self.path = path;
        self.size = SEGMENT_MAGIC.len() as u64;
        Ok(())
    }

    fn checkpoint(&mut self, flushed: u64) -> Result<()> {
        if self.size > SEGMENT_MAGIC.len() as u64 {
            self.rotate()?;
        }
        let segs = list_segments(&self.dir)?;
        for (i, (_, path)) in segs.iter().enumerate() {
            if *path == self.path {
                continue;
            }
            let next_first = segs.get(i + 1).map(|s| s.0).unwrap_or(u64::MAX);
            if next_first.saturating_sub(1) <= flushed {
                std::fs::remove_file(path)
                    .map_err(|e| Error::io(format!("cannot remove {}", path.display()), e))?;
            }
        }
        Ok(())
    }
}

fn encode_record(buf: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let seq_bytes = seq.to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&seq_bytes), payload);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&seq_bytes);
    buf.extend_from_slice(payload);
}

/// Segment file name for a segment whose first record is `first_seq`.
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.wal")
}

fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = vec![];
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("cannot list WAL dir {}", dir.display()), e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("cannot list WAL dir", e))?;
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".wal")
            && let Ok(first) = stem.parse::<u64>()
        {
            out.push((first, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn new_segment(path: &Path, dir: &Path) -> Result<File> {
    let made = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .and_then(|mut f| {
            f.write_all(SEGMENT_MAGIC)?;
            f.sync_all()?;
            Ok(f)
        });
    let f = match made {
        Ok(f) => f,
        Err(e) => {
            // No half-made segment may stay: its name would say where records begin.
            let _ = std::fs::remove_file(path);
            return Err(Error::io(
                format!("cannot create WAL segment {}", path.display()),
                e,
            ));
        }
    };
    crate::catalog::sync_dir(dir)?;
    Ok(f)
}

/// Outcome of decoding one frame at an offset.
enum Frame {
    Ok(Replayed, usize),
    /// Not enough bytes, absurd length, or bad CRC.
    Bad(String),
}

fn decode_frame(data: &[u8], off: usize) -> Frame {
    if data.len() - off < RECORD_HEADER {
        return Frame::Bad("incomplete record header".into());
    }
    let h = &data[off..off + RECORD_HEADER];
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let seq_bytes = &h[8..16];
    if len == 0 || len > MAX_RECORD {
        return Frame::Bad(format!("invalid record length {len}"));
    }
    let end = off + RECORD_HEADER + len;
    if end > data.len() {
        return Frame::Bad("record extends past the end of the segment".into());
    }
    let payload = &data[off + RECORD_HEADER..end];
    if crc32c::crc32c_append(crc32c::crc32c(seq_bytes), payload) != crc {
        return Frame::Bad("checksum mismatch".into());
    }
    let seq = u64::from_le_bytes(seq_bytes.try_into().unwrap_or([0; 8]));
    let decompressed = match snap::raw::decompress_len(payload) {
        Ok(n) if n <= MAX_RECORD => snap::raw::Decoder::new().decompress_vec(payload),
        Ok(n) => return Frame::Bad(format!("record claims {n} uncompressed bytes")),
        Err(e) => Err(e),
    };
    match decompressed {
        Ok(p) => Frame::Ok(Replayed { seq, payload: p }, end),
        Err(e) => Frame::Bad(format!("snappy: {e}")),
    }
}

fn read_segment(path: &Path, is_last: bool) -> Result<Vec<Replayed>> {
    let data =
        std::fs::read(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let name = path.display().to_string();
    let corrupt = |offset: usize, reason: String| Error::WalCorrupt {
        file: name.clone(),
        offset: offset as u64,
        reason,
    };
    if data.len() < SEGMENT_MAGIC.len() || &data[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
        if is_last && SEGMENT_MAGIC.starts_with(&data[..data.len().min(8)]) {
            tracing::warn!(file = %name, "WAL segment header is torn; discarding the segment");
            truncate(path, 0)?;
            return Ok(vec![]);
        }
        return Err(corrupt(0, "bad segment header".into()));
    }
    let mut out = vec![];
    let mut off = SEGMENT_MAGIC.len();
    while off < data.len() {
        match decode_frame(&data, off) {
            Frame::Ok(r, end) => {
                if let Some(prev) = out.last().map(|p: &Replayed| p.seq)
                    && r.seq <= prev
                {
                    return Err(corrupt(off, format!("sequence {} after {prev}", r.seq)));
                }
                out.push(r);
                off = end;
            }
            Frame::Bad(reason) => {
                // A torn tail has no valid record after it; damage in the middle does.
                let prev = out.last().map(|p: &Replayed| p.seq).unwrap_or(0);
                if is_last && !valid_record_follows(&data, off, prev) {
                    tracing::warn!(file = %name, offset = off, %reason,
                        "truncating torn WAL tail");
                    truncate(path, off as u64)?;
                    break;
                }
                return Err(corrupt(off, reason));
            }
        }
    }
    Ok(out)
}

/// Whether any later offset holds a record with a valid checksum. Only headers that
/// could follow the last good record (`prev`: its sequence number) are checksummed:
/// a later record's number is above it and not absurdly far, and its length fits.
/// Random bytes almost never pass, so the scan stays linear in the tail's size.
fn valid_record_follows(data: &[u8], bad_off: usize, prev: u64) -> bool {
    let mut off = bad_off + 1;
    while off + RECORD_HEADER < data.len() {
        let h = &data[off..off + RECORD_HEADER];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let seq = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        let plausible = len > 0
            && len <= data.len() - off - RECORD_HEADER
            && seq > prev
            && seq - prev <= 1 << 32;
        if plausible && let Frame::Ok(..) = decode_frame(data, off) {
            return true;
        }
        off += 1;
    }
    false
}

fn truncate(path: &Path, len: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    f.set_len(len)
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io(format!("cannot truncate {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn append_replay_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, recs) = Wal::open(dir.path(), FsyncPolicy::Fsync, 0, false).unwrap();
        assert!(recs.is_empty());
        let rt = rt();
        for i in 0..10u8 {
            let seq = rt.block_on(wal.append(&[i; 100])).unwrap();
            assert_eq!(seq, i as u64 + 1);
        }
        drop(wal);
        std::thread::sleep(std::time::Duration::from_millis(50));
        // garbage tail
        let segs = list_segments(dir.path()).unwrap();
        let last = &segs[0].1;
        let mut f = OpenOptions::new().append(true).open(last).unwrap();
        f.write_all(&[7u8; 37]).unwrap();
        let (_wal, recs) = Wal::open(dir.path(), FsyncPolicy::Fsync, 3, false).unwrap();
        assert_eq!(recs.len(), 7);
        assert_eq!(recs[0].seq, 4);
        assert_eq!(recs[6].payload, vec![9u8; 100]);
    }

    #[test]
    fn middle_corruption_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), FsyncPolicy::None, 0, false).unwrap();
        let rt = rt();
        for i in 0..3u8 {
            rt.block_on(wal.append(&[i; 50])).unwrap();
        }
        drop(wal);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let segs = list_segments(dir.path()).unwrap();
        let mut data = std::fs::read(&segs[0].1).unwrap();
        data[8 + RECORD_HEADER + 2] ^= 0xff;
        std::fs::write(&segs[0].1, &data).unwrap();
        let err = Wal::open(dir.path(), FsyncPolicy::None, 0, false).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("offset 8"), "{msg}");
        assert!(msg.contains(".wal"), "{msg}");
    }
}
