//! Proptest strategies for every message of the protocol, built from valid parts.

use bytes::Bytes;
use floe_wire::frame::{
    AuthToken, BatchAck, ConnectionLimits, CreateStream, CreateStreamResponse, DamagedRange,
    DeleteStream, DeleteStreamResponse, ErrorDetails, ErrorResponse, FRAME_OVERHEAD_BYTES, Fetch,
    FetchPosition, FetchResponse, Hello, HelloAck, MAX_FRAME_BYTES, MetadataRequest,
    MetadataResponse, PartitionMetadata, Produce, ProduceAck, ProtocolVersion, RepairPartition,
    RepairPartitionResponse, ReplicaAck, ReplicaAppend, ReplicaMismatch, ReplicaStale, StreamInfo,
    StreamMetadata, StreamSettings, UploadBacklog,
};
use floe_wire::{
    AckMode, BatchBuilder, BrokerId, Endpoint, ErrorCode, LeaderEpoch, Message, Offset,
    PartitionId, StreamName, batch,
};
use proptest::collection::{btree_set, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

pub fn leader_epoch() -> impl Strategy<Value = LeaderEpoch> {
    any::<u32>().prop_map(LeaderEpoch::new)
}

pub fn stream_name() -> impl Strategy<Value = StreamName> {
    prop_oneof![
        4 => "[A-Za-z0-9._-]{1,24}",
        1 => "[A-Za-z0-9._-]{250,255}",
    ]
    .prop_filter_map("reserved names", |text| StreamName::new(text).ok())
}

pub fn endpoint() -> impl Strategy<Value = Endpoint> {
    let host = "[a-z0-9-]{1,20}(\\.[a-z0-9-]{1,12}){0,3}";
    let v6 = "[0-9a-f]{1,4}(:[0-9a-f]{0,4}){1,7}";
    prop_oneof![
        (host, 1..=u16::MAX).prop_map(|(host, port)| format!("{host}:{port}")),
        (v6, 1..=u16::MAX).prop_map(|(host, port)| format!("[{host}]:{port}")),
    ]
    .prop_map(|text| Endpoint::new(text).expect("generated endpoints are valid"))
}

/// Printable text of any script, including multi-byte characters.
pub fn text() -> impl Strategy<Value = String> {
    "\\PC{0,40}"
}

pub fn error_code() -> impl Strategy<Value = ErrorCode> {
    select(ErrorCode::ALL.to_vec())
}

pub fn ack_mode() -> impl Strategy<Value = AckMode> {
    select(AckMode::ALL.to_vec())
}

pub fn offset() -> impl Strategy<Value = Offset> {
    any::<u64>().prop_map(Offset::new)
}

/// A valid record batch: optional producer fields, 1–3 records, optionally stamped.
pub fn record_batch() -> impl Strategy<Value = Bytes> {
    let record = (
        0i64..1_000_000,
        option::of(vec(any::<u8>(), 0..8)),
        vec(any::<u8>(), 0..48),
    );
    (
        option::of((0i64..i64::MAX, any::<u16>(), 0i32..1_000_000)),
        vec(record, 1..4),
        option::of((0u64..=i64::MAX as u64, leader_epoch())),
    )
        .prop_map(|(producer, records, stamp)| {
            let mut builder = BatchBuilder::new(1 << 20);
            if let Some((id, epoch, sequence)) = producer {
                builder.producer(id, epoch, sequence);
            }
            for (delta, key, value) in &records {
                builder
                    .push(1_700_000_000_000 + delta, key.as_deref(), value, &[])
                    .expect("small records fit");
            }
            let mut bytes = builder.finish().expect("at least one record").to_vec();
            if let Some((base, epoch)) = stamp {
                batch::stamp(&mut bytes, Offset::new(base), epoch).expect("header present");
            }
            Bytes::from(bytes)
        })
}

pub fn hello() -> impl Strategy<Value = Hello> {
    (
        any::<u8>(),
        any::<u8>(),
        text(),
        option::of(vec(any::<u8>(), 0..64)),
    )
        .prop_map(|(min_version, max_version, client_name, token)| Hello {
            min_version,
            max_version,
            client_name,
            auth_token: token.map(AuthToken::new),
        })
}

pub fn connection_limits() -> impl Strategy<Value = ConnectionLimits> {
    (batch::HEADER_LEN as u32..=batch::MAX_BATCH_BYTES).prop_flat_map(|max_batch_bytes| {
        (max_batch_bytes + FRAME_OVERHEAD_BYTES..=MAX_FRAME_BYTES).prop_flat_map(
            move |max_frame_bytes| {
                (
                    1..=u32::MAX,
                    u64::from(max_frame_bytes)..=u64::MAX,
                    1..=u16::MAX,
                )
                    .prop_map(
                        move |(max_list_entries, max_in_flight_bytes, max_in_flight_batches)| {
                            ConnectionLimits {
                                max_frame_bytes,
                                max_batch_bytes,
                                max_list_entries,
                                max_in_flight_bytes,
                                max_in_flight_batches,
                            }
                        },
                    )
            },
        )
    })
}

pub fn hello_ack() -> impl Strategy<Value = HelloAck> {
    (any::<u32>(), connection_limits()).prop_map(|(broker_id, limits)| HelloAck {
        version: ProtocolVersion::V1,
        broker_id: BrokerId::new(broker_id),
        limits,
    })
}

pub fn metadata_request() -> impl Strategy<Value = MetadataRequest> {
    vec(stream_name(), 0..6).prop_map(|streams| MetadataRequest { streams })
}

fn partition(id: u32) -> impl Strategy<Value = PartitionMetadata> {
    (
        (option::of(endpoint()), leader_epoch(), offset(), offset()),
        (offset(), offset(), any::<u64>(), any::<u64>()),
        option::of((offset(), option::of(offset()))),
    )
        .prop_map(
            move |(
                (leader, leader_epoch, log_start, high_watermark),
                (local_start, tier_end, segments, bytes),
                damaged,
            )| PartitionMetadata {
                id: PartitionId::new(id),
                leader,
                leader_epoch,
                log_start,
                high_watermark,
                local_start,
                tier_end,
                upload_backlog: UploadBacklog { segments, bytes },
                damaged: damaged.map(|(start, end)| DamagedRange { start, end }),
            },
        )
}

fn stream_settings() -> impl Strategy<Value = StreamSettings> {
    (
        (option::of(any::<u64>()), option::of(any::<u64>())),
        (option::of(any::<u64>()), option::of(any::<u64>())),
        (option::of(any::<u64>()), option::of(any::<u64>())),
    )
        .prop_map(
            |(
                (segment_bytes, segment_age_ms),
                (local_retention_bytes, local_retention_ms),
                (retention_bytes, retention_ms),
            )| StreamSettings {
                segment_bytes,
                segment_age_ms,
                local_retention_bytes,
                local_retention_ms,
                retention_bytes,
                retention_ms,
            },
        )
}

pub fn stream_info() -> impl Strategy<Value = StreamInfo> {
    (ack_mode(), 1..=u32::MAX, stream_settings()).prop_flat_map(
        |(ack_mode, partition_count, settings)| {
            btree_set(0..partition_count, 0..6)
                .prop_flat_map(|ids| ids.into_iter().map(partition).collect::<Vec<_>>())
                .prop_map(move |partitions| StreamInfo {
                    ack_mode,
                    partition_count,
                    settings,
                    partitions,
                })
        },
    )
}

pub fn metadata_response() -> impl Strategy<Value = MetadataResponse> {
    let entry = (
        stream_name(),
        prop_oneof![stream_info().prop_map(Ok), error_code().prop_map(Err)],
    )
        .prop_map(|(name, result)| StreamMetadata { name, result });
    vec(entry, 0..5).prop_map(|streams| MetadataResponse { streams })
}

pub fn create_stream() -> impl Strategy<Value = CreateStream> {
    let settings = stream_settings();
    (stream_name(), 1..=u32::MAX, ack_mode(), settings).prop_map(
        |(name, partition_count, ack_mode, settings)| CreateStream {
            name,
            partition_count,
            ack_mode,
            settings,
        },
    )
}

pub fn create_stream_response() -> impl Strategy<Value = CreateStreamResponse> {
    stream_name().prop_map(|name| CreateStreamResponse { name })
}

pub fn delete_stream() -> impl Strategy<Value = DeleteStream> {
    stream_name().prop_map(|name| DeleteStream { name })
}

pub fn delete_stream_response() -> impl Strategy<Value = DeleteStreamResponse> {
    stream_name().prop_map(|name| DeleteStreamResponse { name })
}

pub fn repair_partition() -> impl Strategy<Value = RepairPartition> {
    (stream_name(), any::<u32>(), option::of(offset())).prop_map(
        |(stream, partition, discard_from)| RepairPartition {
            stream,
            partition: PartitionId::new(partition),
            discard_from,
        },
    )
}

pub fn repair_partition_response() -> impl Strategy<Value = RepairPartitionResponse> {
    (
        (stream_name(), any::<u32>(), any::<bool>(), offset()),
        (any::<u64>(), any::<u32>(), any::<bool>()),
        ("[a-z0-9.]{0,30}", any::<u64>(), "[ -~]{0,60}"),
    )
        .prop_map(
            |(
                (stream, partition, repaired, discard_from),
                (discarded_bytes, discarded_segments, restart),
                (segment, position, damage),
            )| RepairPartitionResponse {
                stream,
                partition: PartitionId::new(partition),
                repaired,
                discard_from,
                discarded_bytes,
                discarded_segments,
                restart,
                segment,
                position,
                damage,
            },
        )
}

pub fn produce() -> impl Strategy<Value = Produce> {
    (stream_name(), any::<u32>(), vec(record_batch(), 1..4)).prop_map(
        |(stream, partition, batches)| Produce {
            stream,
            partition: PartitionId::new(partition),
            batches,
        },
    )
}

pub fn produce_ack() -> impl Strategy<Value = ProduceAck> {
    let ack = (any::<u64>(), any::<u64>()).prop_map(|(a, b)| BatchAck {
        base_offset: Offset::new(a.min(b)),
        last_offset: Offset::new(a.max(b)),
    });
    let result = prop_oneof![ack.prop_map(Ok), error_code().prop_map(Err)];
    vec(result, 0..8).prop_map(|results| ProduceAck { results })
}

pub fn fetch_position() -> impl Strategy<Value = FetchPosition> {
    prop_oneof![
        offset().prop_map(FetchPosition::Offset),
        Just(FetchPosition::Earliest),
        Just(FetchPosition::Latest),
        any::<i64>().prop_map(FetchPosition::Timestamp),
    ]
}

pub fn fetch() -> impl Strategy<Value = Fetch> {
    (
        stream_name(),
        any::<u32>(),
        fetch_position(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(stream, partition, position, max_bytes, max_wait_ms)| Fetch {
                stream,
                partition: PartitionId::new(partition),
                position,
                max_bytes,
                max_wait_ms,
            },
        )
}

pub fn fetch_response() -> impl Strategy<Value = FetchResponse> {
    (offset(), offset(), offset(), vec(record_batch(), 0..4)).prop_map(
        |(log_start, high_watermark, next_offset, batches)| FetchResponse {
            log_start,
            high_watermark,
            next_offset,
            records: Bytes::from(batches.concat()),
        },
    )
}

pub fn error_details() -> impl Strategy<Value = ErrorDetails> {
    prop_oneof![
        (offset(), offset())
            .prop_map(|(log_start, log_end)| ErrorDetails::OffsetRange { log_start, log_end }),
        (leader_epoch(), option::of(endpoint())).prop_map(|(leader_epoch, leader)| {
            ErrorDetails::Leader {
                leader_epoch,
                leader,
            }
        }),
        any::<u32>().prop_map(|delay_ms| ErrorDetails::RetryAfter { delay_ms }),
    ]
}

pub fn error_response() -> impl Strategy<Value = ErrorResponse> {
    (error_code(), text(), option::of(error_details())).prop_map(|(code, message, details)| {
        ErrorResponse {
            code,
            message,
            details,
        }
    })
}

/// Any message of any type.
pub fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        hello().prop_map(Message::from),
        hello_ack().prop_map(Message::from),
        metadata_request().prop_map(Message::from),
        metadata_response().prop_map(Message::from),
        create_stream().prop_map(Message::from),
        create_stream_response().prop_map(Message::from),
        delete_stream().prop_map(Message::from),
        delete_stream_response().prop_map(Message::from),
        produce().prop_map(Message::from),
        produce_ack().prop_map(Message::from),
        fetch().prop_map(Message::from),
        fetch_response().prop_map(Message::from),
        repair_partition().prop_map(Message::from),
        repair_partition_response().prop_map(Message::from),
        error_response().prop_map(Message::from),
        replica_append().prop_map(Message::from),
        replica_ack().prop_map(Message::from),
        replica_mismatch().prop_map(Message::from),
        replica_stale().prop_map(Message::from),
    ]
}

