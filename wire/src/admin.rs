//! The controlplane's REST API types: the JSON bodies of `/v1/...` requests and responses.
//!
//! The controlplane serves them, brokers and the `floe` CLI send and read them; no other
//! crate defines its own. Field names are the JSON names. Every request type refuses unknown
//! fields, so a typo is an error rather than a silently ignored setting. Plain data: no I/O,
//! no validation beyond what the field types parse (the controlplane checks ranges and answers
//! `422` with an [`ApiErrorCode`]).

mod broker;
mod error;
mod group;
mod health;
mod peer_certificate;
mod principal;
mod read_replica;
mod stream;

pub use broker::{
    Assignments, BrokerInfo, BrokerList, BrokerState, CorruptReplica, CorruptReport,
    ElectionOutcome, ElectionReport, HeartbeatRequest, HeartbeatResponse, PartitionAssignment,
    PartitionReport, RegisterBrokerRequest, RegisterBrokerResponse, ReplicaLag, StreamAssignment,
};
pub use error::{ApiError, ApiErrorCode};
pub use group::{
    CommitOffsetsRequest, CommittedOffset, GroupDescription, GroupList, GroupMember, GroupOffsets,
    GroupPartition, GroupPartitionState, GroupState, GroupSummary, JoinGroupRequest,
    MemberGeneration, MemberHeartbeat, Membership, OffsetCommit, ResetOffsetsRequest, ResetTarget,
};
pub use health::{Build, Health, Readiness, Role};
pub use peer_certificate::{MAX_CSR_PEM_LEN, PeerCertificate, PeerCertificateRequest};
pub use principal::{
    CreatePrincipalRequest, CreatedToken, PrincipalInfo, PrincipalList, TokenInfo, WhoAmI,
};
pub use read_replica::{
    MAX_READ_REPLICA_ID_LEN, ReadReplicaHeartbeat, ReadReplicaHeartbeatResponse, ReadReplicaInfo,
    ReadReplicaList, ReadReplicaState, RegisterReadReplicaRequest, RegisterReadReplicaResponse,
    ScalingPolicy, valid_read_replica_id,
};
pub use stream::{
    AlterRetentionRequest, AlterStreamRequest, Change, CreateStreamRequest, MAX_SEGMENT_BYTES,
    OffsetRange, PartitionDescription, RetentionChange, RetentionSettings, SegmentChange,
    SegmentSettings, StreamConfig, StreamDescription, StreamInfo, StreamList,
};
