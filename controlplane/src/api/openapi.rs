//! The OpenAPI 3.1 document of the API, served at `/v1/openapi.json`.
//!
//! Written by hand here rather than derived: deriving it (e.g. with `utoipa`) would put a
//! proc-macro dependency and schema attributes into `floe-wire`, which must stay a plain
//! formats crate. Tests keep it honest: its paths must be exactly [`crate::api::ROUTES`], every
//! route answers over HTTP, and `scripts/api-fuzz.sh` (schemathesis) checks every response
//! of the real server against it.

mod groups;
mod principals;

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use floe_wire::AckMode;
use serde_json::{Value, json};

/// The document, built once.
pub(crate) static DOCUMENT: LazyLock<Value> = LazyLock::new(document);

pub(super) async fn serve() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.to_string(),
    )
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn nullable(schema: Value) -> Value {
    json!({ "anyOf": [schema, { "type": "null" }] })
}

fn u32_schema() -> Value {
    json!({ "type": "integer", "minimum": 0, "maximum": u32::MAX })
}

/// A u64 that the store can hold: at most `i64::MAX`.
fn u64_schema() -> Value {
    json!({ "type": "integer", "minimum": 0, "maximum": i64::MAX })
}

fn name_schema() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[A-Za-z0-9._-]+$" })
}

fn endpoint_schema() -> Value {
    json!({ "type": "string", "maxLength": 255,
            "pattern": "^([A-Za-z0-9._-]+|\\[[0-9A-Fa-f:.]+\\]):[1-9][0-9]{0,4}$" })
}

/// A setting that, when present, is from 1 to `i64::MAX`.
fn setting_schema() -> Value {
    json!({ "type": "integer", "minimum": 1, "maximum": i64::MAX })
}

fn bounded(minimum: u64, maximum: u64) -> Value {
    json!({ "type": "integer", "minimum": minimum, "maximum": maximum })
}

/// An object schema; `required` lists the fields that must be present. Request bodies are
/// closed (unknown fields are refused).
fn object(fields: &[(&str, Value)], required: &[&str], closed: bool) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), schema.clone()))
        .collect();
    let mut schema = json!({ "type": "object", "properties": properties, "required": required });
    if closed {
        schema["additionalProperties"] = json!(false);
    }
    schema
}

fn array(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}

fn string_enum(values: &[&str]) -> Value {
    json!({ "type": "string", "enum": values })
}

fn error_codes() -> Value {
    string_enum(&[
        "bad_request",
        "unsupported_media_type",
        "invalid_argument",
        "unauthorized",
        "forbidden",
        "principal_not_found",
        "principal_exists",
        "stream_not_found",
        "broker_not_found",
        "group_not_found",
        "partition_not_found",
        "read_replica_not_found",
        "route_not_found",
        "stream_exists",
        "lease_expired",
        "conflict",
        "range_unknown",
        "unknown_member",
        "stale_generation",
        "partition_not_assigned",
        "group_not_empty",
        "limit_exceeded",
        "not_leader",
        "unavailable",
        "internal",
    ])
}

