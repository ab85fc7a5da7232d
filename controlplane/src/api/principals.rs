//! `/v1/principals`: who may call the cluster, and their tokens (`floe token`); and
//! `/v1/auth`: the table brokers and read replicas check callers against, and who a token
//! proves.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use floe_wire::admin::{
    CreatePrincipalRequest, CreatedToken, PrincipalInfo, PrincipalList, TokenInfo, WhoAmI,
};
use floe_wire::auth::{self, CredentialTable, Grant, MintedToken, Principal, PrincipalKind};

use crate::api::Caller;
use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::auth::{BOOTSTRAP_NAMES, credential_table};
use crate::cluster::{Cluster, now_ms};
use crate::store::{PrincipalStore, Store, StoreError};

/// Grants one principal may hold.
const MAX_GRANTS: usize = 256;

pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<PrincipalList>, Failure> {
    let (_, stored) = cluster.store.principals().await?;
    let bootstrap = cluster
        .auth
        .as_ref()
        .map_or(&[][..], |auth| auth.bootstrap());
    let mut principals: Vec<PrincipalInfo> = bootstrap
        .iter()
        .map(|entry| {
            let tokens = entry.keys.iter().map(|key| (key.key_id.clone(), None));
            info(entry.principal.clone(), tokens, true)
        })
        .collect();
    principals.extend(stored.into_iter().map(|entry| {
        let tokens = entry
            .tokens
            .into_iter()
            .map(|token| (token.key.key_id, Some(token.created_at_ms)));
        info(entry.principal, tokens, false)
    }));
    Ok(Json(PrincipalList { principals }))
}

/// A principal as listed: its tokens' key ids (with when they were made), never a hash.
fn info(
    principal: Principal,
    tokens: impl Iterator<Item = (String, Option<u64>)>,
    bootstrap: bool,
) -> PrincipalInfo {
    PrincipalInfo {
        name: principal.name,
        kind: principal.kind,
        grants: principal.grants,
        broker_id: principal.broker_id,
        tokens: tokens
            .map(|(key_id, created_at_ms)| TokenInfo {
                key_id,
                created_at_ms,
            })
            .collect(),
        bootstrap,
    }
}

pub(super) async fn create<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    Body(request): Body<CreatePrincipalRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), Failure> {
    auth::check_principal_name(&request.name).map_err(Failure::Invalid)?;
    if BOOTSTRAP_NAMES.contains(&request.name.as_str()) {
        return Err(StoreError::PrincipalExists { name: request.name }.into());
    }
    if request.grants.len() > MAX_GRANTS {
        return Err(Failure::Invalid(format!(
            "{} grants; a principal holds at most {MAX_GRANTS}",
            request.grants.len()
        )));
    }
    if request.kind != PrincipalKind::User && !request.grants.is_empty() {
        return Err(Failure::Invalid(format!(
            "a {} holds what its kind implies; give grants to users only",
            request.kind
        )));
    }
    if request.broker_id.is_some() && request.kind != PrincipalKind::Broker {
        return Err(Failure::Invalid(format!(
            "a broker id binds a principal of kind broker, not a {}",
            request.kind
        )));
    }
    if request.broker_id.is_some_and(|id| id.get() == 0) {
        return Err(Failure::Invalid("broker ids start at 1".into()));
    }
    let mut grants = request.grants;
    grants.sort();
    grants.dedup();
    let principal = Principal {
        name: request.name,
        kind: request.kind,
        grants,
        broker_id: request.broker_id,
    };
    let minted = mint()?;
    cluster
        .store
        .create_principal(&principal, &minted.key, now_ms())
        .await?;
    invalidate(&cluster).await;
    tracing::info!(principal = %principal.name, kind = %principal.kind, broker_id = ?principal.broker_id.map(|id| id.get()), grants = ?principal.grants.iter().map(Grant::to_string).collect::<Vec<_>>(), "principal created");
    Ok((StatusCode::CREATED, Json(created(principal.name, minted))))
}

pub(super) async fn add_token<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(name): PathParams<String>,
) -> Result<(StatusCode, Json<CreatedToken>), Failure> {
    refuse_bootstrap(&name)?;
    let minted = mint()?;
    cluster
        .store
        .add_token(&name, &minted.key, now_ms())
        .await?;
    invalidate(&cluster).await;
    tracing::info!(principal = %name, key_id = %minted.key.key_id, "token added");
    Ok((StatusCode::CREATED, Json(created(name, minted))))
}

pub(super) async fn revoke<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(name): PathParams<String>,
) -> Result<StatusCode, Failure> {
    refuse_bootstrap(&name)?;
    cluster.store.revoke_principal(&name).await?;
    invalidate(&cluster).await;
    tracing::info!(principal = %name, "principal revoked");
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn revoke_token<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams((name, key_id)): PathParams<(String, String)>,
) -> Result<StatusCode, Failure> {
    refuse_bootstrap(&name)?;
    cluster.store.revoke_token(&name, &key_id).await?;
    invalidate(&cluster).await;
    tracing::info!(principal = %name, %key_id, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// Every principal and token hash: what brokers and read replicas check callers against.
pub(super) async fn credentials<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<CredentialTable>, Failure> {
    let table = match &cluster.auth {
        Some(auth) => auth.table(&cluster.store).await?.as_ref().clone(),
        None => {
            let (version, stored) = cluster.store.principals().await?;
            credential_table(&[], version, stored)
        }
    };
    Ok(Json(table))
}

pub(super) async fn whoami(caller: Caller) -> Json<WhoAmI> {
    Json(match caller.principal() {
        Some(principal) => WhoAmI {
            name: principal.name.clone(),
            kind: principal.kind,
            grants: principal.grants.clone(),
        },
        // Without authentication, everyone may do everything.
        None => WhoAmI {
            name: "anonymous".into(),
            kind: PrincipalKind::User,
            grants: vec![Grant::ClusterAdmin],
        },
    })
}

fn refuse_bootstrap(name: &str) -> Result<(), Failure> {
    if BOOTSTRAP_NAMES.contains(&name) {
        return Err(Failure::Conflict(format!(
            "`{name}` was given to the controlplane at start; change its token there"
        )));
    }
    Ok(())
}

fn mint() -> Result<MintedToken, Failure> {
    let mut random = [0u8; 40];
    getrandom::fill(&mut random)
        .map_err(|e| Failure::Internal(format!("no random bytes for a token: {e}")))?;
    Ok(auth::mint_token(random))
}

fn created(name: String, minted: MintedToken) -> CreatedToken {
    CreatedToken {
        name,
        key_id: minted.key.key_id,
        token: minted.token,
    }
}

async fn invalidate<S: PrincipalStore>(cluster: &Cluster<S>) {
    if let Some(auth) = &cluster.auth {
        auth.invalidate().await;
    }
}
