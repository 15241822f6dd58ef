//! What a frame costs a role: per-role service curves (seconds of compute as a function of rows
//! per frame), fitted from the per-frame stage records `serve --profile-dir` writes, or from the
//! paper's per-role stage profiles.
//!
//! Roles that share a machine's cores slow one another down, so a frame's wall time is not its
//! cost. A frame's cost is the CPU time of the role's compute thread over it (`cpu_ns`, which the
//! engine records), and for a frame launched alone, which computes on every core with nothing else
//! in flight, its wall time. (Working back from wall times, by sharing each instant's cores among
//! the roles computing then, was tried first: it made a one-row frame cost 0.5 ms at 64 streams
//! and 1.4 ms at 4, where the CPU clocks say it costs the same; Linux runs a role that just woke
//! before the ones that have computed for long, and the roles do not share evenly.)
//! Rows the frame's experts select are not recorded; with top-k
//! routing over many experts, the distinct experts a frame touches are a function of its rows in
//! expectation, which the curve folds in. The curve is piecewise linear through the medians of
//! rows-per-frame bins (1-16 rows exactly, then bins 25 % wide), extrapolated from its last two
//! points.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// One frame as a role recorded it (the engine's record, `moefleet_schema::FrameRecord`; older
/// records lack `start_s` and `cpu_ns`).
pub type Frame = moefleet_schema::FrameRecord;

/// When a frame was handed to the next role: its `sent_s`, or in records without one the time the
/// record was written, right after the write (`read_frames` and the compact file give every frame
/// one of them).
fn sent_at(f: &Frame) -> f64 {
    f.sent_s.or(f.epoch_s).unwrap_or(f64::NAN)
}

/// Every role's frame records in `dir` (`role-K.jsonl`), by role.
pub fn read_frames(dir: &Path) -> Result<Vec<Vec<Frame>>> {
    let mut roles = Vec::new();
    for k in 0.. {
        let path = dir.join(format!("role-{k}.jsonl"));
        let gz = dir.join(format!("role-{k}.jsonl.gz"));
        let reader: Box<dyn BufRead> = if path.exists() {
            Box::new(std::io::BufReader::new(std::fs::File::open(&path)?))
        } else if gz.exists() {
            let f = std::fs::File::open(&gz)?;
            Box::new(std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
                f,
            )))
        } else {
            break;
        };
        let mut frames = Vec::new();
        for (i, line) in reader.lines().enumerate() {
            let line = line.with_context(|| format!("reading role-{k} records"))?;
            if line.trim().is_empty() {
                continue;
            }
            let f: Frame = serde_json::from_str(&line)
                .with_context(|| format!("role-{k} record {} is not a frame record", i + 1))?;
            if f.epoch_s.is_none() {
                bail!(
                    "role-{k} record {} is not a frame record: no epoch_s",
                    i + 1
                );
            }
            frames.push(f);
        }
        roles.push(frames);
    }
    if roles.len() < 2 {
        bail!(
            "{}: no role-0.jsonl and role-1.jsonl frame records (run `moefleet serve --profile-dir DIR`)",
            dir.display()
        );
    }
    Ok(roles)
}

/// Header of the compact frame file (`frames.csv.gz`): what the fit reads of every record, times
/// in microseconds from the first frame's start (`end`: compute done; `sent`: the record's
/// `sent_s`, just before the frame was written to the next role, or in older records its
/// `epoch_s`, just after).
const COMPACT_HEADER: &str = "role,seq,rows,alone,start_us,end_us,sent_us,cpu_us";

/// Write the frames whose start `keep` accepts as a compact gzip CSV (the committed form of a
/// calibration: a fraction of the raw JSONL's size, and all the fit reads).
pub fn write_compact(
    frames: &[Vec<Frame>],
    keep: impl Fn(f64) -> bool,
    path: &Path,
) -> Result<usize> {
    use std::io::Write;
    let t0 = frames
        .iter()
        .flatten()
        .map(Frame::start)
        .fold(f64::INFINITY, f64::min);
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
    writeln!(gz, "{COMPACT_HEADER}")?;
    let mut n = 0;
    for fr in frames.iter().flatten().filter(|f| keep(f.start())) {
        let us = |t: f64| ((t - t0) * 1e6).round() as i64;
        writeln!(
            gz,
            "{},{},{},{},{},{},{},{}",
            fr.role,
            fr.seq,
            fr.rows,
            u8::from(fr.alone),
            us(fr.start()),
            us(fr.end()),
            us(sent_at(fr)),
            fr.cpu_ns.map_or(-1, |c| (c as f64 / 1e3).round() as i64)
        )?;
        n += 1;
    }
    gz.finish()?;
    Ok(n)
}

/// Read a compact frame file, by role (times as seconds from its origin).
pub fn read_compact(path: &Path) -> Result<Vec<Vec<Frame>>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    parse_compact(f, path)
}

