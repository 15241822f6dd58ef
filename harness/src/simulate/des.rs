//! The fleet as a discrete-event model: role 0's scheduler as the engine runs it (admission into
//! the least-populated group, one frame planned per step from the groups in turn, prefill windows,
//! one decode row per stream with nothing in flight, at most `max_inflight` frames in flight), each
//! role a server that computes its frames in order, links with a fixed per-message delay plus an
//! optional emulated rate and latency, and the sampled tokens returned from the last role straight
//! to role 0. Role 0 computes its own layers on its scheduling thread, so token replies that arrive
//! meanwhile wait until it is done, as in the engine.
//!
//! Roles that share a machine (`cores` set) share its cores as Linux's scheduler shares them among
//! processes that sleep between bursts: the frames with the least work done so far run, one core
//! each (a frame launched alone takes every core), a newly arrived frame preempting one that has
//! run longer, and a frame that waits gets its turn within a time slice. A `background` load (the
//! client, role 0's HTTP threads) keeps part of the cores. Every frame also costs its role
//! `hop_cpu_s` of work beyond its compute (the read, the decode, the send). Otherwise every role
//! has a machine of its own.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};

use moefleet_engine::pipeline::wire::{forward_wire_bytes, tokens_wire_bytes};

use super::costs::Costs;

/// Everything the model needs to know about a fleet.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FleetModel {
    pub costs: Costs,
    /// The cores the roles share (one machine); None: every role on a machine of its own.
    pub cores: Option<usize>,
    /// Delay of every message between roles beyond the emulated link (the network stack), not
    /// counted as work.
    pub hop_s: f64,
    /// Work every frame costs a role beyond its compute: receiving and sending it.
    pub hop_cpu_s: f64,
    /// Cores' worth of other load on a shared machine while requests run.
    pub background: f64,
    /// How long a role that is ready waits at most before the scheduler revisits who runs.
    pub time_slice_s: f64,
    /// Emulated link rate in bits per second (None: no serialisation delay).
    pub link_rate_bps: Option<f64>,
    /// Emulated one-way latency of every link.
    pub link_latency_s: f64,
    /// Residual width: a row is `4 * hidden` bytes of payload.
    pub hidden: usize,
    pub slots: usize,
    pub groups: usize,
    /// Prompt rows per prefill window.
    pub window: usize,
    pub max_inflight: usize,
}

impl FleetModel {
    pub fn roles(&self) -> usize {
        self.costs.roles()
    }
}

/// One request of a cohort: when the client sends it (seconds from the cohort's start), its prompt
/// length and its output cap.
#[derive(Clone, Debug)]
pub struct Request {
    pub offset_s: f64,
    pub prompt_tokens: usize,
    pub max_tokens: usize,
}

/// What the client saw of one request: when it was sent and when each token reached role 0.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub started: f64,
    pub tokens: Vec<f64>,
}

/// Event time, ordered totally (`f64::total_cmp`).
#[derive(Clone, Copy, Debug)]
struct Time(f64);
impl PartialEq for Time {
    fn eq(&self, o: &Self) -> bool {
        self.0.total_cmp(&o.0).is_eq()
    }
}
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Time {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Request `i` of the cohort reaches role 0.
    Arrive(usize),
    /// Frame `f` reaches role `r`.
    AtRole(usize, usize),
    /// Frame `f`'s tokens reach role 0.
    Tokens(usize),
}

struct Row {
    slot: usize,
    sample: bool,
}

struct Frame {
    rows: Vec<Row>,
    alone: bool,
}

struct Job {
    frame: usize,
    /// Seconds of work left at full speed.
    left: f64,
    /// Cores it asks for: one, or every core of a shared machine for a frame launched alone.
    ask: f64,
    /// Seconds of work done on it so far (the scheduler runs the least served first).
    attained: f64,
}

#[derive(Default)]
struct RoleState {
    queue: VecDeque<usize>,
    job: Option<Job>,
}