/// Named schemas, as `components.schemas` lists them.
type Schemas = Vec<(&'static str, Value)>;

/// The failure every route may answer with.
fn error_schemas() -> Schemas {
    vec![(
        "ApiError",
        object(
            &[
                ("code", error_codes()),
                ("message", json!({ "type": "string" })),
            ],
            &["code", "message"],
            false,
        ),
    )]
}

/// A program's version and commit, 1 to 64 printable ASCII characters each.
fn build_schema() -> Value {
    let text = json!({ "type": "string", "pattern": "^[!-~]{1,64}$" });
    object(
        &[("version", text.clone()), ("commit", text)],
        &["version", "commit"],
        true,
    )
}

/// `/v1/health` and `/v1/ready`.
fn probe_schemas() -> Schemas {
    vec![
        (
            "Health",
            object(
                &[
                    ("status", json!({ "const": "ok" })),
                    ("build", reference("Build")),
                ],
                &["status"],
                false,
            ),
        ),
        ("Build", build_schema()),
        (
            "Readiness",
            object(
                &[
                    ("ready", json!({ "type": "boolean" })),
                    ("role", string_enum(&["leader", "standby"])),
                ],
                &["ready", "role"],
                false,
            ),
        ),
    ]
}

/// A stream's configuration: ack mode, segment and retention settings.
fn stream_config_schemas() -> Schemas {
    let segment = object(
        &[
            ("bytes", bounded(1, floe_wire::admin::MAX_SEGMENT_BYTES)),
            ("age_ms", setting_schema()),
        ],
        &[],
        true,
    );
    let retention = object(
        &[
            ("local_bytes", setting_schema()),
            ("local_ms", setting_schema()),
            ("tier_bytes", setting_schema()),
            ("tier_ms", setting_schema()),
        ],
        &[],
        true,
    );
    let config = object(
        &[
            ("partitions", u32_schema()),
            ("replication_factor", u32_schema()),
            ("ack_mode", reference("AckMode")),
            ("segment", reference("SegmentSettings")),
            ("retention", reference("RetentionSettings")),
        ],
        &[
            "partitions",
            "replication_factor",
            "ack_mode",
            "segment",
            "retention",
        ],
        false,
    );
    vec![
        ("AckMode", string_enum(&AckMode::ALL.map(AckMode::as_str))),
        ("SegmentSettings", segment),
        ("RetentionSettings", retention),
        ("StreamConfig", config),
        ("AlterStreamRequest", alter_stream_request()),
    ]
}

/// `PATCH /v1/streams/{name}`: absent keeps a setting, `null` returns it to its default.
fn alter_stream_request() -> Value {
    let segment = object(
        &[
            (
                "bytes",
                nullable(bounded(1, floe_wire::admin::MAX_SEGMENT_BYTES)),
            ),
            ("age_ms", nullable(setting_schema())),
        ],
        &[],
        true,
    );
    let retention = object(
        &[
            ("local_bytes", nullable(setting_schema())),
            ("local_ms", nullable(setting_schema())),
            ("tier_bytes", nullable(setting_schema())),
            ("tier_ms", nullable(setting_schema())),
        ],
        &[],
        true,
    );
    object(
        &[
            ("ack_mode", reference("AckMode")),
            ("segment", segment),
            ("retention", retention),
            // Refused with the reason: fixed for a stream's life.
            ("partitions", u32_schema()),
            ("replication_factor", u32_schema()),
        ],
        &[],
        true,
    )
}

/// Creating and listing streams.
fn stream_schemas() -> Schemas {
    vec![
        (
            "CreateStreamRequest",
            object(
                &[
                    ("name", name_schema()),
                    ("partitions", bounded(1, 100_000)),
                    ("replication_factor", bounded(1, 16)),
                    ("ack_mode", reference("AckMode")),
                    ("segment", reference("SegmentSettings")),
                    ("retention", reference("RetentionSettings")),
                ],
                &["name", "partitions"],
                true,
            ),
        ),
        (
            "StreamInfo",
            object(
                &[
                    ("name", name_schema()),
                    ("config", reference("StreamConfig")),
                    ("created_at_ms", u64_schema()),
                ],
                &["name", "config", "created_at_ms"],
                false,
            ),
        ),
        (
            "StreamList",
            object(
                &[("streams", array(reference("StreamInfo")))],
                &["streams"],
                false,
            ),
        ),
    ]
}

/// Describing a stream: its partitions as their leaders last reported them.
fn stream_description_schemas() -> Schemas {
    let range = object(
        &[("start", u64_schema()), ("end", u64_schema())],
        &["start", "end"],
        false,
    );
    vec![
        ("OffsetRange", range),
        (
            "ReplicaLag",
            object(
                &[("broker_id", u32_schema()), ("records", u64_schema())],
                &["broker_id", "records"],
                true,
            ),
        ),
        ("PartitionDescription", partition_description()),
        (
            "StreamDescription",
            object(
                &[
                    ("name", name_schema()),
                    ("config", reference("StreamConfig")),
                    ("created_at_ms", u64_schema()),
                    ("partitions", array(reference("PartitionDescription"))),
                ],
                &["name", "config", "created_at_ms", "partitions"],
                false,
            ),
        ),
    ]
}

fn partition_description() -> Value {
    object(
        &[
            ("partition", u32_schema()),
            ("replicas", array(u32_schema())),
            ("leader", nullable(u32_schema())),
            ("epoch", u64_schema()),
            ("electing", json!({ "type": "boolean" })),
            ("hot", nullable(reference("OffsetRange"))),
            ("tier", nullable(reference("OffsetRange"))),
            ("bytes", nullable(u64_schema())),
            ("upload_backlog_bytes", nullable(u64_schema())),
            ("high_watermark", nullable(u64_schema())),
            ("replica_lag", array(reference("ReplicaLag"))),
            ("previous_replicas", array(u32_schema())),
            ("corrupt", array(reference("CorruptReplica"))),
        ],
        &[
            "partition",
            "replicas",
            "leader",
            "epoch",
            "hot",
            "tier",
            "bytes",
            "upload_backlog_bytes",
        ],
        false,
    )
}

/// A broker registering, then renewing its lease with a heartbeat that reports its
/// partitions.
fn broker_lease_schemas() -> Schemas {
    vec![
        ("BrokerState", string_enum(&["live", "draining", "dead"])),
        (
            "RegisterBrokerRequest",
            object(
                &[
                    ("broker_id", u32_schema()),
                    ("client_endpoint", endpoint_schema()),
                    ("peer_endpoint", endpoint_schema()),
                    (
                        "zone",
                        json!({ "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$" }),
                    ),
                    ("build", reference("Build")),
                ],
                &["client_endpoint", "peer_endpoint"],
                true,
            ),
        ),
        (
            "PeerCertificateRequest",
            object(
                &[(
                    "csr_pem",
                    json!({ "type": "string", "maxLength": floe_wire::admin::MAX_CSR_PEM_LEN,
                        "description": "a PKCS#10 certificate signing request (PEM); only \
                        its public key is used" }),
                )],
                &["csr_pem"],
                true,
            ),
        ),
        (
            "PeerCertificate",
            object(
                &[
                    ("certificate_pem", json!({ "type": "string" })),
                    ("not_after_ms", u64_schema()),
                ],
                &["certificate_pem", "not_after_ms"],
                false,
            ),
        ),
        (
            "RegisterBrokerResponse",
            object(
                &[
                    ("broker_id", u32_schema()),
                    ("lease_ms", u64_schema()),
                    ("heartbeat_interval_ms", u64_schema()),
                ],
                &["broker_id", "lease_ms", "heartbeat_interval_ms"],
                false,
            ),
        ),
        ("PartitionReport", partition_report()),
        (
            "HeartbeatRequest",
            object(
                &[
                    ("partitions", array(reference("PartitionReport"))),
                    ("history_read_bytes_per_second", u64_schema()),
                    ("corrupt", array(reference("CorruptReport"))),
                ],
                &[],
                true,
            ),
        ),
        (
            "CorruptReport",
            corrupt_schema(&[("stream", name_schema()), ("partition", u32_schema())]),
        ),
        (
            "CorruptReplica",
            corrupt_schema(&[("broker_id", u32_schema())]),
        ),
        (
            "HeartbeatResponse",
            object(
                &[
                    ("state", reference("BrokerState")),
                    ("lease_ms", u64_schema()),
                    ("assignment_version", u64_schema()),
                ],
                &["state", "lease_ms", "assignment_version"],
                false,
            ),
        ),
    ]
}

/// A partition held in the `corrupt` state: `first`, then where its log is damaged.
fn corrupt_schema(first: &[(&str, Value)]) -> Value {
    let mut properties: Vec<(&str, Value)> = first.to_vec();
    let mut required: Vec<&str> = first
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| *name != "epoch")
        .collect();
    properties.extend([
        ("segment", json!({ "type": "string", "maxLength": 255 })),
        ("position", u64_schema()),
        ("damaged_start", u64_schema()),
        ("damaged_end", u64_schema()),
        ("reason", json!({ "type": "string", "maxLength": 4096 })),
    ]);
    required.extend(["segment", "position", "reason"]);
    object(&properties, &required, true)
}

