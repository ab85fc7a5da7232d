//! The document's consumer groups: members, their heartbeats, offsets, resets.

use serde_json::{Value, json};

use super::{
    Schemas, array, name_schema, nullable, object, operation, path_parameter, reference,
    string_enum, u32_schema, u64_schema,
};

/// A member id: hex, as the controlplane makes them.
fn member_id() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[0-9a-f]+$" })
}

fn slot() -> Value {
    object(
        &[("stream", name_schema()), ("partition", u32_schema())],
        &["stream", "partition"],
        true,
    )
}

pub(super) fn schemas() -> Schemas {
    [summary_schemas(), offset_change_schemas(), member_schemas()]
        .into_iter()
        .flatten()
        .collect()
}

/// Groups and the offsets they committed, as read.
fn summary_schemas() -> Schemas {
    vec![
        (
            "GroupSummary",
            object(
                &[
                    ("group", name_schema()),
                    ("streams", u32_schema()),
                    ("partitions", u32_schema()),
                    ("members", u32_schema()),
                ],
                &["group", "streams", "partitions", "members"],
                false,
            ),
        ),
        (
            "GroupList",
            object(
                &[("groups", array(reference("GroupSummary")))],
                &["groups"],
                false,
            ),
        ),
        (
            "CommittedOffset",
            object(
                &[
                    ("stream", name_schema()),
                    ("partition", u32_schema()),
                    ("offset", u64_schema()),
                    ("updated_at_ms", u64_schema()),
                ],
                &["stream", "partition", "offset", "updated_at_ms"],
                false,
            ),
        ),
        (
            "GroupOffsets",
            object(
                &[
                    ("group", name_schema()),
                    ("offsets", array(reference("CommittedOffset"))),
                ],
                &["group", "offsets"],
                false,
            ),
        ),
        (
            "GroupPartitionState",
            object(
                &[
                    ("stream", name_schema()),
                    ("partition", u32_schema()),
                    ("committed", nullable(u64_schema())),
                    ("high_watermark", nullable(u64_schema())),
                    ("lag", nullable(u64_schema())),
                    ("member", nullable(member_id())),
                ],
                &["stream", "partition"],
                false,
            ),
        ),
        (
            "GroupMember",
            object(
                &[
                    ("member_id", member_id()),
                    ("client_id", json!({ "type": "string", "maxLength": 255 })),
                    ("streams", array(name_schema())),
                    ("partitions", array(reference("GroupPartition"))),
                    ("session_timeout_ms", u64_schema()),
                    ("last_heartbeat_ms", u64_schema()),
                ],
                &[
                    "member_id",
                    "streams",
                    "partitions",
                    "session_timeout_ms",
                    "last_heartbeat_ms",
                ],
                false,
            ),
        ),
        (
            "GroupDescription",
            object(
                &[
                    ("group", name_schema()),
                    ("state", string_enum(&["empty", "stable", "rebalancing"])),
                    ("generation", u64_schema()),
                    ("members", array(reference("GroupMember"))),
                    ("partitions", array(reference("GroupPartitionState"))),
                ],
                &["group", "state", "generation", "members", "partitions"],
                false,
            ),
        ),
    ]
}

/// Committing a group's offsets, and moving them.
fn offset_change_schemas() -> Schemas {
    let commit = object(
        &[
            ("stream", name_schema()),
            ("partition", u32_schema()),
            ("offset", u64_schema()),
        ],
        &["stream", "partition", "offset"],
        true,
    );
    let target = json!({ "oneOf": [
        object(&[("kind", json!({ "const": "earliest" }))], &["kind"], true),
        object(&[("kind", json!({ "const": "latest" }))], &["kind"], true),
        object(
            &[("kind", json!({ "const": "offset" })), ("offset", u64_schema())],
            &["kind", "offset"],
            true,
        ),
    ]});
    vec![
        ("OffsetCommit", commit),
        (
            "MemberGeneration",
            object(
                &[("member_id", member_id()), ("generation", u64_schema())],
                &["member_id", "generation"],
                true,
            ),
        ),
        (
            "CommitOffsetsRequest",
            object(
                &[
                    ("offsets", array(reference("OffsetCommit"))),
                    ("member", reference("MemberGeneration")),
                ],
                &["offsets"],
                true,
            ),
        ),
        ("ResetTarget", target),
        (
            "ResetOffsetsRequest",
            object(
                &[
                    ("stream", name_schema()),
                    ("partitions", array(u32_schema())),
                    ("to", reference("ResetTarget")),
                    ("force", json!({ "type": "boolean" })),
                ],
                &["stream", "to"],
                true,
            ),
        ),
    ]
}

