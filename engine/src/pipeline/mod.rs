//! The resident pipeline: roles as processes linked by TCP, role 0's scheduler, the wire format.
//!
//! - `fleet`: starting a fleet (`RunConfig`, the fleet file, child roles).
//! - `ingress`: role 0's scheduler (admission, frame plans, token return, speculation), with
//!   `stream` (one request's state and verification), `readiness`, `profiles` and `capture_wait`.
//! - `worker`: the roles after role 0. `role`: a role's layers and slots. `link`, `wire`: framed
//!   TCP and the messages. `events`, `stats`: what role 0 tells clients and counters.

pub mod capture_wait;
pub mod events;
pub mod fleet;
pub mod ingress;
pub mod link;
pub mod profiles;
pub mod readiness;
pub mod role;
pub mod stats;
pub mod stream;
pub mod wire;
pub mod worker;
