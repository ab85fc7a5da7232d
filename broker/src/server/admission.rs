//! What clients together may hold of a client port: connections (in all, and from one source
//! address), and the broker-wide budget of request bytes in flight. Counting and refusing
//! only; the protocol is the server's.
//!
//! The bounds, and why each is there:
//!
//! - **Connections** are counted once their QUIC handshake completes and refused past either
//!   limit: the connection is closed with the application code `TooManyConnections` and a
//!   reason naming the limit, which the client reports as a retryable refusal.
//! - **Request bytes** are reserved twice before a payload is read: from the connection's
//!   own budget (`max_in_flight_bytes`, announced in `HelloAck`), then from the budget every
//!   connection shares. The second bounds what N connections hold together, which N times
//!   the first does not. A request waits at most [`ClientLimits::request_wait`] for room,
//!   then is answered `Throttled`; one whose payload, once reserved, does not arrive within
//!   [`ClientLimits::payload_timeout`] is answered `Throttled` too and its bytes go back.
//!   Nothing is reserved until the payload's first bytes arrive, so a stream that claims a
//!   large payload and sends none of it holds nothing but its stream.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::metrics::{Metrics, ReasonLabels};

/// The limits of one client port. Defaults in [`ClientLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Client connections open at once, from every address together.
    pub connections: u32,
    /// Client connections open at once from one IP address.
    pub connections_per_address: u32,
    /// Bytes of requests in flight (reserved, being read or being handled), every connection
    /// together. At least one frame (`max_frame_bytes`).
    pub request_bytes: u64,
    /// The longest a request waits for room in `request_bytes` before it is refused.
    pub request_wait: Duration,
    /// The longest a request's payload may take to arrive once its bytes are reserved.
    pub payload_timeout: Duration,
    /// The longest a new connection may take to have its `Hello` accepted before it is
    /// closed.
    pub hello_timeout: Duration,
}

impl Default for ClientLimits {
    fn default() -> ClientLimits {
        ClientLimits {
            connections: 4096,
            connections_per_address: 1024,
            request_bytes: 256 << 20,
            request_wait: Duration::from_secs(5),
            payload_timeout: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(10),
        }
    }
}

/// A connection refused at accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConnectionRefused {
    #[error(
        "too many connections: the broker holds its limit of {limit} client connections \
         (--max-connections); retry later or connect to another broker"
    )]
    Broker { limit: u32 },
    #[error(
        "too many connections from {address}: the broker holds its limit of {limit} \
         client connections per address (--max-connections-per-address); retry later"
    )]
    Address { address: IpAddr, limit: u32 },
}

impl ConnectionRefused {
    /// The `reason` label of `floe_connections_refused_total`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            ConnectionRefused::Broker { .. } => "broker",
            ConnectionRefused::Address { .. } => "address",
        }
    }
}

/// The connections open now: in all, and per address (an address leaves the map when its
/// last connection closes, so the map holds at most `connections` entries).
#[derive(Debug, Default)]
struct Open {
    total: u32,
    by_address: HashMap<IpAddr, u32>,
}

/// The client port's counters and the shared request budget.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: ClientLimits,
    open: Mutex<Open>,
    request_bytes: Semaphore,
    metrics: Arc<Metrics>,
}

impl Admission {
    pub(crate) fn new(limits: ClientLimits, metrics: Arc<Metrics>) -> Arc<Admission> {
        let permits = usize::try_from(limits.request_bytes)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Arc::new(Admission {
            limits,
            open: Mutex::new(Open::default()),
            request_bytes: Semaphore::new(permits),
            metrics,
        })
    }

    pub(crate) fn limits(&self) -> &ClientLimits {
        &self.limits
    }