/// A leader's report on one partition, sent with its heartbeat.
fn partition_report() -> Value {
    object(
        &[
            ("stream", name_schema()),
            ("partition", u32_schema()),
            ("epoch", u64_schema()),
            ("hot", reference("OffsetRange")),
            ("tier", reference("OffsetRange")),
            ("bytes", u64_schema()),
            ("upload_backlog_bytes", u64_schema()),
            ("high_watermark", u64_schema()),
            (
                "replica_lag",
                json!({ "type": "array", "items": reference("ReplicaLag"), "maxItems": 16 }),
            ),
            (
                "new_set_caught_up",
                json!({ "type": "array", "items": u32_schema(), "maxItems": 16 }),
            ),
            ("quorum_lost", json!({ "type": "boolean" })),
        ],
        &[
            "stream",
            "partition",
            "epoch",
            "bytes",
            "upload_backlog_bytes",
        ],
        true,
    )
}

/// Listing brokers (and what draining one answers).
fn broker_list_schemas() -> Schemas {
    vec![
        (
            "BrokerInfo",
            object(
                &[
                    ("broker_id", u32_schema()),
                    ("client_endpoint", endpoint_schema()),
                    ("peer_endpoint", endpoint_schema()),
                    ("zone", nullable(json!({ "type": "string" }))),
                    ("state", reference("BrokerState")),
                    ("lease_expires_at_ms", u64_schema()),
                    ("replicas", u32_schema()),
                    ("leaders", u32_schema()),
                    ("build", reference("Build")),
                ],
                &[
                    "broker_id",
                    "client_endpoint",
                    "peer_endpoint",
                    "zone",
                    "state",
                    "lease_expires_at_ms",
                    "replicas",
                    "leaders",
                ],
                false,
            ),
        ),
        (
            "BrokerList",
            object(
                &[("brokers", array(reference("BrokerInfo")))],
                &["brokers"],
                false,
            ),
        ),
    ]
}