/// Parse a compact frame file's (gzipped) bytes; `path` names it in errors.
pub fn parse_compact(gz: impl std::io::Read, path: &Path) -> Result<Vec<Vec<Frame>>> {
    let r = std::io::BufReader::new(flate2::read::MultiGzDecoder::new(gz));
    let mut roles: Vec<Vec<Frame>> = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        if i == 0 {
            if line != COMPACT_HEADER {
                bail!(
                    "{}: header {line:?} is not {COMPACT_HEADER:?}",
                    path.display()
                );
            }
            continue;
        }
        let v: Vec<&str> = line.split(',').collect();
        let bad = || anyhow::anyhow!("{} line {}: {line:?}", path.display(), i + 1);
        if v.len() != 8 {
            return Err(bad());
        }
        let num = |k: usize| v[k].parse::<i64>().map_err(|_| bad());
        let (role, seq, rows) = (num(0)? as usize, num(1)? as u64, num(2)? as usize);
        let (start, end) = (num(4)? as f64 * 1e-6, num(5)? as f64 * 1e-6);
        let sent = num(6)? as f64 * 1e-6;
        if end < start || sent < start {
            return Err(bad());
        }
        if roles.len() <= role {
            roles.resize_with(role + 1, Vec::new);
        }
        roles[role].push(Frame {
            role,
            seq,
            rows,
            epoch_s: Some(sent),
            start_s: Some(start),
            alone: num(3)? != 0,
            compute_ns: ((end - start) * 1e9).round() as u64,
            cpu_ns: u64::try_from(num(7)?).ok().map(|c| c * 1000),
            ..Default::default()
        });
    }
    Ok(roles)
}

/// A role's service time as a function of rows per frame (piecewise linear through points).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// (rows, seconds), rows increasing.
    pub points: Vec<(f64, f64)>,
}

impl Curve {
    pub fn seconds(&self, rows: usize) -> f64 {
        let p = &self.points;
        let x = rows as f64;
        match p.len() {
            0 => 0.0,
            1 => p[0].1,
            _ => {
                let i = p.partition_point(|q| q.0 < x);
                let (a, b) = match i {
                    0 => return p[0].1,
                    i if i >= p.len() => (p[p.len() - 2], p[p.len() - 1]),
                    i => (p[i - 1], p[i]),
                };
                let slope = ((b.1 - a.1) / (b.0 - a.0)).max(0.0);
                (a.1 + slope * (x - a.0)).max(0.0)
            }
        }
    }

    /// Medians of (rows, seconds) within rows bins.
    pub fn fit(samples: &[(usize, f64)]) -> Curve {
        let mut bins: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
        for &(r, s) in samples {
            bins.entry(bin(r)).or_default().push((r, s));
        }
        let points = bins
            .into_values()
            .map(|v| {
                let mut rows: Vec<f64> = v.iter().map(|x| x.0 as f64).collect();
                let mut secs: Vec<f64> = v.iter().map(|x| x.1).collect();
                (median(&mut rows), median(&mut secs))
            })
            .collect();
        Curve { points }
    }

    /// The same curve with every time multiplied by `k`.
    pub fn scaled(&self, k: f64) -> Curve {
        Curve {
            points: self.points.iter().map(|&(r, s)| (r, s * k)).collect(),
        }
    }
}

/// Rows-per-frame bin: exact up to 16, then bins 25 % wide (the bin's lower edge).
fn bin(rows: usize) -> usize {
    if rows <= 16 {
        return rows;
    }
    let mut edge = 16.0f64;
    while (edge * 1.25).ceil() as usize <= rows {
        edge = (edge * 1.25).ceil();
    }
    edge as usize
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// What every role's frames cost: a curve for frames that share the pipeline (one thread) and one
/// for frames launched alone (every core of a shared machine), per role.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub shared: Vec<Curve>,
    /// Empty where the role recorded no frame launched alone (the shared curve is used).
    pub alone: Vec<Curve>,
}

impl Costs {
    pub fn roles(&self) -> usize {
        self.shared.len()
    }

    /// Whether role `role` has a curve for frames launched alone.
    pub fn has_alone(&self, role: usize) -> bool {
        self.alone.get(role).is_some_and(|c| !c.points.is_empty())
    }

    pub fn seconds(&self, role: usize, rows: usize, alone: bool) -> f64 {
        match self.alone.get(role) {
            Some(c) if alone && !c.points.is_empty() => c.seconds(rows),
            _ => self.shared[role].seconds(rows),
        }
    }

    /// Fit from frame records, keeping only frames whose start `keep` accepts (the calibration
    /// phases); frames without a cost (older records without CPU times) are skipped.
    pub fn fit(frames: &[Vec<Frame>], keep: impl Fn(f64) -> bool) -> Costs {
        let mut costs = Costs::default();
        for fs in frames {
            let pick = |alone: bool| -> Vec<(usize, f64)> {
                fs.iter()
                    .filter(|f| f.alone == alone && keep(f.start()))
                    .filter_map(|f| f.cost().map(|c| (f.rows, c)))
                    .collect()
            };
            costs.shared.push(Curve::fit(&pick(false)));
            costs.alone.push(Curve::fit(&pick(true)));
        }
        costs
    }