/// Joining, heartbeating, and what a member is told.
fn member_schemas() -> Schemas {
    let slots = array(reference("GroupPartition"));
    vec![
        ("GroupPartition", slot()),
        (
            "JoinGroupRequest",
            object(
                &[
                    (
                        "streams",
                        json!({ "type": "array", "items": name_schema(), "minItems": 1,
                                "maxItems": 100 }),
                    ),
                    (
                        "session_timeout_ms",
                        json!({ "type": "integer", "minimum": 500, "maximum": 300_000 }),
                    ),
                    ("client_id", json!({ "type": "string", "maxLength": 255 })),
                ],
                &["streams"],
                true,
            ),
        ),
        (
            "MemberHeartbeat",
            object(
                &[("owned", slots.clone()), ("wait_ms", u64_schema())],
                &["owned"],
                true,
            ),
        ),
        (
            "Membership",
            object(
                &[
                    ("group", name_schema()),
                    ("member_id", member_id()),
                    ("generation", u64_schema()),
                    ("session_timeout_ms", u64_schema()),
                    ("heartbeat_interval_ms", u64_schema()),
                    ("assignment", slots.clone()),
                    ("pending", slots),
                ],
                &[
                    "group",
                    "member_id",
                    "generation",
                    "session_timeout_ms",
                    "heartbeat_interval_ms",
                    "assignment",
                    "pending",
                ],
                false,
            ),
        ),
    ]
}

pub(super) fn paths() -> Value {
    let group = path_parameter("group", name_schema());
    let member = path_parameter("member", member_id());
    json!({
        "/v1/groups": { "get": operation("List consumer groups", vec![], None, 200, Some("GroupList")) },
        "/v1/groups/{group}": {
            "get": operation("A group's members, and per partition its committed offset, high \
                watermark, lag and member", vec![group.clone()], None, 200,
                Some("GroupDescription")),
            "delete": operation("Delete a group's committed offsets; refused while it has live \
                members", vec![group.clone()], None, 204, None),
        },
        "/v1/groups/{group}/members": {
            "post": operation("Join the group as a new member", vec![group.clone()],
                Some("JoinGroupRequest"), 200, Some("Membership")),
        },
        "/v1/groups/{group}/members/{member}/heartbeat": {
            "post": operation("A member is alive: give up what it no longer lists, learn what \
                to read (waits up to wait_ms for a change)", vec![group.clone(), member.clone()],
                Some("MemberHeartbeat"), 200, Some("Membership")),
        },
        "/v1/groups/{group}/members/{member}": {
            "delete": operation("Leave the group; its partitions go to the others",
                vec![group.clone(), member], None, 204, None),
        },
        "/v1/groups/{group}/offsets": {
            "get": operation("A group's committed offsets", vec![group.clone()], None, 200,
                Some("GroupOffsets")),
            "post": operation("Commit offsets, all or none: as the member reading them, or by \
                anyone while the group has no live members", vec![group.clone()],
                Some("CommitOffsetsRequest"), 200, Some("GroupOffsets")),
        },
        "/v1/groups/{group}/reset": {
            "post": operation("Move a group's offsets in one stream; refused while it has live \
                members unless force", vec![group], Some("ResetOffsetsRequest"), 200,
                Some("GroupOffsets")),
        },
    })
}