struct Stream {
    request: usize,
    plen: usize,
    max_tokens: usize,
    sent: usize,
    generated: usize,
    decode_in_flight: bool,
}

/// The simulated fleet, kept across cohorts and phases (its clock runs on).
pub struct Sim {
    m: FleetModel,
    pub now: f64,
    seq: u64,
    events: BinaryHeap<Reverse<(Time, u64, Event)>>,
    roles: Vec<RoleState>,
    frames: Vec<Frame>,
    /// When each link (role r to r + 1, the last one back to role 0) finished serialising.
    link_free: Vec<f64>,
    inbox: Vec<usize>,
    inflight: usize,
    slots: Vec<Option<Stream>>,
    group_members: Vec<usize>,
    queue: VecDeque<usize>,
    rr: usize,
    /// Frames planned, and rows in them (for the run's summary).
    pub frames_sent: u64,
    pub rows_sent: u64,
}

impl Sim {
    pub fn new(m: FleetModel) -> Sim {
        let n = m.roles();
        Sim {
            roles: (0..n).map(|_| RoleState::default()).collect(),
            link_free: vec![0.0; n],
            slots: (0..m.slots).map(|_| None).collect(),
            group_members: vec![0; m.groups],
            m,
            now: 0.0,
            seq: 0,
            events: BinaryHeap::new(),
            frames: Vec::new(),
            inbox: Vec::new(),
            inflight: 0,
            queue: VecDeque::new(),
            rr: 0,
            frames_sent: 0,
            rows_sent: 0,
        }
    }