/// A broker's assignments: the partitions it holds a replica of, by stream.
fn assignment_schemas() -> Schemas {
    let partition_assignment = object(
        &[
            ("partition", u32_schema()),
            ("replicas", array(u32_schema())),
            ("leader", nullable(u32_schema())),
            ("epoch", u64_schema()),
            ("electing", json!({ "type": "boolean" })),
            ("previous_replicas", array(u32_schema())),
        ],
        &["partition", "replicas", "leader", "epoch"],
        false,
    );
    vec![
        ("PartitionAssignment", partition_assignment),
        (
            "StreamAssignment",
            object(
                &[
                    ("name", name_schema()),
                    ("config", reference("StreamConfig")),
                    ("created_at_ms", u64_schema()),
                    ("partitions", array(reference("PartitionAssignment"))),
                ],
                &["name", "config", "created_at_ms", "partitions"],
                false,
            ),
        ),
        (
            "Assignments",
            object(
                &[
                    ("broker_id", u32_schema()),
                    ("version", u64_schema()),
                    ("streams", array(reference("StreamAssignment"))),
                ],
                &["broker_id", "version", "streams"],
                false,
            ),
        ),
    ]
}

/// A replica's report for the election of its partition's leader.
fn election_schemas() -> Schemas {
    vec![
        ("ElectionOutcome", election_outcome()),
        (
            "ElectionReport",
            object(
                &[
                    ("stream", name_schema()),
                    ("partition", u32_schema()),
                    ("epoch", u64_schema()),
                    ("outcome", reference("ElectionOutcome")),
                ],
                &["stream", "partition", "epoch", "outcome"],
                true,
            ),
        ),
    ]
}

/// `reported` (the replica promised the epoch; where its durable log ends) or `refused`.
fn election_outcome() -> Value {
    let kind = |name: &str| json!({ "type": "string", "const": name });
    json!({ "oneOf": [
        object(
            &[("kind", kind("reported")), ("last_epoch", u64_schema()), ("end", u64_schema())],
            &["kind", "last_epoch", "end"],
            true,
        ),
        object(
            &[("kind", kind("refused")), ("promised", u64_schema())],
            &["kind", "promised"],
            true,
        ),
    ] })
}

