//! `/v1/brokers/{id}/peer-certificate`: certificates for brokers' peer ports, naming the
//! broker, from the peer CA this controlplane holds (see [`crate::peer_ca`]).

use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use floe_wire::BrokerId;
use floe_wire::admin::{PeerCertificate, PeerCertificateRequest};

use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::cluster::Cluster;
use crate::store::{Store, StoreError};

/// Signs a certificate naming broker `id` for the key in the request. Only a registered
/// broker gets one; the request's names and dates are ignored.
pub(super) async fn issue<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<u32>,
    Body(request): Body<PeerCertificateRequest>,
) -> Result<Json<PeerCertificate>, Failure> {
    let Some(ca) = &cluster.config.peer_ca else {
        return Err(Failure::Conflict(
            "this controlplane holds no peer CA key (--peer-ca-key-file): give brokers \
             certificates naming them (--peer-cert, --peer-key)"
                .into(),
        ));
    };
    let id = BrokerId::new(id);
    let brokers = cluster.store.brokers().await?;
    if !brokers.iter().any(|broker| broker.broker_id == id) {
        return Err(StoreError::BrokerNotFound { id }.into());
    }
    let issued = ca
        .issue(
            id,
            &request.csr_pem,
            SystemTime::now(),
            cluster.config.peer_certificate_lifetime,
        )
        .map_err(|e| Failure::Invalid(floe_wire::ErrorChain(&e).to_string()))?;
    tracing::info!(
        broker_id = id.get(),
        not_after_ms = issued.not_after_ms,
        "peer certificate issued"
    );
    Ok(Json(issued))
}
