//! Who holds which rank. Role 0 keeps the roster (every rank's address, rank 0's being its return
//! port) and answers `RosterQuery` on its return port (`return_port`). A spare host that takes a
//! rank (`spare`) changes it; a role whose downstream neighbour cannot be reached asks for the
//! neighbour's address again, and a role that finds its rank held by another address has been
//! replaced while it was away: it leaves rather than link into the chain twice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::link::{self, LinkError};
use super::wire::{Message, WireLimits};

/// Every rank's address, rank 0 first, shared between role 0's supervisor, its return port and
/// `/api/stats`; with the count of ranks moved to another address.
#[derive(Clone, Debug, Default)]
pub struct Roster(Arc<Mutex<(Vec<String>, u64)>>);

impl Roster {
    pub fn new(addrs: Vec<String>) -> Roster {
        Roster(Arc::new(Mutex::new((addrs, 0))))
    }

    pub fn addrs(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// Ranks moved to another address (a spare) since the fleet started.
    pub fn moved(&self) -> u64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    /// The address of `rank` (empty if the roster does not have it).
    pub fn get(&self, rank: usize) -> String {
        let a = self.0.lock().unwrap_or_else(|e| e.into_inner());
        a.0.get(rank).cloned().unwrap_or_default()
    }

    /// `rank` is held at `addr` from now on.
    pub fn set(&self, rank: usize, addr: String) {
        let mut a = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let moved = match a.0.get_mut(rank) {
            Some(slot) if *slot != addr => {
                *slot = addr;
                true
            }
            _ => false,
        };
        a.1 += u64::from(moved);
    }

    /// The roster as a `Roster` message carries it: one address per line.
    pub fn text(&self) -> String {
        self.addrs().join("\n")
    }
}

/// The addresses of a `Roster` message's text.
pub fn parse(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

/// How long a query to role 0 may take, connection included.
pub const ASK_WITHIN: Duration = Duration::from_secs(2);

/// Ask role 0 (its return port `role0`) for the roster, within `ASK_WITHIN`. An error means role 0
/// could not be asked (it is away, or the network is): the caller keeps the addresses it has.
pub async fn ask(role0: &str, rank: usize, lim: WireLimits) -> Result<Vec<String>, LinkError> {
    let asked = async {
        let (mut r, mut w) = link::connect(role0, lim, Duration::ZERO).await?;
        w.send(&Message::RosterQuery { rank: rank as u32 }).await?;
        loop {
            match r.recv().await? {
                (Message::Roster { addrs }, _) => return Ok(parse(&addrs)),
                // role 0's port greets every connection with a heartbeat
                (Message::Heartbeat, _) => continue,
                (m, _) => {
                    return Err(LinkError::Io {
                        peer: role0.to_string(),
                        source: std::io::Error::other(format!(
                            "answered a roster query with {m:?}"
                        )),
                    })
                }
            }
        }
    };
    match tokio::time::timeout(ASK_WITHIN, asked).await {
        Ok(r) => r,
        Err(_) => Err(LinkError::Io {
            peer: role0.to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no roster within {ASK_WITHIN:?}"),
            ),
        }),
    }
}

/// What a role makes of the roster: go on (with its downstream neighbour's address now), or leave
/// because its rank is held elsewhere.
#[derive(Debug, PartialEq, Eq)]
pub enum Standing {
    Member { next: String },
    Replaced { by: String },
}

/// Role `rank` listening on `listen`, in a fleet of `addrs.len()` ranks.
pub fn standing(addrs: &[String], rank: usize, listen: &str) -> Option<Standing> {
    let mine = addrs.get(rank)?;
    if mine != listen {
        return Some(Standing::Replaced { by: mine.clone() });
    }
    let next = addrs.get((rank + 1) % addrs.len())?;
    Some(Standing::Member { next: next.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_reads_its_neighbour_or_its_replacement() {
        let addrs = parse("h0:1\nh1:1\nspare:9\nh3:1");
        assert_eq!(addrs.len(), 4);
        assert_eq!(
            standing(&addrs, 1, "h1:1"),
            Some(Standing::Member {
                next: "spare:9".into()
            })
        );
        // the last role's neighbour is role 0's return port
        assert_eq!(
            standing(&addrs, 3, "h3:1"),
            Some(Standing::Member {
                next: "h0:1".into()
            })
        );
        assert_eq!(
            standing(&addrs, 2, "h2:1"),
            Some(Standing::Replaced {
                by: "spare:9".into()
            })
        );
        assert_eq!(standing(&addrs, 7, "h7:1"), None);
        let r = Roster::new(addrs.clone());
        assert_eq!(parse(&r.text()), addrs);
        r.set(1, "h1:1".into());
        assert_eq!(r.moved(), 0);
        r.set(1, "spare:8".into());
        assert_eq!((r.get(1), r.moved()), ("spare:8".to_string(), 1));
    }
}
