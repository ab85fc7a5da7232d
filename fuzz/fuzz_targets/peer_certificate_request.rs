//! Fuzz target: arbitrary text as the certificate signing request a broker sends to
//! `POST /v1/brokers/{id}/peer-certificate`, signed by a peer CA
//! (`floe_controlplane::peer_ca::PeerCa::issue`). Any input may be rejected, none may panic;
//! an accepted one yields a certificate that names the broker asked for and no other.

#![no_main]

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use floe_controlplane::peer_ca::PeerCa;
use floe_wire::BrokerId;
use libfuzzer_sys::fuzz_target;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

static CA: LazyLock<PeerCa> = LazyLock::new(|| {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let certificate = params.self_signed(&key).expect("CA");
    PeerCa::from_pem(&certificate.pem(), &key.serialize_pem()).expect("a peer CA")
});

fuzz_target!(|data: &[u8]| {
    let Ok(csr) = std::str::from_utf8(data) else {
        return;
    };
    let broker = BrokerId::new(7);
    let day = Duration::from_secs(24 * 3600);
    let Ok(issued) = CA.issue(broker, csr, SystemTime::now(), day) else {
        return;
    };
    let der = CertificateDer::from_pem_slice(issued.certificate_pem.as_bytes())
        .expect("an issued certificate is PEM");
    assert_eq!(
        floe_broker::peer_identity::broker_in_certificate(&der),
        Ok(broker)
    );
});