/// Listing read replicas (and what draining one answers).
fn read_replica_list_schemas() -> Schemas {
    vec![
        (
            "ReadReplicaState",
            string_enum(&["live", "draining", "dead"]),
        ),
        (
            "ReadReplicaInfo",
            object(
                &[
                    ("replica_id", json!({ "type": "string" })),
                    ("endpoint", endpoint_schema()),
                    ("zone", nullable(json!({ "type": "string" }))),
                    ("state", reference("ReadReplicaState")),
                    ("lease_expires_at_ms", u64_schema()),
                    ("bytes_served_per_second", u64_schema()),
                    ("consumers", u32_schema()),
                    ("fetch_latency_p99_us", u64_schema()),
                    ("cache_hit_ratio_permille", bounded(0, 1000)),
                    ("build", reference("Build")),
                ],
                &[
                    "replica_id",
                    "endpoint",
                    "zone",
                    "state",
                    "lease_expires_at_ms",
                    "bytes_served_per_second",
                    "consumers",
                    "fetch_latency_p99_us",
                    "cache_hit_ratio_permille",
                ],
                false,
            ),
        ),
        (
            "ReadReplicaList",
            object(
                &[("replicas", array(reference("ReadReplicaInfo")))],
                &["replicas"],
                false,
            ),
        ),
    ]
}

/// The read-replica scaling policy.
fn scaling_policy_schemas() -> Schemas {
    let policy_fields = [
        ("min_replicas", u32_schema()),
        ("max_replicas", u32_schema()),
        ("target_bytes_per_second", u64_schema()),
        ("target_consumers", u32_schema()),
        ("hysteresis_percent", bounded(0, 100)),
        ("scale_up_cooldown_ms", u64_schema()),
        ("scale_down_cooldown_ms", u64_schema()),
    ];
    let policy_names: Vec<&str> = policy_fields.iter().map(|(name, _)| *name).collect();
    vec![("ScalingPolicy", object(&policy_fields, &policy_names, true))]
}

fn replica_id_schema() -> Value {
    json!({ "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$" })
}

/// A read replica registering, then renewing its lease with a heartbeat that reports its
/// load.
fn read_replica_lease_schemas() -> Schemas {
    vec![
        (
            "RegisterReadReplicaRequest",
            object(
                &[
                    ("replica_id", replica_id_schema()),
                    ("endpoint", endpoint_schema()),
                    (
                        "zone",
                        json!({ "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$" }),
                    ),
                    ("build", reference("Build")),
                ],
                &["endpoint"],
                true,
            ),
        ),
        (
            "RegisterReadReplicaResponse",
            object(
                &[
                    ("replica_id", json!({ "type": "string" })),
                    ("lease_ms", u64_schema()),
                    ("heartbeat_interval_ms", u64_schema()),
                ],
                &["replica_id", "lease_ms", "heartbeat_interval_ms"],
                false,
            ),
        ),
        (
            "ReadReplicaHeartbeat",
            object(
                &[
                    ("bytes_served_per_second", u64_schema()),
                    ("consumers", u32_schema()),
                    ("fetch_latency_p99_us", u64_schema()),
                    ("cache_hit_ratio_permille", bounded(0, 1000)),
                    ("build", reference("Build")),
                ],
                &[],
                true,
            ),
        ),
        (
            "ReadReplicaHeartbeatResponse",
            object(
                &[
                    ("state", reference("ReadReplicaState")),
                    ("lease_ms", u64_schema()),
                ],
                &["state", "lease_ms"],
                false,
            ),
        ),
    ]
}

fn path_parameter(name: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "path", "required": true, "schema": schema })
}

fn query_parameter(name: &str, schema: Value, description: &str) -> Value {
    json!({ "name": name, "in": "query", "required": false, "schema": schema,
            "description": description })
}

/// One operation: parameters, an optional JSON body, the success status and its schema
/// (`None` for no content); every failure is an `ApiError`.
fn operation(
    summary: &str,
    parameters: Vec<Value>,
    body: Option<&str>,
    status: u16,
    response: Option<&str>,
) -> Value {
    let success = match response {
        Some(schema) => json!({ "description": summary,
            "content": { "application/json": { "schema": reference(schema) } } }),
        None => json!({ "description": summary }),
    };
    let mut operation = json!({
        "summary": summary,
        "parameters": parameters,
        "responses": {
            status.to_string(): success,
            "default": { "description": "failure", "content": { "application/json": {
                "schema": reference("ApiError") } } },
        },
    });
    if let Some(body) = body {
        operation["requestBody"] = json!({ "required": true,
            "content": { "application/json": { "schema": reference(body) } } });
    }
    operation
}