pub fn replica_append() -> impl Strategy<Value = ReplicaAppend> {
    (
        stream_name(),
        any::<u32>(),
        leader_epoch(),
        any::<u64>(),
        leader_epoch(),
        any::<bool>(),
        any::<u64>(),
        vec(record_batch(), 0..4),
    )
        .prop_map(
            |(
                stream,
                partition,
                epoch,
                prev_offset,
                prev_epoch,
                reset,
                high_watermark,
                batches,
            )| {
                ReplicaAppend {
                    stream,
                    partition: PartitionId::new(partition),
                    epoch,
                    prev_offset,
                    prev_epoch,
                    reset,
                    high_watermark,
                    batches,
                }
            },
        )
}

pub fn replica_ack() -> impl Strategy<Value = ReplicaAck> {
    (stream_name(), any::<u32>(), leader_epoch(), any::<u64>()).prop_map(
        |(stream, partition, epoch, end)| ReplicaAck {
            stream,
            partition: PartitionId::new(partition),
            epoch,
            end,
        },
    )
}

/// A mismatch with a valid epoch history: increasing epochs and starts inside the log.
pub fn replica_mismatch() -> impl Strategy<Value = ReplicaMismatch> {
    (
        stream_name(),
        any::<u32>(),
        leader_epoch(),
        0u64..1 << 40,
        btree_set(0u64..1 << 20, 0..6),
        btree_set(leader_epoch(), 0..6),
    )
        .prop_map(|(stream, partition, epoch, start, offsets, epochs)| {
            let offsets: Vec<u64> = offsets.into_iter().map(|o| start + o).collect();
            let end = offsets.last().map_or(start, |last| last + 1);
            let epochs = epochs.into_iter().zip(offsets).collect();
            ReplicaMismatch {
                stream,
                partition: PartitionId::new(partition),
                epoch,
                start,
                end,
                epochs,
            }
        })
}

pub fn replica_stale() -> impl Strategy<Value = ReplicaStale> {
    (stream_name(), any::<u32>(), leader_epoch()).prop_map(|(stream, partition, epoch)| {
        ReplicaStale {
            stream,
            partition: PartitionId::new(partition),
            epoch,
        }
    })
}
