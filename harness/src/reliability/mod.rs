//! Reliability runs: faults made under load and watched until the fleet serves again
//! (`faults`), a bounded soak at full load with overload bursts (`soak`), the load both drive
//! (`load`), the server's processes as /proc shows them (`procs`), and the reliability table
//! rendered from their records (`table`).

pub mod faults;
pub mod load;
pub mod procs;
pub mod recheck;
pub mod soak;
pub mod table;
pub mod unit;
