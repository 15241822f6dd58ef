//! Keeping another of a pool's threads awake through a decode step.
//!
//! A decode step of one row hands the pool a few hundred small tasks (each half of a product of
//! tens of thousands of weights, a layer's experts), a few microseconds apart, with stretches on
//! the calling thread alone between them (norms, routing, the combination). Rayon puts an idle
//! thread to sleep soon after it runs out of work, and waking it for the next task costs more
//! than the task: `moefleet bench`'s two-thread decode of `inkling-mini` spent about a fifth of
//! its samples in the scheduler (`sched_yield`, task switches). `awake` has one other thread spin
//! instead, taking the step's tasks as they appear, until the step returns. (On a pool of more
//! than two threads the rest still sleep and wake as before.) A spinner that starts on its caller's
//! CPU moves off it for the step (`away`): woken there, the two took turns on one core while the
//! other idled, as they often did in a fleet role's frame (`kernels::away` has the trace).

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether some `awake` in this process has a thread spinning now: only one at a time does, so two
/// steps running side by side on one pool can never each hold a thread the other waits for.
static SPINNING: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
thread_local! {
    /// Tasks this thread ran while spinning (tests check that spinning happens at all).
    static SPUN_TASKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Run `f` with another thread of the current pool kept awake until it returns (module docs): it
/// spins, running whatever tasks appear (`rayon::yield_now`), instead of sleeping between them.
/// This costs that thread's core for as long as `f` runs, so it suits a computation that has the
/// cores to itself (a single-process decode, a fleet role whose frame is alone in the pipeline),
/// not processes that share them (`kernels::with_width(1)` makes this a plain call). Just runs `f`
/// outside a pool, with one thread, while this thread has tasks of its own queued (a caller
/// inside a parallel loop), or while another `awake` in this process spins. The arithmetic is
/// unchanged: the same tasks run, on whichever thread takes them.
///
/// Why it cannot deadlock: the spinner is queued on this thread, whose queue is empty (the
/// pending-tasks test above), before any task of `f`, and a thread that steals takes the oldest
/// task first, so it takes the spinner before any of `f`'s tasks and none of them ever runs
/// beneath a spinner that waits for `f`; if this thread takes the
/// spinner back itself (waiting inside `f` with nothing else queued), it returns at once. This
/// holds as long as `f` hands out work through this thread's queue (`join`, parallel iterators,
/// `scope`), not through `rayon::broadcast`, whose jobs another thread would take first.
pub fn awake<R>(f: impl FnOnce() -> R) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    if super::threads() < 2
        || rayon_core::current_thread_has_pending_tasks() != Some(false)
        || SPINNING.swap(true, Ordering::AcqRel)
    {
        return f();
    }
    /// Stops the spinner and frees `SPINNING` when `f` returns or unwinds.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
            SPINNING.store(false, Ordering::Release);
        }
    }
    let done = AtomicBool::new(false);
    let (done, home) = (&done, super::away::current());
    // `in_place_scope` runs `f` here (no `Send` needed) and returns once the spinner has returned
    rayon::in_place_scope(|scope| {
        scope.spawn(move |_| {
            if rayon::current_thread_index() == Some(me) {
                return;
            }
            // woken on this thread's CPU, the two would take turns on one core (`away`)
            let _away = super::away::Away::from(home);
            while !done.load(Ordering::Acquire) {
                if rayon::yield_now() == Some(rayon::Yield::Executed) {
                    #[cfg(test)]
                    SPUN_TASKS.with(|n| n.set(n.get() + 1));
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let _stop = Stop(done);
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::{mpsc, Mutex};
    use std::time::Duration;

    /// The tests here one at a time (they count what spinners did; `SPINNING` is process-wide).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// Run `f` on a fresh pool of `threads` on another thread; None if it has not finished within
    /// a minute (a spinner that never stopped, or two that wait for each other).
    fn within_a_minute<R: Send + 'static>(
        threads: usize,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let _ = tx.send(pool.install(f));
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    fn work(seed: u64) -> Vec<u64> {
        work_of(seed, 20_000)
    }

    /// 64 parallel tasks of `n` dependent multiply-adds each.
    fn work_of(seed: u64, n: u64) -> Vec<u64> {
        (0..64u64)
            .into_par_iter()
            .map(|i| (0..n).fold(seed ^ i, |a, b| a.wrapping_mul(31).wrapping_add(b)))
            .collect()
    }

    /// Tasks the current pool's threads have run while spinning so far.
    fn spun() -> usize {
        rayon::broadcast(|_| SPUN_TASKS.with(|n| n.get()))
            .into_iter()
            .sum()
    }

    /// Steps of a few milliseconds each (a decode step's length: a much shorter one can end
    /// before a sleeping thread has woken to take the spinner) under `awake`, until a spinner has
    /// run one of their tasks (at most 200: a forward pass of another test in this process may
    /// hold `SPINNING` meanwhile); whether one did, and the steps' results.
    fn steps_until_spun(seed: u64) -> (bool, Vec<Vec<u64>>) {
        let before = spun();
        let mut out = Vec::new();
        for _ in 0..200 {
            out.push(awake(|| work_of(seed, 200_000)));
            if spun() > before {
                return (true, out);
            }
        }
        (false, out)
    }

    #[test]
    fn another_thread_spins_and_takes_tasks_and_the_results_are_the_plain_calls() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let plain = within_a_minute(2, || work_of(3, 200_000)).expect("plain call finished");
        let (spun, steps) = within_a_minute(2, || steps_until_spun(3)).expect("steps finished");
        assert!(
            spun,
            "no task ran on a spinning thread in {} steps",
            steps.len()
        );
        assert!(steps.iter().all(|s| *s == plain));
    }

    #[test]
    fn a_panic_inside_frees_the_spinner_and_spinning() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let r = within_a_minute(2, || {
            let caught = std::panic::catch_unwind(|| awake(|| -> u64 { panic!("step failed") }));
            // a `SPINNING` left set would make every later step a plain call
            (caught.is_err(), steps_until_spun(1).0)
        })
        .expect("the pool recovered from the panic");
        assert!(r.0, "the panic must reach the caller");
        assert!(r.1, "no step spun after the panic");
    }

    #[test]
    fn steps_side_by_side_nested_or_inside_parallel_loops_finish() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [2, 3, 4] {
            let r = within_a_minute(threads, move || {
                let pairs: Vec<_> = (0..20)
                    .map(|i| rayon::join(|| awake(|| work(i)), || awake(|| work(i + 100))))
                    .collect();
                let looped: Vec<Vec<u64>> = (0..16u64)
                    .into_par_iter()
                    .map(|i| awake(|| awake(|| work(i))))
                    .collect();
                (pairs, looped)
            })
            .unwrap_or_else(|| panic!("steps on {threads} threads did not finish"));
            assert_eq!(r.0[7], (work(7), work(107)));
            assert_eq!(r.1[5], work(5));
        }
    }

    #[test]
    fn a_step_that_computes_in_another_pool_finishes() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let r = within_a_minute(2, || {
            let other = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            (0..10)
                .map(|i| awake(|| other.install(|| awake(|| work(i)))))
                .collect::<Vec<_>>()
        })
        .expect("steps through another pool finished");
        assert_eq!(r[3], work(3));
    }

    #[test]
    fn outside_a_pool_or_on_one_thread_it_is_a_plain_call() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(awake(|| 5), 5);
        let r = within_a_minute(1, || (awake(|| work(2)), spun())).unwrap();
        assert_eq!(r, (work(2), 0));
    }
}