    fn push(&mut self, t: f64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((Time(t), self.seq, e)));
    }

    /// Delay of a message of `bytes` on the link out of role `r`, sent now.
    fn send_delay(&mut self, r: usize, bytes: usize) -> f64 {
        let start = self.now.max(self.link_free[r]);
        let ser = self.m.link_rate_bps.map_or(0.0, |b| bytes as f64 * 8.0 / b);
        self.link_free[r] = start + ser;
        self.link_free[r] + self.m.link_latency_s + self.m.hop_s - self.now
    }

    /// Role `r` is free and has frame `f`: it starts computing it, sharing the machine's cores.
    fn ready(&mut self, r: usize, f: usize) {
        let fr = &self.frames[f];
        let left = self.m.costs.seconds(r, fr.rows.len(), fr.alone) + self.m.hop_cpu_s;
        // a frame launched alone computes on every core, when its role's costs say what that takes
        let ask = match self.m.cores {
            Some(c) if fr.alone && self.m.costs.has_alone(r) => c as f64,
            _ => 1.0,
        };
        self.roles[r].job = Some(Job {
            frame: f,
            left,
            ask,
            attained: 0.0,
        });
    }

    /// The speed of every role's job now (0: waiting for a core): the jobs with the least work
    /// done so far run, one core each (a frame launched alone on every core), on the cores the
    /// background load leaves, the last one fitted in on what remains.
    fn speeds(&self) -> Vec<f64> {
        let n = self.roles.len();
        let Some(c) = self.m.cores else {
            return vec![1.0; n];
        };
        let mut order: Vec<usize> = (0..n).filter(|&r| self.roles[r].job.is_some()).collect();
        let job = |r: usize| self.roles[r].job.as_ref().expect("a job");
        order.sort_by(|&a, &b| job(a).attained.total_cmp(&job(b).attained).then(a.cmp(&b)));
        let mut left = (c as f64 - self.m.background).max(0.1);
        let mut v = vec![0.0; n];
        for r in order {
            let ask = job(r).ask;
            let got = ask.min(left);
            v[r] = got / ask;
            left -= got;
            if left <= 1e-12 {
                break;
            }
        }
        v
    }

    /// Run one cohort (requests sent at `offset_s` from now) until every request has its last
    /// token; returns what the client saw of each.
    pub fn cohort(&mut self, reqs: &[Request]) -> anyhow::Result<Vec<Outcome>> {
        anyhow::ensure!(
            reqs.len() <= self.m.slots,
            "a cohort of {} requests exceeds the {} slots (waiting requests are not modelled)",
            reqs.len(),
            self.m.slots
        );
        let t0 = self.now;
        let mut out: Vec<Outcome> = reqs
            .iter()
            .map(|r| Outcome {
                started: t0 + r.offset_s,
                tokens: Vec::with_capacity(r.max_tokens),
            })
            .collect();
        for (i, r) in reqs.iter().enumerate() {
            anyhow::ensure!(
                r.prompt_tokens > 0 && r.max_tokens > 0,
                "empty prompt or cap"
            );
            self.push(t0 + r.offset_s, Event::Arrive(i));
        }
        let mut done = 0;
        while done < reqs.len() {
            let speeds = self.speeds();
            let next_done = self
                .roles
                .iter()
                .zip(&speeds)
                .filter_map(|(r, &v)| {
                    r.job
                        .as_ref()
                        .filter(|_| v > 0.0)
                        .map(|j| self.now + j.left / v)
                })
                .fold(f64::INFINITY, f64::min);
            let waiting = self
                .roles
                .iter()
                .zip(&speeds)
                .any(|(r, &v)| r.job.is_some() && v < 1.0);
            // a waiting job gets a core at the next time slice
            let next_slice = if waiting {
                self.now + self.m.time_slice_s
            } else {
                f64::INFINITY
            };
            let next_event = self
                .events
                .peek()
                .map_or(f64::INFINITY, |e| (e.0).0 .0)
                .min(next_slice);
            let t = next_done.min(next_event);
            anyhow::ensure!(
                t.is_finite(),
                "the simulated fleet stalled with requests open"
            );
            let dt = t - self.now;
            for (r, v) in self.roles.iter_mut().zip(&speeds) {
                if let Some(j) = r.job.as_mut() {
                    j.left -= dt * v;
                    j.attained += dt * v;
                }
            }
            self.now = t;
            if next_event == next_slice && next_slice < next_done {
                continue;
            }
            if next_done <= next_event {
                for r in 0..self.roles.len() {
                    if self.roles[r].job.as_ref().is_some_and(|j| j.left <= 1e-12) {
                        let j = self.roles[r].job.take().expect("a job");
                        self.finish(r, j.frame);
                    }
                }
            } else {
                let Some(Reverse((_, _, e))) = self.events.pop() else {
                    anyhow::bail!("no event");
                };
                match e {
                    Event::Arrive(i) => self.queue.push_back(i),
                    Event::AtRole(r, f) => {
                        self.roles[r].queue.push_back(f);
                        if self.roles[r].job.is_none() {
                            let f = self.roles[r].queue.pop_front().expect("queued");
                            self.ready(r, f);
                        }
                    }
                    Event::Tokens(f) => self.inbox.push(f),
                }
            }
            if self.roles[0].job.is_none() {
                done += self.engine_step(reqs, &mut out);
            }
        }
        Ok(out)
    }

    /// Role `r` finished frame `f`: forward it, or return its tokens; start its next frame.
    fn finish(&mut self, r: usize, f: usize) {
        let n = self.roles.len();
        let rows = self.frames[f].rows.len();
        if r + 1 < n {
            let d = self.send_delay(r, forward_wire_bytes(rows, self.m.hidden));
            self.push(self.now + d, Event::AtRole(r + 1, f));
        } else {
            let sampled = self.frames[f].rows.iter().filter(|x| x.sample).count();
            let d = if n == 1 {
                0.0
            } else {
                self.send_delay(r, tokens_wire_bytes(sampled))
            };
            self.push(self.now + d, Event::Tokens(f));
        }
        if r > 0 {
            if let Some(next) = self.roles[r].queue.pop_front() {
                self.ready(r, next);
            }
        }
    }

    /// Role 0's scheduler while it is not computing: handle token replies, admit, plan and start
    /// at most one frame. Returns how many requests ended.
    fn engine_step(&mut self, reqs: &[Request], out: &mut [Outcome]) -> usize {
        let mut ended = 0;
        for f in std::mem::take(&mut self.inbox) {
            self.inflight -= 1;
            let rows = std::mem::take(&mut self.frames[f].rows);
            for row in rows.iter().filter(|x| x.sample) {
                let Some(s) = self.slots[row.slot].as_mut() else {
                    continue;
                };
                s.generated += 1;
                s.decode_in_flight = false;
                out[s.request].tokens.push(self.now);
                if s.generated >= s.max_tokens {
                    self.group_members[row.slot % self.m.groups] -= 1;
                    self.slots[row.slot] = None;
                    ended += 1;
                }
            }
        }
        // admission: each into the least-populated group's free slot
        while let Some(&i) = self.queue.front() {
            let best = (0..self.slots.len())
                .filter(|&k| self.slots[k].is_none())
                .min_by_key(|&k| (self.group_members[k % self.m.groups], k));
            let Some(k) = best else { break };
            self.queue.pop_front();
            self.group_members[k % self.m.groups] += 1;
            self.slots[k] = Some(Stream {
                request: i,
                plen: reqs[i].prompt_tokens,
                max_tokens: reqs[i].max_tokens,
                sent: 0,
                generated: 0,
                decode_in_flight: false,
            });
        }
        if self.inflight >= self.m.max_inflight {
            return ended;
        }
        for k in 0..self.m.groups {
            let g = (self.rr + k) % self.m.groups;
            let rows = self.plan_group(g);
            if !rows.is_empty() {
                self.rr = (g + 1) % self.m.groups;
                let alone = self.inflight == 0;
                self.inflight += 1;
                self.frames_sent += 1;
                self.rows_sent += rows.len() as u64;
                self.frames.push(Frame { rows, alone });
                let f = self.frames.len() - 1;
                self.ready(0, f);
                break;
            }
        }
        ended
    }

    /// Group g's rows now (committing them): each stream's next prefill window or its decode row.
    fn plan_group(&mut self, g: usize) -> Vec<Row> {
        let mut rows = Vec::new();
        let window = self.m.window;
        // group g's slots are g, g + groups, g + 2 groups, ...
        let groups = self.m.groups;
        for (k, slot) in self.slots.iter_mut().enumerate().skip(g).step_by(groups) {
            let Some(s) = slot.as_mut() else { continue };
            if s.sent < s.plen {
                let end = s.plen.min(s.sent + window);
                for pos in s.sent..end {
                    let last = pos + 1 == s.plen;
                    rows.push(Row {
                        slot: k,
                        sample: last,
                    });
                }
                if end == s.plen {
                    s.decode_in_flight = true;
                }
                s.sent = end;
            } else if !s.decode_in_flight && s.generated > 0 && s.generated < s.max_tokens {
                s.decode_in_flight = true;
                rows.push(Row {
                    slot: k,
                    sample: true,
                });
            }
        }
        rows
    }

    /// Let the clock run on by `s` seconds of idleness (between phases).
    pub fn idle(&mut self, s: f64) {
        self.now += s;
    }
}