    pub fn scaled(&self, k: f64) -> Costs {
        Costs {
            shared: self.shared.iter().map(|c| c.scaled(k)).collect(),
            alone: self.alone.iter().map(|c| c.scaled(k)).collect(),
        }
    }
}

/// The delay from a role finishing a frame (its send included) to the next role starting it, over
/// frames launched alone (nothing else in flight: a hop and a wake-up, no waiting for a core): the
/// median over the links between roles.
pub fn hop_latency(frames: &[Vec<Frame>], keep: impl Fn(f64) -> bool) -> Option<f64> {
    let mut gaps = Vec::new();
    for r in 1..frames.len() {
        let sent: std::collections::HashMap<u64, f64> =
            frames[r - 1].iter().map(|f| (f.seq, sent_at(f))).collect();
        let mut prev_end = f64::NEG_INFINITY;
        for f in &frames[r] {
            if let Some(&s) = sent.get(&f.seq) {
                if f.alone && prev_end < s && keep(f.start()) {
                    gaps.push((f.start() - s).max(0.0));
                }
            }
            prev_end = sent_at(f);
        }
    }
    (!gaps.is_empty()).then(|| median(&mut gaps))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(role: usize, seq: u64, start: f64, secs: f64, alone: bool) -> Frame {
        Frame {
            role,
            seq,
            rows: 1,
            epoch_s: Some(start + secs),
            start_s: Some(start),
            alone,
            compute_ns: (secs * 1e9) as u64,
            cpu_ns: Some((secs * 1e9) as u64),
            ..Default::default()
        }
    }

    #[test]
    fn hops_are_measured_on_frames_launched_alone_and_records_survive_the_compact_file() {
        // role 0 sends frame 1 at 1.0 s, role 1 starts it 0.2 ms later; frame 2 was not alone
        let f = vec![
            vec![frame(0, 1, 0.9, 0.1, true), frame(0, 2, 2.0, 0.1, false)],
            vec![frame(1, 1, 1.0002, 0.1, true), frame(1, 2, 2.5, 0.1, false)],
        ];
        let hop = hop_latency(&f, |_| true).unwrap();
        assert!((hop - 0.0002).abs() < 1e-9, "{hop}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frames.csv.gz");
        assert_eq!(write_compact(&f, |t| t < 2.2, &path).unwrap(), 3);
        let back = read_compact(&path).unwrap();
        assert_eq!(back.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
        let (a, b) = (&f[1][0], &back[1][0]);
        assert_eq!(
            (b.role, b.seq, b.rows, b.alone),
            (a.role, a.seq, a.rows, a.alone)
        );
        assert!((b.cost().unwrap() - a.cost().unwrap()).abs() < 1e-6);
        // times are kept to the microsecond, from the first start
        assert!((b.start() - (a.start() - 0.9)).abs() < 1e-6);
    }

    #[test]
    fn a_hop_starts_when_the_frame_is_handed_over_not_when_the_write_returns() {
        // role 0 hands frame 1 to its link at 1.0 s; role 1 starts on it 0.3 ms later, while role
        // 0's write is still returning (its record is written at 1.0005 s)
        let mut sent = frame(0, 1, 0.9, 0.1, true);
        (sent.sent_s, sent.epoch_s) = (Some(1.0), Some(1.0005));
        let f = vec![vec![sent.clone()], vec![frame(1, 1, 1.0003, 0.1, true)]];
        let hop = hop_latency(&f, |_| true).unwrap();
        assert!((hop - 0.0003).abs() < 1e-9, "{hop}");
        // an older record, without `sent_s`: the hop is measured from the record, clamped at 0
        sent.sent_s = None;
        let f = vec![vec![sent], f[1].clone()];
        assert_eq!(hop_latency(&f, |_| true), Some(0.0));
    }

    #[test]
    fn curves_interpolate_bin_medians_and_extrapolate() {
        let samples: Vec<(usize, f64)> = (1..=64)
            .flat_map(|r| [(r, 1.0 + 0.5 * r as f64), (r, 1.0 + 0.5 * r as f64)])
            .collect();
        let c = Curve::fit(&samples);
        for r in [1, 5, 16, 40, 64, 100] {
            let want = 1.0 + 0.5 * r as f64;
            assert!(
                (c.seconds(r) - want).abs() < 0.02 * want,
                "{r}: {}",
                c.seconds(r)
            );
        }
        assert_eq!(bin(16), 16);
        assert_eq!(bin(19), 16);
        assert_eq!(bin(20), 20);
        assert_eq!(bin(24), 20);
        assert_eq!(bin(25), 25);
    }
}