    /// Counts a new connection from `address`, or refuses it (and counts the refusal).
    pub(crate) fn admit(
        self: &Arc<Self>,
        address: IpAddr,
    ) -> Result<ConnectionSlot, ConnectionRefused> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let from_address = open.by_address.get(&address).copied().unwrap_or(0);
        let refused = if open.total >= self.limits.connections {
            Some(ConnectionRefused::Broker {
                limit: self.limits.connections,
            })
        } else if from_address >= self.limits.connections_per_address {
            Some(ConnectionRefused::Address {
                address,
                limit: self.limits.connections_per_address,
            })
        } else {
            None
        };
        if let Some(refused) = refused {
            self.metrics
                .connections_refused
                .get_or_create(&ReasonLabels {
                    reason: refused.reason(),
                })
                .inc();
            return Err(refused);
        }
        open.total += 1;
        open.by_address.insert(address, from_address + 1);
        self.metrics.connections.inc();
        Ok(ConnectionSlot {
            admission: self.clone(),
            address,
        })
    }

    fn release(&self, address: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.by_address.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                open.by_address.remove(&address);
            }
        }
        self.metrics.connections.dec();
    }

    /// Reserves `bytes` of the shared request budget, waiting at most
    /// [`ClientLimits::request_wait`]; `None` when no room was made in time.
    pub(crate) async fn reserve(&self, bytes: u32) -> Option<RequestBytes<'_>> {
        let acquire = self.request_bytes.acquire_many(bytes);
        let permit = tokio::time::timeout(self.limits.request_wait, acquire)
            .await
            .ok()?
            .ok()?;
        self.metrics
            .request_bytes_in_flight
            .inc_by(i64::from(bytes));
        Some(RequestBytes {
            _permit: permit,
            bytes,
            metrics: &self.metrics,
        })
    }
}

/// One open connection's place in the counts; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    admission: Arc<Admission>,
    address: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.admission.release(self.address);
    }
}

/// Bytes of the shared request budget held by one request; given back on drop.
#[derive(Debug)]
pub(crate) struct RequestBytes<'a> {
    _permit: SemaphorePermit<'a>,
    bytes: u32,
    metrics: &'a Metrics,
}

impl Drop for RequestBytes<'_> {
    fn drop(&mut self) {
        self.metrics
            .request_bytes_in_flight
            .dec_by(i64::from(self.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(connections: u32, per_address: u32) -> Arc<Admission> {
        let limits = ClientLimits {
            connections,
            connections_per_address: per_address,
            request_bytes: 1 << 20,
            request_wait: Duration::from_millis(50),
            ..ClientLimits::default()
        };
        Admission::new(limits, Metrics::new())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn connections_past_either_limit_are_refused_and_closing_one_frees_its_place() {
        let admission = admission(3, 2);
        let a1 = admission.admit(ip("10.0.0.1")).expect("first from a");
        let _a2 = admission.admit(ip("10.0.0.1")).expect("second from a");
        assert_eq!(
            admission.admit(ip("10.0.0.1")).expect_err("third from a"),
            ConnectionRefused::Address {
                address: ip("10.0.0.1"),
                limit: 2
            }
        );
        let _b1 = admission.admit(ip("10.0.0.2")).expect("first from b");
        assert_eq!(
            admission.admit(ip("10.0.0.3")).expect_err("fourth in all"),
            ConnectionRefused::Broker { limit: 3 }
        );
        drop(a1);
        let _c1 = admission.admit(ip("10.0.0.3")).expect("a place was freed");
        let open = admission.open.lock().expect("lock");
        assert_eq!(open.total, 3);
        assert_eq!(open.by_address.get(&ip("10.0.0.1")), Some(&1));
    }

    #[tokio::test]
    async fn a_reservation_waits_for_room_then_gives_up() {
        let admission = admission(1, 1);
        let held = admission.reserve(768 << 10).await.expect("room");
        assert!(
            admission.reserve(512 << 10).await.is_none(),
            "no room within the wait"
        );
        drop(held);
        assert!(
            admission.reserve(1 << 20).await.is_some(),
            "all of it again"
        );
    }
}
