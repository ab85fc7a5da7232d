//! Fuzz target: arbitrary bytes as a peer's certificate (DER), read for the broker it names
//! (`floe_broker::peer_identity::broker_in_certificate`), as a client's certificate read for
//! the principal it names (`floe_broker::tls::common_name`), and as a certificate URI. Any
//! input may be rejected, none may panic; a named broker's URI reads back as the same broker.

#![no_main]

use floe_broker::peer_identity::broker_in_certificate;
use floe_wire::BrokerId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = floe_broker::tls::common_name(data);
    if let Ok(id) = broker_in_certificate(data) {
        assert_eq!(BrokerId::from_certificate_uri(&id.certificate_uri()), Some(id));
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Some(id) = BrokerId::from_certificate_uri(text)
    {
        assert_eq!(id.certificate_uri(), text);
    }
});