#[cfg(test)]
mod tests {
    use super::super::costs::Curve;
    use super::*;

    fn flat(roles: usize, per_frame: f64, per_row: f64) -> Costs {
        let c = Curve {
            points: vec![(1.0, per_frame + per_row), (2.0, per_frame + 2.0 * per_row)],
        };
        Costs {
            shared: vec![c; roles],
            alone: vec![Curve::default(); roles],
        }
    }

    fn model(roles: usize, cores: Option<usize>) -> FleetModel {
        FleetModel {
            costs: flat(roles, 0.001, 0.0),
            cores,
            hop_s: 0.0001,
            hop_cpu_s: 0.0,
            background: 0.0,
            time_slice_s: 0.003,
            link_rate_bps: None,
            link_latency_s: 0.0,
            hidden: 256,
            slots: 176,
            groups: roles,
            window: 8,
            max_inflight: 2 * roles + 2,
        }
    }

    #[test]
    fn a_lone_stream_takes_one_chain_round_per_token() {
        // 11 roles of 1 ms each and 0.1 ms hops, a one-token prompt: each token is a full round
        // of 11 frames and 11 hops (the return included)
        let mut sim = Sim::new(model(11, None));
        let out = sim
            .cohort(&[Request {
                offset_s: 0.0,
                prompt_tokens: 1,
                max_tokens: 4,
            }])
            .unwrap();
        let round = 11.0 * 0.001 + 11.0 * 0.0001;
        let t = &out[0].tokens;
        assert_eq!(t.len(), 4);
        for (k, &tk) in t.iter().enumerate() {
            assert!((tk - (k as f64 + 1.0) * round).abs() < 1e-9, "{k}: {tk}");
        }
        // a 20-token prompt goes in three windows (8, 8, 4) launched one step after another
        let mut sim = Sim::new(model(11, None));
        let out = sim
            .cohort(&[Request {
                offset_s: 0.0,
                prompt_tokens: 20,
                max_tokens: 1,
            }])
            .unwrap();
        assert_eq!(sim.frames_sent, 3);
        assert!(out[0].tokens[0] > round + 2.0 * 0.001 - 1e-9);
    }

