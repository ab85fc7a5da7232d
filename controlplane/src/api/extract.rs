//! Request extractors whose rejections are JSON [`Failure`]s: a malformed request is always a
//! 4xx with `{code, message}`, never axum's plain-text rejection.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::api::error::Failure;

/// A JSON body: syntax errors are 400, a missing `application/json` is 415, a body that does
/// not fit the type is 422.
#[derive(Debug)]
pub(crate) struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Failure;

    async fn from_request(request: Request, state: &S) -> Result<Body<T>, Failure> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(JsonRejection::JsonDataError(error)) => Err(Failure::Invalid(error.body_text())),
            Err(JsonRejection::JsonSyntaxError(error)) => {
                Err(Failure::BadRequest(error.body_text()))
            }
            Err(JsonRejection::MissingJsonContentType(error)) => {
                Err(Failure::UnsupportedMediaType(error.body_text()))
            }
            Err(other) => Err(Failure::Rejected {
                status: other.status(),
                message: other.body_text(),
            }),
        }
    }
}

/// Path parameters; a value that does not parse is 400.
#[derive(Debug)]
pub(crate) struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<PathParams<T>, Failure> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathParams(value))
            .map_err(|error| Failure::BadRequest(error.body_text()))
    }
}

/// Query parameters; a value that does not parse is 400.
#[derive(Debug)]
pub(crate) struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<QueryParams<T>, Failure> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|error| Failure::BadRequest(error.body_text()))
    }
}
