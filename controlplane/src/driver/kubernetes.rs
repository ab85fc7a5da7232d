//! The Kubernetes driver: the read replicas are the pods of a Deployment, scaled through
//! its scale subresource (`PATCH /apis/apps/v1/namespaces/{ns}/deployments/{name}/scale`
//! with `{"spec":{"replicas":N}}`). A replica registers under its pod's name
//! (`--replica-id $(POD_NAME)` from the downward API); to stop drained replicas the driver
//! first marks their pods with the lowest `controller.kubernetes.io/pod-deletion-cost`, so
//! that the Deployment removes those pods when the count goes down.
//!
//! Requests and answers are pure functions below, always compiled and tested against
//! recorded answers; [`KubernetesDriver`], which sends them with the service account's token
//! and CA, needs the `kubernetes` feature.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::driver::{DriverError, Unexpected};

const API: &str = "Kubernetes";

/// Where the Deployment is and how to reach the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The API server, e.g. `https://kubernetes.default.svc`.
    pub api_url: String,
    pub namespace: String,
    /// The Deployment of read replicas.
    pub deployment: String,
    /// A file holding the bearer token (read again before each call: tokens rotate).
    pub token_path: PathBuf,
    /// The PEM file of the API server's CA.
    pub ca_path: PathBuf,
}

impl KubernetesConfig {
    /// The service account's directory inside a pod.
    pub const SERVICE_ACCOUNT: &'static str = "/var/run/secrets/kubernetes.io/serviceaccount";

    /// Inside the cluster: the API server's service and the pod's service-account token and
    /// CA.
    pub fn in_cluster(namespace: &str, deployment: &str) -> KubernetesConfig {
        let account = PathBuf::from(Self::SERVICE_ACCOUNT);
        KubernetesConfig {
            api_url: "https://kubernetes.default.svc".to_owned(),
            namespace: namespace.to_owned(),
            deployment: deployment.to_owned(),
            token_path: account.join("token"),
            ca_path: account.join("ca.crt"),
        }
    }

    /// The path of the Deployment's scale subresource.
    pub fn scale_path(&self) -> String {
        format!(
            "/apis/apps/v1/namespaces/{}/deployments/{}/scale",
            self.namespace, self.deployment
        )
    }

    /// The path of one pod.
    pub fn pod_path(&self, pod: &str) -> String {
        format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace)
    }
}

/// The content type of every patch the driver sends.
pub const MERGE_PATCH: &str = "application/merge-patch+json";

/// The body that sets the Deployment's replicas.
pub fn scale_patch(replicas: u32) -> Vec<u8> {
    json!({ "spec": { "replicas": replicas } })
        .to_string()
        .into_bytes()
}

/// The body that makes a pod the first the Deployment removes when scaling down.
pub fn deletion_cost_patch() -> Vec<u8> {
    json!({ "metadata": { "annotations": {
        "controller.kubernetes.io/pod-deletion-cost": "-1000000",
    } } })
    .to_string()
    .into_bytes()
}

/// Checks an answer: a failure's `Status` object becomes [`DriverError::Refused`] with its
/// `reason` and `message`.
pub fn check(status: u16, body: &[u8]) -> Result<Value, DriverError> {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    if (200..300).contains(&status) {
        return value.ok_or(DriverError::Unexpected {
            api: API,
            what: Unexpected::NoBody { status },
        });
    }
    let field = |name: &str| {
        value
            .as_ref()
            .and_then(|v| v[name].as_str())
            .map(str::to_owned)
    };
    Err(DriverError::Refused {
        api: API,
        status,
        code: field("reason").unwrap_or_else(|| "Unknown".to_owned()),
        message: field("message").unwrap_or_else(|| String::from_utf8_lossy(body).into_owned()),
    })
}

/// `spec.replicas` from a `Scale` answer.
pub fn scale_replicas(status: u16, body: &[u8]) -> Result<u32, DriverError> {
    replicas_of(&check(status, body)?)
}

/// `spec.replicas` of a `Scale` object (absent when zero).
fn replicas_of(value: &Value) -> Result<u32, DriverError> {
    value["spec"]["replicas"]
        .as_u64()
        .or_else(|| value["spec"].is_object().then_some(0))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(DriverError::Unexpected {
            api: API,
            what: Unexpected::NoReplicas,
        })
}

#[cfg(feature = "kubernetes")]
pub use client::KubernetesDriver;

#[cfg(feature = "kubernetes")]
mod client {
    use reqwest::Method;

    use super::*;
    use crate::driver::ReadReplicaDriver;

    /// Scales a Deployment; see the module documentation.
    #[derive(Debug)]
    pub struct KubernetesDriver {
        config: KubernetesConfig,
        http: reqwest::Client,
        /// `spec.replicas` as last set or read.
        desired: Option<u32>,
    }

