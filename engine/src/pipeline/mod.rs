//! The resident pipeline: roles as processes linked by TCP, role 0's scheduler, the wire format.

pub mod events;
pub mod fleet;
pub mod ingress;
pub mod link;
pub mod role;
pub mod stats;
pub mod wire;
pub mod worker;