fn paths() -> Value {
    let mut paths = serde_json::Map::new();
    for group in [
        probe_paths(),
        stream_paths(),
        broker_paths(),
        groups::paths(),
        read_replica_paths(),
        principals::paths(),
    ] {
        // Each group is a JSON object literal.
        if let Value::Object(group) = group {
            paths.extend(group);
        }
    }
    let mut paths = Value::Object(paths);
    principals::secure(&mut paths);
    paths
}

/// Health, readiness and this document.
fn probe_paths() -> Value {
    json!({
        "/v1/health": { "get": operation("The process serves HTTP", vec![], None, 200, Some("Health")) },
        "/v1/ready": { "get": {
            "summary": "Whether this controlplane leads (200) or stands by (503)",
            "responses": {
                "200": { "description": "leader", "content": { "application/json": {
                    "schema": reference("Readiness") } } },
                "503": { "description": "standby", "content": { "application/json": {
                    "schema": reference("Readiness") } } },
            },
        } },
        "/v1/openapi.json": { "get": {
            "summary": "This document",
            "responses": { "200": { "description": "the OpenAPI document",
                "content": { "application/json": { "schema": { "type": "object" } } } } },
        } },
    })
}

fn stream_paths() -> Value {
    let name = path_parameter("name", name_schema());
    let delete = operation(
        "Delete a stream and its data",
        vec![name.clone()],
        None,
        204,
        None,
    );
    json!({
        "/v1/streams": {
            "get": operation("List streams", vec![], None, 200, Some("StreamList")),
            "post": operation("Create a stream and place its partitions", vec![],
                Some("CreateStreamRequest"), 201, Some("StreamInfo")),
        },
        "/v1/streams/{name}": {
            "get": operation("Describe a stream and its partitions", vec![name.clone()], None, 200,
                Some("StreamDescription")),
            "patch": operation("Change a live stream's ack mode, segment or retention settings \
                (absent: kept; null: the default)", vec![name.clone()],
                Some("AlterStreamRequest"), 200, Some("StreamInfo")),
            "delete": delete,
        },
        "/v1/streams/{name}/retention": {
            "put": operation("Replace a stream's retention", vec![name], Some("RetentionSettings"),
                200, Some("StreamInfo")),
        },
    })
}

fn broker_paths() -> Value {
    let broker = path_parameter("broker_id", u32_schema());
    let drain = operation(
        "Drain a broker: no new replicas, its replicas move away",
        vec![broker.clone()],
        None,
        200,
        Some("BrokerInfo"),
    );
    let undrain = operation(
        "End a broker's drain: it may take replicas and lead again (not a dead broker)",
        vec![broker.clone()],
        None,
        200,
        Some("BrokerInfo"),
    );
    json!({
        "/v1/brokers": {
            "get": operation("List brokers", vec![], None, 200, Some("BrokerList")),
            "post": operation("Register a broker and take a lease", vec![],
                Some("RegisterBrokerRequest"), 200, Some("RegisterBrokerResponse")),
        },
        "/v1/brokers/{broker_id}/heartbeat": {
            "post": operation("Renew a broker's lease and report its partitions",
                vec![broker.clone()], Some("HeartbeatRequest"), 200, Some("HeartbeatResponse")),
        },
        "/v1/brokers/{broker_id}/peer-certificate": {
            "post": operation("Issue a short-lived peer-port certificate naming the broker \
                (floe:broker:<id>), signed by the cluster's peer CA; 409 when this controlplane \
                holds no peer CA key", vec![broker.clone()], Some("PeerCertificateRequest"),
                200, Some("PeerCertificate")),
        },
        "/v1/brokers/{broker_id}/drain": { "post": drain },
        "/v1/brokers/{broker_id}/undrain": { "post": undrain },
        "/v1/brokers/{broker_id}/assignments": {
            "get": operation("A broker's assignments; long-polls with after_version",
                vec![broker.clone(),
                  query_parameter("after_version", u64_schema(),
                    "answer once the assignment version is above this"),
                  query_parameter("timeout_ms", u64_schema(),
                    "the longest to wait (capped by the controlplane)")],
                None, 200, Some("Assignments")),
        },
        "/v1/brokers/{broker_id}/elections": {
            "post": operation("A replica's report for the election of its partition's leader; \
                ignored unless for the running election", vec![broker],
                Some("ElectionReport"), 204, None),
        },
    })
}

