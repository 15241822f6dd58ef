//! Launching a plan: `commit` applies it to the streams it touches, `launch` computes role 0's
//! layers and sends the frame on (or samples it, with one role) and records it.

use std::time::Instant;

use super::{Downstream, FramePlan, Scheduler};
use crate::model::ForwardTimings;
use crate::pipeline::role::{epoch_s, thread_cpu_ns, FrameRecord};
use crate::pipeline::stats::SpecCounter;
use crate::pipeline::stream::InFlight;
use crate::pipeline::wire::{Message, FLAG_ALONE, FLAG_CAPTURE, FLAG_SAMPLE};

impl Scheduler {
    /// Apply a plan to the streams it touches (frame `seq`).
    fn commit(&mut self, plan: &FramePlan, seq: u64) {
        for r in &plan.rows {
            let Some(st) = self.slots[r.slot as usize].stream.as_mut() else {
                continue;
            };
            let pos = r.pos as usize;
            st.rows_inflight += 1;
            if pos < st.prefill_to() {
                st.sent = st.sent.max(pos + 1);
            }
            if r.flags & FLAG_CAPTURE != 0 {
                st.capture_rows += 1;
            }
            if r.flags & FLAG_SAMPLE != 0 {
                st.chain.push_back(InFlight {
                    seq,
                    pos,
                    input: r.token,
                    proposer: plan.proposal,
                });
            }
            if let Some(kind) = plan.proposal {
                st.spec.proposed += 1;
                self.stats.spec_add(kind, SpecCounter::Proposed);
            }
        }
    }

    pub(super) fn launch(&mut self, plan: FramePlan) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let alone = self.inflight.is_empty();
        self.inflight.insert(seq, plan.group);
        self.commit(&plan, seq);
        let FramePlan {
            group, mut rows, ..
        } = plan;
        if alone {
            rows.iter_mut().for_each(|r| r.flags |= FLAG_ALONE);
        }
        let width = crate::pipeline::frame_width(&rows);
        self.width = width;
        let t0 = Instant::now();
        // the clocks of the frame record, read only when frames are recorded
        let logged = self.log.is_on();
        let start_s = if logged { epoch_s() } else { 0.0 };
        let cpu0 = if logged { thread_cpu_ns() } else { 0 };
        let mut t = ForwardTimings::default();
        let engine = &mut self.engine;
        let result = crate::kernels::with_width(width, || {
            engine
                .embed(&rows)
                .and_then(|mut x| engine.run(&rows, &mut x, &mut t).map(|_| x))
        });
        let p = &mut self.engine.profile;
        p.frames += 1;
        p.rows += rows.len() as u64;
        p.attention_ns += t.attention_ns;
        p.mlp_ns += t.mlp_ns;
        let residual = match result {
            Ok(x) => x,
            Err(e) => {
                self.fail(format!("role 0 failed: {e}"));
                return;
            }
        };
        let n_rows = rows.len();
        let bytes_before = self.engine.profile.bytes_out;
        // when the frame went to role 1: the hop starts here (`epoch_s` is read after the write)
        let mut sent_s = None;
        match &self.down {
            Downstream::Link(_) => {
                let hidden = self.engine.hidden() as u32;
                self.engine.profile.compute_ns += t0.elapsed().as_nanos() as u64;
                sent_s = logged.then(epoch_s);
                self.send(Message::Forward {
                    seq,
                    group: group as u32,
                    rows,
                    hidden,
                    residual,
                });
            }
            // the chain broke while this frame was planned: its streams are held for replay
            Downstream::Down => {}
            Downstream::Local => {
                let engine = &mut self.engine;
                let items = crate::kernels::with_width(width, || engine.sample(&rows, &residual));
                self.engine.profile.compute_ns += t0.elapsed().as_nanos() as u64;
                match items {
                    Ok(items) => self.tokens(seq, &items),
                    Err(e) => self.fail(format!("role 0 failed: {e}")),
                }
            }
        }
        if self.log.is_on() {
            let bytes_out = self.engine.profile.bytes_out - bytes_before;
            self.log.append(&FrameRecord {
                role: 0,
                seq,
                group: group as u32,
                rows: n_rows,
                epoch_s: Some(epoch_s()),
                start_s: Some(start_s),
                sent_s,
                cpu_ns: Some(thread_cpu_ns().saturating_sub(cpu0)),
                alone,
                t_ns: Some(t0.duration_since(self.t_start).as_nanos() as u64),
                idle_ns: 0,
                compute_ns: t0.elapsed().as_nanos() as u64,
                attention_ns: t.attention_ns,
                mlp_ns: t.mlp_ns,
                head_ns: 0,
                bytes_in: 0,
                bytes_out,
            });
        }
    }
}
