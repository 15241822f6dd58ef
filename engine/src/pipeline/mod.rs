//! The resident pipeline: roles as processes linked by TCP, role 0's scheduler, the wire format.
//!
//! - `fleet`: starting a fleet (the fleet file, role 0); `run_config`: what the operator chooses
//!   (`RunConfig`); `weights_source`: where a role's weights come from; `children`: the role
//!   processes on one machine; `recovery`: role 0's supervisor, which links a broken chain again;
//!   `draft_head`: the options of the draft head the last role runs.
//! - `ingress`: role 0's scheduler (admission, frame plans, token return, speculation), with
//!   `stream` (one request's state and verification), `readiness`, `profiles` and `capture_wait`.
//! - `worker`: the roles after role 0. `role`: a role's layers and slots. `link`, `wire`: framed
//!   TCP and the messages; `emulation`: links held to a rate and latency. `events`, `stats`: what
//!   role 0 tells clients and counters.

pub mod capture_wait;
pub mod children;
pub mod draft_head;
pub mod emulation;
pub mod events;
pub mod fleet;
pub mod ingress;
pub mod link;
pub mod liveness;
pub mod profiles;
pub mod readiness;
pub mod recovery;
pub mod return_link;
pub mod return_port;
pub mod role;
pub mod roster;
pub mod run_config;
pub mod spare;
pub mod stats;
pub mod stream;
pub mod weights_source;
pub mod wire;
pub mod worker;

/// Set once at start by a role that shares this machine's cores with more roles than cores.
static SHARING_CORES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process is one of more roles than this machine has cores: a frame computes on one thread
/// unless it is alone in the pipeline (`wire::FLAG_ALONE`), when the other roles are idle and it
/// takes the whole pool. With one stream the fleet is a chain in which one role works at a time;
/// with many, every role works and more threads than cores only contend. (With two or more cores
/// a role, `fleet::local_role_threads`, pools are sized to the share instead and this is not used:
/// a width above one would not keep parallel loops off the rest of the pool.)
pub fn share_cores() {
    SHARING_CORES.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process shares the machine's cores with more roles than cores (`share_cores`).
pub fn sharing_cores() -> bool {
    SHARING_CORES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The kernels' width for the frame about to be computed (`kernels::with_width`): one thread when
/// this role shares the cores and the frame is not alone in the pipeline, else the pool.
pub(crate) fn frame_width(rows: &[wire::RowHeader]) -> usize {
    let alone = rows
        .first()
        .is_some_and(|r| r.flags & wire::FLAG_ALONE != 0);
    let sharing = SHARING_CORES.load(std::sync::atomic::Ordering::Relaxed);
    if sharing && !alone {
        1
    } else {
        usize::MAX
    }
}

/// Run a role's compute loop `f` on a worker thread of a pool of its own, as many threads as the
/// global pool (sized by `RAYON_NUM_THREADS` or `fleet::local_role_threads`, else this machine's
/// cores; `share_cores` keeps a frame that shares the pipeline on one thread). The kernels' parallel
/// calls then start from inside a pool: with one thread they run inline, with more the caller works
/// on its share. Called from outside any pool, each such call instead woke a pool thread and put
/// the caller to sleep until it finished, two context switches a call and hundreds a token (a
/// one-role server decoded at 110 tokens/s where `moefleet bench` reaches 180; the profile was
/// scheduler switches).
pub fn on_compute_pool<R: Send>(
    name: &str,
    f: impl FnOnce() -> R + Send,
) -> Result<R, rayon::ThreadPoolBuildError> {
    let name = name.to_string();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(rayon::current_num_threads())
        .thread_name(move |i| format!("{name}-{i}"))
        .build()?;
    Ok(pool.install(f))
}
