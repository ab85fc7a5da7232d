//! Consumer groups over REST: membership, heartbeats, offsets.

use std::time::Duration;

use floe_wire::admin::{
    CommitOffsetsRequest, GroupDescription, GroupList, GroupOffsets, JoinGroupRequest,
    MemberHeartbeat, Membership, ResetOffsetsRequest,
};
use reqwest::Method;

use super::{CALL_TIMEOUT, Controlplane, RestError, path_segment};

impl Controlplane {
    /// `GET /v1/groups`.
    pub async fn groups(&self) -> Result<GroupList, RestError> {
        self.get("/v1/groups").await
    }

    /// `GET /v1/groups/{group}`.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription, RestError> {
        self.get(&format!("/v1/groups/{}", path_segment(group)))
            .await
    }

    /// `DELETE /v1/groups/{group}`.
    pub async fn delete_group(&self, group: &str) -> Result<(), RestError> {
        let path = format!("/v1/groups/{}", path_segment(group));
        self.call::<serde_json::Value>(Method::DELETE, &path, None, CALL_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// `GET /v1/groups/{group}/offsets`.
    pub async fn group_offsets(&self, group: &str) -> Result<GroupOffsets, RestError> {
        self.get(&format!("/v1/groups/{}/offsets", path_segment(group)))
            .await
    }

    /// `POST /v1/groups/{group}/offsets`.
    pub async fn commit_offsets(
        &self,
        group: &str,
        request: &CommitOffsetsRequest,
    ) -> Result<GroupOffsets, RestError> {
        let path = format!("/v1/groups/{}/offsets", path_segment(group));
        self.send(Method::POST, &path, request).await
    }

    /// `POST /v1/groups/{group}/reset`.
    pub async fn reset_offsets(
        &self,
        group: &str,
        request: &ResetOffsetsRequest,
    ) -> Result<GroupOffsets, RestError> {
        let path = format!("/v1/groups/{}/reset", path_segment(group));
        self.send(Method::POST, &path, request).await
    }

    /// `POST /v1/groups/{group}/members`.
    pub async fn join_group(
        &self,
        group: &str,
        request: &JoinGroupRequest,
    ) -> Result<Membership, RestError> {
        let path = format!("/v1/groups/{}/members", path_segment(group));
        self.send(Method::POST, &path, request).await
    }

    /// `POST /v1/groups/{group}/members/{member}/heartbeat`; waits up to `wait_ms` for a
    /// change when there is nothing to change now, and fails when no answer came within
    /// `patience` past that.
    pub async fn group_heartbeat(
        &self,
        group: &str,
        member: &str,
        request: &MemberHeartbeat,
        patience: Duration,
    ) -> Result<Membership, RestError> {
        let path = format!(
            "/v1/groups/{}/members/{}/heartbeat",
            path_segment(group),
            path_segment(member)
        );
        let body = serde_json::to_vec(request).map_err(|e| RestError::Invalid {
            url: self.url().to_owned(),
            detail: format!("encoding the request: {e}"),
        })?;
        let timeout = patience + Duration::from_millis(request.wait_ms);
        self.expect(Method::POST, &path, Some(body), timeout).await
    }

    /// `DELETE /v1/groups/{group}/members/{member}`.
    pub async fn leave_group(&self, group: &str, member: &str) -> Result<(), RestError> {
        let path = format!(
            "/v1/groups/{}/members/{}",
            path_segment(group),
            path_segment(member)
        );
        self.call::<serde_json::Value>(Method::DELETE, &path, None, CALL_TIMEOUT)
            .await
            .map(|_| ())
    }
}
