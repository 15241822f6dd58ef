//! Moving a thread off one CPU for a while (`kernels::awake`'s spinner, off its caller's CPU).
//!
//! Linux wakes a thread on the CPU of the thread that woke it when it can, so a pool thread woken
//! for a short computation often lands on its caller's CPU while another CPU idles; the two then
//! take turns on one core, and the tasks the woken thread takes wait behind the caller. Seen in
//! `perf sched timehist` of the 11-role `inkling-mini` fleet on two cores at one stream (host C):
//! a role's two compute threads on CPU 0 for 2.3 ms while CPU 1 was idle, for a frame whose six
//! layers take about 0.4 ms on two threads in one process.

/// The CPU this thread runs on now, if the OS says.
pub fn current() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and reads only the calling thread's state
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// While it lives, the thread that made it runs on any of the CPUs it was allowed before but one;
/// dropping it gives the thread back the CPUs it had (which moves it nowhere). Made on another
/// thread than it is dropped on, it would change the dropping thread's CPUs: it is `!Send`.
pub struct Away {
    had: Option<libc::cpu_set_t>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Away {
    /// Off `cpu`, if this thread runs on it now and may run elsewhere; else nothing changes. Linux
    /// moves a running thread off a CPU its new set excludes before the call returns.
    pub fn from(cpu: Option<usize>) -> Away {
        let stay = Away {
            had: None,
            _not_send: std::marker::PhantomData,
        };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let Some(cpu) = cpu.filter(|&c| c < 8 * size && current() == Some(c)) else {
            return stay;
        };
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls read and write only the sets
        // passed with their size, for the calling thread (pid 0); `cpu` is inside the set (above)
        unsafe {
            let mut had: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut had) != 0 {
                return stay;
            }
            let mut others = had;
            libc::CPU_CLR(cpu, &mut others);
            if libc::CPU_COUNT(&others) == 0 || libc::sched_setaffinity(0, size, &others) != 0 {
                return stay;
            }
            Away {
                had: Some(had),
                ..stay
            }
        }
    }

    /// Whether this thread was moved (and its CPUs will be given back).
    #[cfg(test)]
    pub fn moved(&self) -> bool {
        self.had.is_some()
    }
}

impl Drop for Away {
    fn drop(&mut self) {
        if let Some(had) = &self.had {
            // SAFETY: as in `from`; `had` is the set this same thread had (`Away` is not Send)
            unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), had);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The CPUs the calling thread may run on.
    fn allowed() -> Vec<usize> {
        // SAFETY: as in `Away::from`
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            (0..8 * std::mem::size_of::<libc::cpu_set_t>())
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    /// Let the calling thread run on `cpus` only.
    fn allow(cpus: &[usize]) {
        // SAFETY: as in `Away::from`
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
    }

    /// On a thread of its own (its CPUs change): off the CPU it runs on while the guard lives, its
    /// CPUs given back after; a CPU it is not on, or the only one it may use, changes nothing.
    #[test]
    fn a_thread_leaves_its_cpu_and_gets_its_cpus_back() {
        std::thread::spawn(|| {
            let all = allowed();
            if all.len() < 2 {
                eprintln!("skipped: this thread may run on one CPU only ({all:?})");
                return;
            }
            // the thread may move between reading its CPU and the call: a bounded retry
            let (here, away) = (0..1000)
                .find_map(|_| {
                    let here = current()?;
                    let away = Away::from(Some(here));
                    away.moved().then_some((here, away))
                })
                .expect("never moved off its CPU in 1000 tries");
            assert_ne!(current(), Some(here));
            let left: Vec<usize> = all.iter().copied().filter(|&c| c != here).collect();
            assert_eq!(allowed(), left);
            drop(away);
            assert_eq!(allowed(), all);
            // held to one CPU: another CPU is not the one it is on, and its own cannot be left
            let (one, other) = (all[0], all[1]);
            allow(&[one]);
            assert!(!Away::from(Some(other)).moved());
            assert!(!Away::from(Some(one)).moved());
            assert_eq!(allowed(), [one]);
            assert!(!Away::from(None).moved());
            assert!(!Away::from(Some(usize::MAX)).moved());
            allow(&all);
        })
        .join()
        .unwrap();
    }
}
