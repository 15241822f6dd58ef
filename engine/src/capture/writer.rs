//! The last role's capture writer. The compute thread only appends records to a per-slot buffer
//! (`observe`, after sampling) and hands a finished buffer over (`close`, when role 0 resets the
//! slot); a background thread names, writes and reports each file. Writing never blocks decoding,
//! and an unwritable directory or a full disk becomes a failed report for that stream alone.
//! Buffers are bounded (`MAX_CAPTURE_BYTES` per stream, `MAX_OPEN_BYTES` over all streams): a
//! capture's buffer counts from its first record until the writer thread has written it, so
//! however many streams end at once their captures wait for the writer, and a writer that falls
//! behind makes new records refused (the capture dropped and reported) rather than let captures
//! exhaust the role's memory.
//!
//! Every capture that is closed gets exactly one report, carrying the slot and the slot's capture
//! serial (0, 1, 2, … per slot, counted by role 0 the same way), so role 0 matches reports to its
//! streams even when a refusal overtakes a file still being written.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

use super::format::{push_record, Header, HEADER_BYTES, NOT_SAMPLED};

/// Largest capture buffered for one stream (about 10,900 positions at `inkling`'s width).
pub const MAX_CAPTURE_BYTES: usize = 256 << 20;
/// Largest total of the buffers of every stream being captured or waiting for the writer thread.
pub const MAX_OPEN_BYTES: usize = 2 << 30;

/// What became of one stream's capture: the file written, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub slot: u32,
    /// The slot's capture serial: the n-th capture closed in this slot has serial n − 1.
    pub serial: u64,
    pub outcome: Result<Written, String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub path: String,
    pub sequence: u64,
    pub bytes: u64,
}

/// Where reports go (the link to role 0, or role 0's own inbox in a one-role fleet).
pub type ReportSink = Box<dyn Fn(Report) + Send + Sync>;

/// One stream's records so far.
struct Open {
    records: Vec<u8>,
    n: u32,
    prompt_rows: Option<u32>,
    /// Why this capture cannot be completed (a gap in positions), kept for the report.
    broken: Option<String>,
}

struct Job {
    slot: u32,
    serial: u64,
    header: Header,
    records: Vec<u8>,
}

pub struct CaptureWriter {
    role: u32,
    hidden: usize,
    open: HashMap<u32, Open>,
    /// Bytes held over every open capture and every finished one the writer thread has not yet
    /// written (it takes them off when it has).
    held: Arc<AtomicUsize>,
    /// (per stream, over all streams) buffer limits.
    limits: (usize, usize),
    /// Next capture serial per slot.
    serials: HashMap<u32, u64>,
    /// None: this role has no capture directory; captures asked of it fail with a clear report.
    queue: Option<Sender<Job>>,
    sink: Arc<ReportSink>,
}