    #[test]
    fn roles_sharing_cores_slow_down_only_past_the_cores() {
        // 4 streams in 4 groups on 4 roles: the pipeline is full; with one core per role each token
        // round costs what one frame does per role; on 2 shared cores about twice as much
        let reqs: Vec<Request> = (0..4)
            .map(|_| Request {
                offset_s: 0.0,
                prompt_tokens: 1,
                max_tokens: 50,
            })
            .collect();
        let mut own = Sim::new(model(4, None));
        let a = own.cohort(&reqs).unwrap();
        let mut shared = Sim::new(model(4, Some(2)));
        let b = shared.cohort(&reqs).unwrap();
        let end = |o: &[Outcome]| {
            o.iter()
                .map(|x| *x.tokens.last().unwrap())
                .fold(0.0, f64::max)
        };
        let ratio = end(&b) / end(&a);
        assert!(ratio > 1.7 && ratio < 2.1, "{ratio}");
        // with 8 shared cores there is no contention at all
        let mut wide = Sim::new(model(4, Some(8)));
        let c = wide.cohort(&reqs).unwrap();
        assert!((end(&c) - end(&a)).abs() < 1e-9);
    }

    #[test]
    fn an_emulated_link_adds_serialisation_and_latency_per_hop() {
        let mut m = model(2, None);
        m.link_rate_bps = Some(1e6);
        m.link_latency_s = 0.002;
        let mut sim = Sim::new(m);
        let out = sim
            .cohort(&[Request {
                offset_s: 0.0,
                prompt_tokens: 1,
                max_tokens: 1,
            }])
            .unwrap();
        // length prefix 4, header 8, then Forward's 20 and a 16-byte row of 256 f32, or Tokens'
        // 16 and one 24-byte item (engine/src/pipeline/wire/mod.rs)
        let fwd = (4 + 8 + 20 + 16 + 4 * 256) as f64 * 8.0 / 1e6 + 0.002 + 0.0001;
        let back = (4 + 8 + 16 + 24) as f64 * 8.0 / 1e6 + 0.002 + 0.0001;
        let want = 2.0 * 0.001 + fwd + back;
        assert!(
            (out[0].tokens[0] - want).abs() < 1e-9,
            "{:?} {want}",
            out[0].tokens
        );
    }
}
