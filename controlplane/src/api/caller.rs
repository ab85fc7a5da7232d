//! Who is calling, and what each route lets them do.
//!
//! Every route has one [`Policy`] in [`super::ROUTES`]. The `authorize` layer checks the
//! policies that need only the path; the handlers of [`Policy::InHandler`] routes check the
//! streams they find in the body or answer, with [`Caller::require`] and [`Caller::may`].

use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use floe_wire::auth::{Action, Principal, PrincipalKind};
use floe_wire::{BrokerId, StreamName};

use crate::api::error::Failure;
use crate::cluster::Cluster;
use crate::store::Store;

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Anyone, without a token: health, readiness, the API's document.
    Open,
    /// Any principal.
    Authenticated,
    /// `action` on the stream named by the path's `{name}`.
    Stream(Action),
    /// A principal of this kind (a broker, a read replica), or `cluster-admin`.
    Kind(PrincipalKind),
    /// A broker acting for the broker the path's `{broker_id}` names: a principal of kind
    /// `broker` bound to that id or to none (the bootstrap `brokers`), or `cluster-admin`.
    Broker,
    /// A broker or a read replica, or `cluster-admin`.
    ClusterMember,
    /// `cluster-admin`.
    ClusterAdmin,
    /// Any principal; the handler checks the streams the request names or the answer holds.
    InHandler,
}

/// The caller of an API call: a principal, or anyone when the controlplane runs without
/// authentication.
#[derive(Debug, Clone)]
pub(crate) struct Caller(Option<Arc<Principal>>);

impl Caller {
    /// The principal; `None` without authentication.
    pub(crate) fn principal(&self) -> Option<&Principal> {
        self.0.as_deref()
    }

    /// Whether the caller may take `action` on `stream`.
    pub(crate) fn may(&self, action: Action, stream: &StreamName) -> bool {
        self.0
            .as_ref()
            .is_none_or(|principal| principal.may(action, stream))
    }

    /// `Forbidden` unless the caller may take `action` on `stream`.
    pub(crate) fn require(&self, action: Action, stream: &StreamName) -> Result<(), Failure> {
        if self.may(action, stream) {
            return Ok(());
        }
        Err(self.forbidden(format!("{action}:{stream}")))
    }

    /// `Forbidden` unless the caller may act for broker `id` ([`Principal::may_act_for`]);
    /// anyone may without authentication.
    pub(crate) fn require_broker(&self, id: BrokerId) -> Result<(), Failure> {
        let Some(principal) = &self.0 else {
            return Ok(());
        };
        if principal.may_act_for(id) {
            return Ok(());
        }
        Err(self.forbidden(match principal.broker_id {
            Some(bound) if principal.kind == PrincipalKind::Broker => {
                format!("to be broker {id}; it acts for broker {bound} only")
            }
            _ => format!("to be a {}", PrincipalKind::Broker),
        }))
    }

    fn allows(&self, policy: Policy, path: &PathNames) -> Result<(), Failure> {
        let stream = path.stream.as_deref();
        let Some(principal) = &self.0 else {
            return Ok(());
        };
        let is = |kind| principal.kind == kind || principal.is_cluster_admin();
        match policy {
            Policy::Open | Policy::Authenticated | Policy::InHandler => Ok(()),
            Policy::Stream(action) => {
                // A path that is not a stream name is answered 400 by the handler.
                match stream.and_then(|name| StreamName::new(name).ok()) {
                    Some(name) => self.require(action, &name),
                    None => Ok(()),
                }
            }
            Policy::Broker => match path.broker_id.as_deref().map(str::parse::<u32>) {
                Some(Ok(id)) => self.require_broker(BrokerId::new(id)),
                // A path that is not a broker id is answered 400 by the handler; the kind
                // is checked all the same.
                _ if is(PrincipalKind::Broker) => Ok(()),
                _ => Err(self.forbidden(format!("to be a {}", PrincipalKind::Broker))),
            },
            Policy::Kind(kind) if is(kind) => Ok(()),
            Policy::Kind(kind) => Err(self.forbidden(format!("to be a {kind}"))),
            Policy::ClusterMember
                if is(PrincipalKind::Broker) || is(PrincipalKind::ReadReplica) =>
            {
                Ok(())
            }
            Policy::ClusterMember => Err(self.forbidden("to be a broker or a read replica".into())),
            Policy::ClusterAdmin if principal.is_cluster_admin() => Ok(()),
            Policy::ClusterAdmin => Err(self.forbidden("cluster-admin".into())),
        }
    }

    fn forbidden(&self, needs: String) -> Failure {
        Failure::Forbidden {
            principal: self.0.as_ref().map_or_else(String::new, |p| p.name.clone()),
            needs,
        }
    }
}

/// What a route's path names, as policies need it.
#[derive(Debug, Default)]
struct PathNames {
    /// `{name}`: a stream.
    stream: Option<String>,
    /// `{broker_id}`.
    broker_id: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, Failure> {
        // The `authorize` layer puts it there on every route but the open ones.
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or(Caller(None)))
    }
}

/// Authenticates the caller of a matched route and checks the route's policy.
pub(crate) async fn authorize<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let policy = super::policy(request.method(), &request);
    if policy == Policy::Open {
        return next.run(request).await;
    }
    let caller = match &cluster.auth {
        None => Caller(None),
        Some(auth) => {
            let presented = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "))
                .map(|token| token.trim().as_bytes().to_vec());
            match auth
                .authenticate(&cluster.store, presented.as_deref())
                .await
            {
                Err(e) => return Failure::Store(e).into_response(),
                Ok(Err(e)) => return Failure::Unauthorized(e).into_response(),
                Ok(Ok(principal)) => Caller(Some(principal)),
            }
        }
    };
    let (mut parts, body) = request.into_parts();
    let path = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => {
            let find = |name: &str| {
                params
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.to_owned())
            };
            PathNames {
                stream: find("name"),
                broker_id: find("broker_id"),
            }
        }
        Err(_) => PathNames::default(),
    };
    if let Err(refused) = caller.allows(policy, &path) {
        return refused.into_response();
    }
    request = Request::from_parts(parts, body);
    request.extensions_mut().insert(caller);
    next.run(request).await
}