    impl KubernetesDriver {
        pub fn new(config: KubernetesConfig) -> Result<KubernetesDriver, DriverError> {
            if rustls::crypto::CryptoProvider::get_default().is_none() {
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            let pem = std::fs::read(&config.ca_path).map_err(|source| DriverError::Read {
                what: "the API server's CA",
                path: config.ca_path.clone(),
                source,
            })?;
            let ca = reqwest::Certificate::from_pem(&pem).map_err(|e| DriverError::HttpClient {
                api: API,
                source: Box::new(e),
            })?;
            let http = reqwest::Client::builder()
                .tls_certs_only([ca])
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .map_err(|e| DriverError::HttpClient {
                    api: API,
                    source: Box::new(e),
                })?;
            Ok(KubernetesDriver {
                config,
                http,
                desired: None,
            })
        }

        async fn call(
            &self,
            method: Method,
            path: &str,
            patch: Option<Vec<u8>>,
        ) -> Result<Value, DriverError> {
            let token = std::fs::read_to_string(&self.config.token_path).map_err(|source| {
                DriverError::Read {
                    what: "the service account token",
                    path: self.config.token_path.clone(),
                    source,
                }
            })?;
            let url = format!("{}{path}", self.config.api_url.trim_end_matches('/'));
            let mut request = self
                .http
                .request(method, &url)
                .bearer_auth(token.trim())
                .header("accept", "application/json");
            if let Some(body) = patch {
                request = request.header("content-type", MERGE_PATCH).body(body);
            }
            let unreachable = |e: reqwest::Error| DriverError::Unreachable {
                api: API,
                source: Box::new(e),
            };
            let response = request.send().await.map_err(unreachable)?;
            let status = response.status().as_u16();
            let body = response.bytes().await.map_err(unreachable)?;
            check(status, &body)
        }

        async fn replicas(&mut self) -> Result<u32, DriverError> {
            let path = self.config.scale_path();
            let replicas = replicas_of(&self.call(Method::GET, &path, None).await?)?;
            self.desired = Some(replicas);
            Ok(replicas)
        }

        async fn scale_to(&mut self, replicas: u32) -> Result<(), DriverError> {
            let path = self.config.scale_path();
            self.call(Method::PATCH, &path, Some(scale_patch(replicas)))
                .await?;
            self.desired = Some(replicas);
            Ok(())
        }
    }

    impl ReadReplicaDriver for KubernetesDriver {
        async fn starting(&mut self, registered: &[String]) -> Result<u32, DriverError> {
            let desired = self.replicas().await?;
            let registered = u32::try_from(registered.len()).unwrap_or(u32::MAX);
            Ok(desired.saturating_sub(registered))
        }

        async fn start(&mut self, count: u32) -> Result<(), DriverError> {
            let current = self.replicas().await?;
            self.scale_to(current.saturating_add(count)).await
        }

        async fn stop(&mut self, replica_ids: &[String]) -> Result<(), DriverError> {
            for pod in replica_ids {
                let path = self.config.pod_path(pod);
                self.call(Method::PATCH, &path, Some(deletion_cost_patch()))
                    .await?;
            }
            let current = self.replicas().await?;
            let count = u32::try_from(replica_ids.len()).unwrap_or(u32::MAX);
            self.scale_to(current.saturating_sub(count)).await
        }

        async fn shutdown(&mut self) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_the_deployments_scale_subresource() {
        let config = KubernetesConfig::in_cluster("floe", "floe-read-replica");
        assert_eq!(
            config.scale_path(),
            "/apis/apps/v1/namespaces/floe/deployments/floe-read-replica/scale"
        );
        assert_eq!(
            config.pod_path("floe-read-replica-7d9f-x2"),
            "/api/v1/namespaces/floe/pods/floe-read-replica-7d9f-x2"
        );
        assert_eq!(
            config.token_path,
            PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount/token")
        );
        assert_eq!(scale_patch(4), br#"{"spec":{"replicas":4}}"#);
        let cost: Value = serde_json::from_slice(&deletion_cost_patch()).expect("json");
        assert_eq!(
            cost["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"],
            "-1000000"
        );
    }

    const SCALE: &str = r#"{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"floe-read-replica","namespace":"floe","uid":"1c1d4ad9-6c35-4a8c-8a54-0b5e4b0c9b1e","resourceVersion":"123456","creationTimestamp":"2026-11-30T10:00:00Z"},"spec":{"replicas":2},"status":{"replicas":2,"selector":"app=floe-read-replica"}}"#;

    const SCALED_TO_ZERO: &str = r#"{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"floe-read-replica","namespace":"floe"},"spec":{},"status":{"replicas":0}}"#;

    const NOT_FOUND: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"deployments.apps \"floe-read-replica\" not found","reason":"NotFound","details":{"name":"floe-read-replica","group":"apps","kind":"deployments"},"code":404}"#;

    const FORBIDDEN: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"deployments.apps \"floe-read-replica\" is forbidden: User \"system:serviceaccount:floe:controlplane\" cannot patch resource \"deployments/scale\" in API group \"apps\" in the namespace \"floe\"","reason":"Forbidden","details":{"name":"floe-read-replica","group":"apps","kind":"deployments"},"code":403}"#;

    #[test]
    fn recorded_answers_are_read() {
        assert_eq!(scale_replicas(200, SCALE.as_bytes()).expect("scale"), 2);
        assert_eq!(
            scale_replicas(200, SCALED_TO_ZERO.as_bytes()).expect("scale"),
            0,
            "spec.replicas is omitted when zero"
        );
        match scale_replicas(404, NOT_FOUND.as_bytes()) {
            Err(DriverError::Refused {
                status,
                code,
                message,
                ..
            }) => {
                assert_eq!((status, code.as_str()), (404, "NotFound"));
                assert!(message.contains("not found"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            check(403, FORBIDDEN.as_bytes()),
            Err(DriverError::Refused { status: 403, code, .. }) if code == "Forbidden"
        ));
        assert!(matches!(
            check(502, b"Bad Gateway"),
            Err(DriverError::Refused { status: 502, code, message, .. })
                if code == "Unknown" && message == "Bad Gateway"
        ));
        assert!(matches!(
            scale_replicas(200, b"{\"kind\":\"Status\"}"),
            Err(DriverError::Unexpected { .. })
        ));
    }
}
