//! Keeping a pool's other threads awake through a decode step.
//!
//! A decode step of one row hands the pool a few hundred small tasks (each half of a product of
//! tens of thousands of weights, a layer's experts), a few microseconds apart, with stretches on
//! the calling thread alone between them (norms, routing, the combination). Rayon puts an idle
//! thread to sleep soon after it runs out of work, and waking it for the next task costs more
//! than the task: `moefleet bench`'s two-thread decode of `inkling-mini` spent about a fifth of
//! its samples in the scheduler (`sched_yield`, task switches). `awake` has the other threads spin
//! instead, taking the step's tasks as they appear, until the step returns.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether some `awake` in this process has threads spinning now: only one at a time does, so two
/// steps running side by side on one pool can never each hold a thread the other waits for.
static SPINNING: AtomicBool = AtomicBool::new(false);

/// Run `f` with the current pool's other threads kept awake until it returns (module docs): each
/// spins, running whatever tasks appear (`rayon::yield_now`), instead of sleeping between them.
/// This costs those threads' cores for as long as `f` runs, so it suits a computation that has
/// the cores to itself (a single-process decode, a fleet role whose frame is alone in the
/// pipeline), not processes that share them (`kernels::with_width(1)` makes this a plain call).
/// Outside a pool, with one thread, or while another `awake` in this process spins, just runs
/// `f`. The arithmetic is unchanged: the same tasks run, on whichever thread takes them.
pub fn awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    if super::threads() < 2 || SPINNING.swap(true, Ordering::AcqRel) {
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
    // `join` runs `f` here and offers the spinner to the pool first, so a thread that steals
    // takes the spinner before any of `f`'s tasks (a thief takes the oldest task): no task of
    // `f` ever runs beneath the spinner it would wait for. Should this thread take the spinner
    // back itself (waiting inside `f` with nothing else queued), it returns at once.
    let spin = || {
        if rayon::current_thread_index() == Some(me) {
            return;
        }
        while !done.load(Ordering::Acquire) {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::hint::spin_loop();
            }
        }
    };
    rayon::join(
        || {
            let _stop = Stop(&done);
            f()
        },
        spin,
    )
    .0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::mpsc;
    use std::time::Duration;

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
            let r = pool.install(f);
            // the pool must also shut down: every spinner has returned
            drop(pool);
            let _ = tx.send(r);
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    fn work(seed: u64) -> Vec<u64> {
        (0..64u64)
            .into_par_iter()
            .map(|i| (0..20_000u64).fold(seed ^ i, |a, b| a.wrapping_mul(31).wrapping_add(b)))
            .collect()
    }

    #[test]
    fn gives_what_the_plain_call_gives_and_lets_the_pool_go() {
        let plain = within_a_minute(2, || work(3)).expect("plain call finished");
        let kept = within_a_minute(2, || {
            // many steps in a row, as a decode takes them, then the pool is free for other work
            let steps: Vec<Vec<u64>> = (0..50).map(|_| awake(|| work(3))).collect();
            let after: usize = rayon::broadcast(|ctx| ctx.index()).into_iter().sum();
            (steps, after)
        })
        .expect("awake steps finished and the pool shut down");
        assert!(kept.0.iter().all(|s| *s == plain));
        // both threads answered the broadcast after the steps: none was left spinning
        assert_eq!(kept.1, 1);
    }

    #[test]
    fn steps_side_by_side_on_one_pool_do_not_wait_for_each_other() {
        let r = within_a_minute(2, || {
            (0..20)
                .map(|i| rayon::join(|| awake(|| work(i)), || awake(|| work(i + 100))))
                .collect::<Vec<_>>()
        })
        .expect("concurrent awake steps finished");
        assert_eq!(r[7].0, work(7));
        assert_eq!(r[7].1, work(107));
    }

    #[test]
    fn a_panic_inside_frees_the_spinners() {
        let r = within_a_minute(2, || {
            let caught = std::panic::catch_unwind(|| awake(|| -> u64 { panic!("step failed") }));
            (caught.is_err(), awake(|| work(1)))
        })
        .expect("the pool recovered from the panic");
        assert!(r.0);
        assert_eq!(r.1, within_a_minute(1, || work(1)).unwrap());
    }

    #[test]
    fn outside_a_pool_or_on_one_thread_it_is_a_plain_call() {
        assert_eq!(awake(|| 5), 5);
        assert_eq!(within_a_minute(1, || awake(|| work(2))), Some(work(2)));
    }
}