impl CaptureWriter {
    /// A writer into `dir` (created now; an error if it cannot be), or one that refuses every
    /// capture when `dir` is None.
    pub fn new(
        role: u32,
        hidden: usize,
        dir: Option<&Path>,
        sink: ReportSink,
    ) -> crate::Result<Self> {
        let sink = Arc::new(sink);
        let held = Arc::new(AtomicUsize::new(0));
        let queue = match dir {
            None => None,
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| crate::Error::io(d, e))?;
                probe_writable(d)?;
                let (tx, rx) = mpsc::channel::<Job>();
                let (dir, sink, written) = (d.to_path_buf(), sink.clone(), held.clone());
                let mut next = first_free_sequence(&dir);
                std::thread::Builder::new()
                    .name("capture-writer".into())
                    .spawn(move || {
                        for job in rx {
                            let (slot, serial) = (job.slot, job.serial);
                            let bytes = job.records.len();
                            let outcome = write(&dir, &mut next, job);
                            written.fetch_sub(bytes, Ordering::AcqRel);
                            sink(Report {
                                slot,
                                serial,
                                outcome,
                            });
                        }
                    })
                    .map_err(|e| crate::Error::io(d, e))?;
                Some(tx)
            }
        };
        Ok(CaptureWriter {
            role,
            hidden,
            open: HashMap::new(),
            held,
            limits: (MAX_CAPTURE_BYTES, MAX_OPEN_BYTES),
            serials: HashMap::new(),
            queue,
            sink,
        })
    }

    /// Record one row of a capturing stream: its position, input token, emitted token
    /// (`NOT_SAMPLED` if none) and residual before the final norm. A row at position 0 starts the
    /// slot's capture afresh.
    pub fn observe(&mut self, slot: u32, pos: u32, input: u32, emitted: u32, residual: &[f32]) {
        if pos == 0 {
            if let Some(stale) = self.open.remove(&slot) {
                // never closed, so role 0 never counted it: dropped without a report
                self.release(stale.records.len());
                tracing::warn!(
                    slot,
                    "a capture left open was dropped when its slot restarted"
                );
            }
            self.open.insert(
                slot,
                Open {
                    records: Vec::new(),
                    n: 0,
                    prompt_rows: None,
                    broken: None,
                },
            );
        }
        let Some(o) = self.open.get_mut(&slot) else {
            return; // capture switched on mid-stream: nothing to anchor it, ignored
        };
        if o.broken.is_some() {
            return;
        }
        if pos != o.n {
            o.broken = Some(format!(
                "position {pos} arrived after {} records (a gap)",
                o.n
            ));
            return;
        }
        let rec = super::format::record_bytes(residual.len());
        let (one, all) = self.limits;
        if o.records.len() + rec > one || self.held.load(Ordering::Acquire) + rec > all {
            o.broken = Some(format!(
                "dropped at position {pos}: captures are limited to {one} bytes per stream and \
                 {all} bytes buffered at once"
            ));
            let freed = std::mem::take(&mut o.records).len();
            self.release(freed);
            return;
        }
        if emitted != NOT_SAMPLED && o.prompt_rows.is_none() {
            o.prompt_rows = Some(pos + 1);
        }
        push_record(&mut o.records, pos, input, emitted, residual);
        self.held.fetch_add(rec, Ordering::AcqRel);
        o.n += 1;
    }

    /// The slot's stream ended (role 0 reset it): hand its capture to the writer thread. Returns
    /// false if the slot had no capture.
    pub fn close(&mut self, slot: u32) -> bool {
        let Some(o) = self.open.remove(&slot) else {
            return false;
        };
        let serial = {
            let s = self.serials.entry(slot).or_insert(0);
            *s += 1;
            *s - 1
        };
        let fail = |why: String| {
            (self.sink)(Report {
                slot,
                serial,
                outcome: Err(why),
            })
        };
        // a capture that is not handed to the writer frees its bytes now
        let bytes = o.records.len();
        if let Some(why) = o.broken {
            self.release(bytes);
            fail(format!("capture of slot {slot} is incomplete: {why}"));
            return true;
        }
        let Some(prompt_rows) = o.prompt_rows else {
            self.release(bytes);
            fail(format!(
                "capture of slot {slot}: the stream ended before its prompt was complete"
            ));
            return true;
        };
        let Some(queue) = &self.queue else {
            self.release(bytes);
            fail(format!(
                "role {} has no capture directory (start it with --capture-dir)",
                self.role
            ));
            return true;
        };
        let job = Job {
            slot,
            serial,
            header: Header {
                hidden: self.hidden as u32,
                role: self.role,
                slot,
                prompt_rows,
                sequence: 0, // assigned by the writer thread
                n_records: o.n,
            },
            records: o.records,
        };
        if queue.send(job).is_err() {
            self.release(bytes);
            fail(format!(
                "capture of slot {slot} dropped: the writer thread has stopped"
            ));
        }
        true
    }

    /// `bytes` of buffers given up (dropped, refused, or never handed to the writer).
    fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Slots with a capture in progress.
    pub fn open_slots(&self) -> usize {
        self.open.len()
    }

    /// Bytes held for captures: open ones, and finished ones the writer thread has not yet
    /// written.
    pub fn held_bytes(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Other buffer limits than `MAX_CAPTURE_BYTES` and `MAX_OPEN_BYTES` (tests).
    pub fn with_limits(mut self, per_stream: usize, all: usize) -> Self {
        self.limits = (per_stream, all);
        self
    }
}

