//! Every way an API call fails, mapped once to an HTTP status and an [`ApiErrorCode`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floe_wire::admin::{ApiError, ApiErrorCode};

use crate::store::StoreError;

/// A failed call. The message is for people; the code (see [`Failure::status`]) for programs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A consumer group's member is refused.
    #[error(transparent)]
    Group(#[from] crate::groups::GroupError),
    /// Malformed JSON, path or query.
    #[error("{0}")]
    BadRequest(String),
    /// The body is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Another extractor rejection, with its own 4xx status (e.g. a body too large).
    #[error("{message}")]
    Rejected { status: StatusCode, message: String },
    /// Well-formed but out of range or inconsistent.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unauthorized(floe_wire::auth::AuthError),
    #[error("principal `{principal}` may not do this: it needs {needs}")]
    Forbidden { principal: String, needs: String },
    #[error("{0}")]
    Internal(String),
    #[error("no consumer group `{0}`")]
    GroupNotFound(String),
    #[error("the end of {stream}/{partition} has not been reported yet")]
    RangeUnknown { stream: String, partition: u32 },
    #[error("broker {broker} is not a replica of {stream}/{partition}")]
    NotReplica {
        broker: u32,
        stream: String,
        partition: u32,
    },
    #[error("this controlplane is a standby; ask the leader")]
    NotLeader,
    #[error("no route for {0}")]
    RouteNotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The call cannot apply to the resource in its present state.
    #[error("{0}")]
    Conflict(String),
    /// A create would pass one of the cluster's limits; the message names it.
    #[error("{0}")]
    LimitExceeded(String),
}

impl Failure {
    /// The status and code of this failure: the one place they are decided.
    pub(crate) fn status(&self) -> (StatusCode, ApiErrorCode) {
        use ApiErrorCode as Code;
        match self {
            Failure::Store(error) => match error {
                StoreError::StreamExists { .. } => (StatusCode::CONFLICT, Code::StreamExists),
                StoreError::StreamNotFound { .. } => (StatusCode::NOT_FOUND, Code::StreamNotFound),
                StoreError::PartitionNotFound { .. } => {
                    (StatusCode::NOT_FOUND, Code::PartitionNotFound)
                }
                StoreError::BrokerNotFound { .. } => (StatusCode::NOT_FOUND, Code::BrokerNotFound),
                StoreError::LeaseExpired { .. } | StoreError::ReadReplicaLeaseExpired { .. } => {
                    (StatusCode::CONFLICT, Code::LeaseExpired)
                }
                StoreError::PrincipalExists { .. } => (StatusCode::CONFLICT, Code::PrincipalExists),
                StoreError::PrincipalNotFound { .. } | StoreError::TokenNotFound { .. } => {
                    (StatusCode::NOT_FOUND, Code::PrincipalNotFound)
                }
                StoreError::ReadReplicaNotFound { .. } => {
                    (StatusCode::NOT_FOUND, Code::ReadReplicaNotFound)
                }
                StoreError::EpochConflict { .. } => (StatusCode::CONFLICT, Code::Conflict),
                StoreError::OutOfRange { .. } => {
                    (StatusCode::UNPROCESSABLE_ENTITY, Code::InvalidArgument)
                }
                StoreError::Backend { .. } => (StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
                StoreError::Corrupt { .. } | StoreError::MigrationChanged { .. } => {
                    (StatusCode::INTERNAL_SERVER_ERROR, Code::Internal)
                }
            },
            Failure::Group(error) => {
                use crate::groups::GroupError;
                match error {
                    GroupError::UnknownMember { .. } => (StatusCode::CONFLICT, Code::UnknownMember),
                    GroupError::StaleGeneration { .. } => {
                        (StatusCode::CONFLICT, Code::StaleGeneration)
                    }
                    GroupError::NotAssigned { .. } => {
                        (StatusCode::CONFLICT, Code::PartitionNotAssigned)
                    }
                    GroupError::NotEmpty { .. } => (StatusCode::CONFLICT, Code::GroupNotEmpty),
                    GroupError::TooManyMembers { .. } => {
                        (StatusCode::TOO_MANY_REQUESTS, Code::LimitExceeded)
                    }
                }
            }
            Failure::BadRequest(_) => (StatusCode::BAD_REQUEST, Code::BadRequest),
            Failure::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Code::UnsupportedMediaType,
            ),
            Failure::Rejected { status, .. } => (*status, Code::BadRequest),
            Failure::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, Code::InvalidArgument),
            Failure::Unauthorized(_) => (StatusCode::UNAUTHORIZED, Code::Unauthorized),
            Failure::Forbidden { .. } => (StatusCode::FORBIDDEN, Code::Forbidden),
            Failure::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, Code::Internal),
            Failure::GroupNotFound(_) => (StatusCode::NOT_FOUND, Code::GroupNotFound),
            Failure::RangeUnknown { .. } => (StatusCode::CONFLICT, Code::RangeUnknown),
            // The broker's view of the replica set is out of date: re-read and retry.
            Failure::NotReplica { .. } => (StatusCode::CONFLICT, Code::Conflict),
            Failure::NotLeader => (StatusCode::SERVICE_UNAVAILABLE, Code::NotLeader),
            Failure::RouteNotFound(_) => (StatusCode::NOT_FOUND, Code::RouteNotFound),
            Failure::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, Code::RouteNotFound),
            Failure::Conflict(_) => (StatusCode::CONFLICT, Code::Conflict),
            Failure::LimitExceeded(_) => (StatusCode::TOO_MANY_REQUESTS, Code::LimitExceeded),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, code) = self.status();
        if matches!(code, ApiErrorCode::Internal | ApiErrorCode::Unavailable) {
            tracing::warn!(error = %floe_wire::ErrorChain(&self), "API call failed");
        }
        // The failure itself, never its causes: a database error may name the server's
        // files or its connection string. The log above has the whole chain.
        let mut message = self.to_string();
        if let Failure::Store(StoreError::Backend { .. }) = &self {
            message = format!("{message}; retry, or see the controlplane's log");
        }
        (status, axum::Json(ApiError { code, message })).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_database_is_reported_without_its_causes() {
        let cause = std::io::Error::other("cannot open /var/lib/floe/controlplane.db");
        let failure = Failure::Store(StoreError::Backend {
            source: sqlx::Error::Io(cause),
        });
        let response = failure.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("body");
        let error: ApiError = serde_json::from_slice(&body).expect("an API error");
        assert_eq!(error.code, ApiErrorCode::Unavailable);
        assert!(
            error.message.starts_with("the metadata store failed") && !error.message.contains('/'),
            "{}",
            error.message
        );
    }
}
