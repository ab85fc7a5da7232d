//! Principals and their tokens through the controlplane: `floe token create|list|revoke`.

use anyhow::{Context, Result};
use clap::Subcommand;
use floe_client::rest::Controlplane;
use floe_wire::admin::{CreatePrincipalRequest, PrincipalInfo};
use floe_wire::auth::{Grant, PrincipalKind};
use serde_json::json;

use crate::output::{print, print_json, table};

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a principal and its first token, printed once: store it now, it cannot be
    /// shown again. With an existing NAME and --rotate, a second token for it instead (the
    /// first stays valid until `floe token revoke NAME --key ID`).
    Create {
        name: String,
        /// A grant, ACTION:STREAM or ACTION:PREFIX* with ACTION one of publish, consume,
        /// admin, describe; or cluster-admin. Repeat for several.
        #[arg(long = "allow", value_name = "ACTION:STREAM", value_parser = parse_grant)]
        allow: Vec<Grant>,
        /// What the principal is: user (the default), broker or read-replica.
        #[arg(long, default_value = "user", value_parser = parse_kind)]
        kind: PrincipalKind,
        /// With --kind broker: the one broker id this principal may act for (register as,
        /// heartbeat, …); without it, a broker principal may act for any broker.
        #[arg(long, value_name = "ID")]
        broker_id: Option<u32>,
        /// Add a token to the existing principal NAME (its grants stay).
        #[arg(long, conflicts_with_all = ["allow", "kind", "broker_id"])]
        rotate: bool,
    },
    /// List principals, their grants and their tokens' key ids (never a secret).
    List,
    /// Revoke a principal and every token of it, or with --key one token only. Brokers and
    /// read replicas refuse its requests within seconds, open connections included.
    Revoke {
        name: String,
        /// The key id of one token (the 16 hex digits after `floe_`).
        #[arg(long, value_name = "ID")]
        key: Option<String>,
    },
}

fn parse_grant(text: &str) -> Result<Grant, String> {
    text.parse()
        .map_err(|e: floe_wire::auth::GrantError| e.to_string())
}

fn parse_kind(text: &str) -> Result<PrincipalKind, String> {
    text.parse()
}

/// `floe token …`.
pub async fn run(controlplane: &Controlplane, command: TokenCommand, json: bool) -> Result<()> {
    match command {
        TokenCommand::Create {
            name,
            allow,
            kind,
            broker_id,
            rotate,
        } => {
            let created = if rotate {
                controlplane
                    .add_token(&name)
                    .await
                    .with_context(|| format!("adding a token to principal {name}"))?
            } else {
                let request = CreatePrincipalRequest {
                    name: name.clone(),
                    kind,
                    grants: allow,
                    broker_id: broker_id.map(floe_wire::BrokerId::new),
                };
                controlplane
                    .create_principal(&request)
                    .await
                    .with_context(|| format!("creating principal {name}"))?
            };
            if json {
                print_json(&json!({
                    "name": created.name,
                    "token": created.token,
                    "key_id": created.key_id,
                }))?;
            } else {
                print(&format!(
                    "{}\n\nThis is the only time the token is shown: store it now (as FLOE_TOKEN, \
                     or in a profile: `floe profile create NAME --endpoint … --ca-cert … --token \
                     TOKEN`). Key id: {}.\n",
                    created.token, created.key_id
                ))?;
            }
        }
        TokenCommand::List => {
            let list = controlplane
                .principals()
                .await
                .context("listing principals")?;
            if json {
                print_json(&serde_json::to_value(&list.principals)?)?;
            } else {
                print(&principal_table(&list.principals))?;
            }
        }
        TokenCommand::Revoke { name, key } => {
            match &key {
                Some(key) => controlplane
                    .revoke_token(&name, key)
                    .await
                    .with_context(|| format!("revoking token {key} of principal {name}"))?,
                None => controlplane
                    .revoke_principal(&name)
                    .await
                    .with_context(|| format!("revoking principal {name}"))?,
            }
            if json {
                print_json(&json!({ "name": name, "key_id": key, "revoked": true }))?;
            } else {
                match key {
                    Some(key) => print(&format!("token {key} of {name} revoked\n"))?,
                    None => print(&format!("{name} and its tokens revoked\n"))?,
                }
            }
        }
    }
    Ok(())
}

fn principal_table(principals: &[PrincipalInfo]) -> String {
    let rows: Vec<Vec<String>> = principals
        .iter()
        .map(|p| {
            let grants = if p.grants.is_empty() {
                match p.kind {
                    PrincipalKind::User => "-".to_owned(),
                    _ => "(its kind's)".to_owned(),
                }
            } else {
                p.grants
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let tokens = p
                .tokens
                .iter()
                .map(|t| t.key_id.clone())
                .collect::<Vec<_>>()
                .join(" ");
            let name = if p.bootstrap {
                format!("{} (from the controlplane's settings)", p.name)
            } else {
                p.name.clone()
            };
            let grants = match p.broker_id {
                Some(id) => format!("{grants}, broker {id} only"),
                None => grants,
            };
            vec![name, p.kind.to_string(), grants, tokens]
        })
        .collect();
    table(&["NAME", "KIND", "GRANTS", "TOKENS"], &rows)
}
