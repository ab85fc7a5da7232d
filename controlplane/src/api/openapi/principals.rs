//! The document's principals and tokens, and how every route says who may call it.

use serde_json::{Value, json};

use super::{Schemas, array, object, operation, path_parameter, reference, string_enum};
use crate::api::{Policy, ROUTES};

fn principal_name() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 64,
            "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$" })
}

fn kind() -> Value {
    string_enum(&["user", "broker", "read-replica"])
}

/// `ACTION:STREAM`, `ACTION:PREFIX*` or `cluster-admin`.
fn grant() -> Value {
    json!({ "type": "string",
            "pattern": "^(cluster-admin|(publish|consume|admin|describe):([A-Za-z0-9._-]+|[A-Za-z0-9._-]*\\*))$" })
}

fn hash() -> Value {
    json!({ "type": "string", "pattern": "^[0-9a-f]{64}$" })
}

pub(super) fn schemas() -> Schemas {
    let grants = array(grant());
    vec![
        (
            "CreatePrincipalRequest",
            object(
                &[
                    ("name", principal_name()),
                    ("kind", kind()),
                    ("grants", grants.clone()),
                    ("broker_id", super::u32_schema()),
                ],
                &["name"],
                true,
            ),
        ),
        (
            "CreatedToken",
            object(
                &[
                    ("name", principal_name()),
                    ("token", json!({ "type": "string" })),
                    ("key_id", json!({ "type": "string" })),
                ],
                &["name", "token", "key_id"],
                false,
            ),
        ),
        (
            "TokenInfo",
            object(
                &[
                    ("key_id", json!({ "type": "string" })),
                    ("created_at_ms", super::u64_schema()),
                ],
                &["key_id"],
                false,
            ),
        ),
        (
            "PrincipalInfo",
            object(
                &[
                    ("name", principal_name()),
                    ("kind", kind()),
                    ("grants", grants.clone()),
                    ("broker_id", super::u32_schema()),
                    ("tokens", array(reference("TokenInfo"))),
                    ("bootstrap", json!({ "type": "boolean" })),
                ],
                &["name", "kind", "grants", "tokens"],
                false,
            ),
        ),
        (
            "PrincipalList",
            object(
                &[("principals", array(reference("PrincipalInfo")))],
                &["principals"],
                false,
            ),
        ),
        (
            "WhoAmI",
            object(
                &[
                    ("name", json!({ "type": "string" })),
                    ("kind", kind()),
                    ("grants", grants.clone()),
                ],
                &["name", "kind", "grants"],
                false,
            ),
        ),
        (
            "CredentialTable",
            object(
                &[
                    ("version", super::u64_schema()),
                    (
                        "principals",
                        array(object(
                            &[
                                (
                                    "principal",
                                    object(
                                        &[
                                            ("name", json!({ "type": "string" })),
                                            ("kind", kind()),
                                            ("grants", grants),
                                            ("broker_id", super::u32_schema()),
                                        ],
                                        &["name", "kind", "grants"],
                                        false,
                                    ),
                                ),
                                (
                                    "keys",
                                    array(object(
                                        &[
                                            ("key_id", json!({ "type": "string" })),
                                            ("hash", hash()),
                                        ],
                                        &["key_id", "hash"],
                                        false,
                                    )),
                                ),
                            ],
                            &["principal", "keys"],
                            false,
                        )),
                    ),
                ],
                &["version", "principals"],
                false,
            ),
        ),
    ]
}

pub(super) fn paths() -> Value {
    let principal = path_parameter("principal", principal_name());
    let key_id = path_parameter("key_id", json!({ "type": "string" }));
    json!({
        "/v1/principals": {
            "get": operation("List principals, their grants and tokens (never a secret)",
                vec![], None, 200, Some("PrincipalList")),
            "post": operation("Create a principal and its first token, shown only in this answer",
                vec![], Some("CreatePrincipalRequest"), 201, Some("CreatedToken")),
        },
        "/v1/principals/{principal}": {
            "delete": operation("Revoke a principal and every token of it", vec![principal.clone()],
                None, 204, None),
        },
        "/v1/principals/{principal}/tokens": {
            "post": operation("Add a token to a principal (rotation), shown only in this answer",
                vec![principal.clone()], None, 201, Some("CreatedToken")),
        },
        "/v1/principals/{principal}/tokens/{key_id}": {
            "delete": operation("Revoke one token of a principal", vec![principal, key_id],
                None, 204, None),
        },
        "/v1/auth/credentials": {
            "get": operation("Every principal with its grants and token hashes: what brokers and \
                read replicas check callers against", vec![], None, 200, Some("CredentialTable")),
        },
        "/v1/auth/whoami": {
            "get": operation("The principal the bearer token proves", vec![], None, 200,
                Some("WhoAmI")),
        },
    })
}

/// Marks every operation with who may call it: the bearer token it needs, the `401` and
/// `403` answers, and the permission in words (`x-floe-permission`).
pub(super) fn secure(paths: &mut Value) {
    for (method, path, policy) in ROUTES {
        let Some(operation) = paths.get_mut(*path).and_then(|p| p.get_mut(*method)) else {
            continue;
        };
        let needs = match policy {
            Policy::Open => continue,
            Policy::Authenticated => "any principal".to_owned(),
            Policy::Stream(action) => format!("`{action}` on the stream"),
            Policy::Kind(kind) => format!("a principal of kind `{kind}`, or `cluster-admin`"),
            Policy::Broker => "a principal of kind `broker` bound to the path's broker id or to \
                               none, or `cluster-admin`"
                .to_owned(),
            Policy::ClusterMember => "a broker or read replica, or `cluster-admin`".to_owned(),
            Policy::ClusterAdmin => "`cluster-admin`".to_owned(),
            Policy::InHandler => {
                "any principal; the streams the call names need their own grants".to_owned()
            }
        };
        operation["security"] = json!([{ "bearerToken": [] }]);
        operation["x-floe-permission"] = json!(needs);
        let failure = |description: &str| {
            json!({ "description": description,
                    "content": { "application/json": { "schema": reference("ApiError") } } })
        };
        operation["responses"]["401"] = failure("no token, or one unknown or revoked");
        if *policy != Policy::Authenticated {
            operation["responses"]["403"] = failure("the principal lacks the grant");
        }
    }
}
