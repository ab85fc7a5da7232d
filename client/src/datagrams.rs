//! The UDP datagram sizes of every Floe QUIC endpoint: the client's, the broker's client port
//! and its peer port.
//!
//! quinn starts every path at 1,200 bytes and, by default, neither accepts nor discovers
//! datagrams above 1,472 bytes, the payload of a 1,500-byte Ethernet frame. Most of QUIC's
//! cost is per packet (header protection, packet numbers, acknowledgements, one trip through
//! the kernel's UDP stack each), so on a path that carries larger frames — loopback, a
//! cloud network with 9,001-byte jumbo frames — the small default spends most of the CPU a
//! transfer takes. Floe's endpoints accept datagrams up to [`MAX_DATAGRAM_BYTES`] and
//! discover, by probing, how much of that each path carries; a path that drops the probes
//! stays at what it carried before, and one that starts dropping full-size packets falls
//! back (quinn's black-hole detection). The figures are in `docs/benchmarks-history.md`.
//!
//! Why 6,500 and not a jumbo frame's 8,952: quinn hands the kernel up to ten datagrams in one
//! segmentation-offload (GSO) send, and the kernel refuses a GSO send above 64 KiB. With
//! 8,952-byte datagrams those sends fail, quinn counts their packets lost, and black-hole
//! detection drops the path to 1,200 bytes for good. Ten datagrams of 6,500 bytes fit.

/// The largest UDP payload a Floe endpoint sends or accepts, in bytes. Ten of them (quinn's
/// largest GSO send) stay within the kernel's 65,507-byte limit for one UDP send.
pub const MAX_DATAGRAM_BYTES: u16 = 6_500;

/// quinn's largest GSO send, in datagrams (`MAX_TRANSMIT_SEGMENTS` in quinn 0.11).
const GSO_DATAGRAMS: u32 = 10;
/// The most UDP payload one send may carry: 65,535 bytes less the IPv4 and UDP headers.
const MAX_UDP_SEND_BYTES: u32 = 65_507;
const _: () = assert!(GSO_DATAGRAMS * MAX_DATAGRAM_BYTES as u32 <= MAX_UDP_SEND_BYTES);

/// An endpoint configuration that accepts datagrams up to [`MAX_DATAGRAM_BYTES`].
pub fn endpoint_config(mut config: quinn::EndpointConfig) -> quinn::EndpointConfig {
    config
        .max_udp_payload_size(MAX_DATAGRAM_BYTES)
        .expect("MAX_DATAGRAM_BYTES is within QUIC's 1,200..=65,527");
    config
}

/// RFC 9002's initial congestion window for any datagram size from 1,472 bytes up:
/// `min(10 × size, max(2 × size, 14,720))`.
pub const INITIAL_WINDOW_BYTES: u64 = 14_720;

/// Lets a connection probe its path for datagrams up to [`MAX_DATAGRAM_BYTES`], and starts
/// its congestion window at [`INITIAL_WINDOW_BYTES`].
///
/// quinn computes its default initial window from the 1,200 bytes every path starts at:
/// 12,000 bytes. Once discovery reaches 6,500-byte datagrams that window holds one full
/// datagram beside anything smaller, and a receiver acknowledges a lone packet only after
/// its 25 ms ACK delay. A fresh connection's first response then took about 25 ms longer
/// per round trip until the window grew (a new read replica answered its first fetch in
/// 35 ms instead of 7–12). With RFC 9002's 14,720 bytes two full datagrams fit, and the
/// receiver acknowledges at once.
pub fn discover_path_mtu(transport: &mut quinn::TransportConfig) -> &mut quinn::TransportConfig {
    let mut discovery = quinn::MtuDiscoveryConfig::default();
    discovery.upper_bound(MAX_DATAGRAM_BYTES);
    let mut congestion = quinn::congestion::CubicConfig::default();
    congestion.initial_window(INITIAL_WINDOW_BYTES);
    transport
        .congestion_controller_factory(std::sync::Arc::new(congestion))
        .mtu_discovery_config(Some(discovery))
}