/// Read replicas and their scaling policy.
fn read_replica_paths() -> Value {
    let replica = path_parameter("replica_id", replica_id_schema());
    let drain = operation(
        "Drain a read replica: clients send it no new readers",
        vec![replica.clone()],
        None,
        200,
        Some("ReadReplicaInfo"),
    );
    let delete = operation(
        "A read replica leaves: it is forgotten at once",
        vec![replica.clone()],
        None,
        204,
        None,
    );
    json!({
        "/v1/read-replicas": {
            "get": operation("List read replicas, every state", vec![], None, 200,
                Some("ReadReplicaList")),
            "post": operation("Register a read replica and take a lease", vec![],
                Some("RegisterReadReplicaRequest"), 200, Some("RegisterReadReplicaResponse")),
        },
        "/v1/read-replicas/{replica_id}/heartbeat": {
            "post": operation("Renew a read replica's lease and report its load",
                vec![replica], Some("ReadReplicaHeartbeat"), 200,
                Some("ReadReplicaHeartbeatResponse")),
        },
        "/v1/read-replicas/{replica_id}/drain": { "post": drain },
        "/v1/read-replicas/{replica_id}": { "delete": delete },
        "/v1/scaling-policy": {
            "get": operation("The read-replica scaling policy", vec![], None, 200,
                Some("ScalingPolicy")),
            "put": operation("Replace the read-replica scaling policy", vec![],
                Some("ScalingPolicy"), 200, Some("ScalingPolicy")),
        },
    })
}

fn document() -> Value {
    let schemas: serde_json::Map<String, Value> = [
        error_schemas(),
        probe_schemas(),
        stream_config_schemas(),
        stream_schemas(),
        stream_description_schemas(),
        broker_lease_schemas(),
        broker_list_schemas(),
        assignment_schemas(),
        election_schemas(),
        groups::schemas(),
        read_replica_list_schemas(),
        read_replica_lease_schemas(),
        scaling_policy_schemas(),
        principals::schemas(),
    ]
    .into_iter()
    .flatten()
    .map(|(name, schema)| (name.to_owned(), schema))
    .collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Floe controlplane",
            "version": "1",
            "description": "Administer Floe: streams, brokers, consumer groups, read replicas. \
                Every failure is an ApiError. Every operation but the probes and this \
                document needs a principal's bearer token (unless the controlplane runs with \
                --insecure-no-auth); x-floe-permission says which grant.",
        },
        "paths": paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearerToken": { "type": "http", "scheme": "bearer" } },
        },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::api::ROUTES;

    #[test]
    fn the_document_describes_exactly_the_routes() {
        let documented: BTreeSet<(String, String)> = DOCUMENT["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(path, operations)| {
                operations
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(move |(method, _)| (method.clone(), path.clone()))
            })
            .collect();
        let routed: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(method, path, _)| ((*method).to_owned(), (*path).to_owned()))
            .collect();
        assert_eq!(documented, routed);
    }

    #[test]
    fn every_reference_names_a_schema() {
        let text = DOCUMENT.to_string();
        let schemas = DOCUMENT["components"]["schemas"]
            .as_object()
            .map(|schemas| schemas.keys().cloned().collect::<BTreeSet<_>>())
            .unwrap_or_default();
        let prefix = "#/components/schemas/";
        for piece in text.split(prefix).skip(1) {
            let name: String = piece.chars().take_while(|c| *c != '"').collect();
            assert!(schemas.contains(&name), "dangling reference {name}");
        }
    }
}