/// `capture-NNNNNN.bin` of sequence n.
pub fn file_name(sequence: u64) -> String {
    format!("capture-{sequence:06}.bin")
}

/// One past the highest sequence already in `dir`, so a restarted role never overwrites a capture.
fn first_free_sequence(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("capture-")?
                .strip_suffix(".bin")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .map_or(0, |m| m + 1)
}

fn probe_writable(dir: &Path) -> crate::Result<()> {
    let p = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::write(&p, b"").map_err(|e| crate::Error::io(&p, e))?;
    let _ = std::fs::remove_file(&p);
    Ok(())
}

/// Write one capture under the next free sequence number: to a temporary name, then renamed, so a
/// reader never sees half a file.
fn write(dir: &Path, next: &mut u64, mut job: Job) -> Result<Written, String> {
    let mut final_path;
    loop {
        final_path = dir.join(file_name(*next));
        if !final_path.exists() {
            break;
        }
        *next += 1;
    }
    job.header.sequence = *next;
    *next += 1;
    let tmp = dir.join(format!(".{}.tmp", file_name(job.header.sequence)));
    let bytes = (HEADER_BYTES + job.records.len()) as u64;
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&job.header.encode())?;
        f.write_all(&job.records)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &final_path)
    })();
    match result {
        Ok(()) => Ok(Written {
            path: final_path.display().to_string(),
            sequence: job.header.sequence,
            bytes,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(format!(
                "capture of slot {} could not be written to {}: {e}",
                job.slot,
                final_path.display()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Capture;
    use std::sync::{Arc, Mutex};

    fn collecting() -> (ReportSink, Arc<Mutex<Vec<Report>>>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        (Box::new(move |r| g.lock().unwrap().push(r)), got)
    }

    fn wait(got: &Arc<Mutex<Vec<Report>>>, n: usize) -> Vec<Report> {
        for _ in 0..500 {
            if got.lock().unwrap().len() >= n {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        got.lock().unwrap().clone()
    }

    #[test]
    fn a_stream_becomes_a_checked_file_and_sequences_continue_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..2u64 {
            let (sink, got) = collecting();
            let mut w = CaptureWriter::new(3, 2, Some(dir.path()), sink).unwrap();
            // prompt [10, 11], generated [12, 13]
            w.observe(5, 0, 10, NOT_SAMPLED, &[0.0, 1.0]);
            w.observe(5, 1, 11, 12, &[2.0, 3.0]);
            w.observe(5, 2, 12, 13, &[4.0, 5.0]);
            assert!(w.close(5));
            assert!(!w.close(5));
            let r = wait(&got, 1);
            let written = r[0].outcome.clone().unwrap();
            assert_eq!(written.sequence, round);
            let c = Capture::read(Path::new(&written.path)).unwrap();
            assert_eq!(c.tokens, vec![10, 11, 12, 13]);
            assert_eq!(
                (c.header.role, c.header.slot, c.header.prompt_rows),
                (3, 5, 2)
            );
            assert_eq!(c.residuals, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        }
    }

    #[test]
    fn failures_are_reports_not_stalls() {
        // no directory configured
        let (sink, got) = collecting();
        let mut w = CaptureWriter::new(1, 1, None, sink).unwrap();
        w.observe(0, 0, 1, 2, &[0.0]);
        w.close(0);
        // a gap in positions
        w.observe(1, 0, 1, NOT_SAMPLED, &[0.0]);
        w.observe(1, 2, 1, 2, &[0.0]);
        w.close(1);
        let r = wait(&got, 2);
        assert!(r[0].outcome.clone().unwrap_err().contains("--capture-dir"));
        assert!(r[1].outcome.clone().unwrap_err().contains("a gap"));
    }

    #[test]
    fn reports_carry_each_slots_serial_whatever_order_they_arrive_in() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, got) = collecting();
        let mut w = CaptureWriter::new(1, 1, Some(dir.path()), sink).unwrap();
        // slot 2: a good capture (written by the thread), then a broken one (refused at once)
        w.observe(2, 0, 1, 2, &[0.5]);
        w.close(2);
        w.observe(2, 0, 1, NOT_SAMPLED, &[0.5]);
        w.observe(2, 5, 1, 2, &[0.5]);
        w.close(2);
        // slot 3 counts on its own; a capture left open when its slot restarts is not counted
        w.observe(3, 0, 1, NOT_SAMPLED, &[0.5]);
        w.observe(3, 0, 1, 2, &[0.5]);
        w.close(3);
        let mut r = wait(&got, 3);
        r.sort_by_key(|x| (x.slot, x.serial));
        let key: Vec<(u32, u64, bool)> = r
            .iter()
            .map(|x| (x.slot, x.serial, x.outcome.is_ok()))
            .collect();
        assert_eq!(key, vec![(2, 0, true), (2, 1, false), (3, 0, true)]);
    }

    #[test]
    fn buffers_are_bounded_and_a_capture_past_them_is_reported() {
        let (sink, got) = collecting();
        let rec = crate::capture::format::record_bytes(4);
        let mut w = CaptureWriter::new(1, 4, None, sink)
            .unwrap()
            .with_limits(3 * rec, 4 * rec);
        for pos in 0..5 {
            w.observe(0, pos, 1, if pos == 0 { 2 } else { 3 }, &[0.0; 4]);
        }
        assert_eq!(w.held_bytes(), 0, "the dropped buffer is freed");
        // two streams of two records each reach the total limit
        for slot in [1, 2, 3] {
            for pos in 0..2 {
                w.observe(slot, pos, 1, 2, &[0.0; 4]);
            }
        }
        assert_eq!(w.held_bytes(), 4 * rec);
        w.close(0);
        w.close(3);
        let r = wait(&got, 2);
        for x in &r {
            assert!(
                x.outcome.clone().unwrap_err().contains("limited to"),
                "{x:?}"
            );
        }
        w.close(1);
        assert_eq!(w.held_bytes(), 2 * rec);
    }

    /// Past the 64 finished captures the hand-over once held, every stream ending at once is
    /// written, and the writer gives the bytes back as it writes them.
    #[test]
    fn many_streams_ending_at_once_are_all_written() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, got) = collecting();
        let mut w = CaptureWriter::new(1, 8, Some(dir.path()), sink).unwrap();
        let rec = crate::capture::format::record_bytes(8);
        let streams = 300u32;
        for slot in 0..streams {
            for pos in 0..3 {
                w.observe(
                    slot,
                    pos,
                    1,
                    if pos == 0 { NOT_SAMPLED } else { 2 },
                    &[0.25; 8],
                );
            }
        }
        assert_eq!(w.held_bytes(), streams as usize * 3 * rec);
        for slot in 0..streams {
            assert!(w.close(slot));
        }
        // 300 files, each synced: a slow disk gets up to a minute
        let mut r = Vec::new();
        for _ in 0..12 {
            r = wait(&got, streams as usize);
            if r.len() == streams as usize {
                break;
            }
        }
        assert_eq!(r.len(), streams as usize);
        assert!(r.iter().all(|x| x.outcome.is_ok()), "{r:?}");
        for _ in 0..500 {
            if w.held_bytes() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(w.held_bytes(), 0);
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, streams as usize);
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let (sink, _) = collecting();
        let e = CaptureWriter::new(1, 1, Some(&file.join("caps")), sink)
            .err()
            .unwrap();
        assert!(e.to_string().contains("a-file"), "{e}");
    }
}
