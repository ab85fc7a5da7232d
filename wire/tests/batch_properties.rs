//! Property tests for the record-batch codec: what the builder writes the decoder reads back
//! exactly, stamping never invalidates a batch, and no corruption or truncation is accepted.

use bytes::Bytes;
use floe_wire::batch::{
    self, BuildError, CRC_COVERS_FROM, HEADER_LEN, NO_PRODUCER_ID, NO_SEQUENCE,
};
use floe_wire::{BatchBuilder, BatchError, LeaderEpoch, Offset, RecordBatch};
use proptest::collection::vec;
use proptest::prelude::*;

/// One record as the producer hands it to the builder.
#[derive(Debug, Clone)]
struct RecordSpec {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

/// Idempotent-producer fields as given to [`BatchBuilder::producer`].
#[derive(Debug, Clone, Copy)]
struct ProducerSpec {
    id: i64,
    epoch: u16,
    base_sequence: i32,
}

const MAX_RECORDS: usize = 8;

fn header_name() -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    (header_name(), vec(any::<u8>(), 0..32))
}

/// A record whose timestamp lies within a few weeks of `base`, saturating at the ends of the
/// `i64` range so that extreme timestamps occur while every delta stays representable.
fn record_near(base: i64) -> impl Strategy<Value = RecordSpec> {
    (
        -(1i64 << 31)..(1i64 << 31),
        proptest::option::of(vec(any::<u8>(), 0..64)),
        vec(any::<u8>(), 0..2048),
        vec(header(), 0..4),
    )
        .prop_map(move |(delta, key, value, headers)| RecordSpec {
            timestamp: base.saturating_add(delta),
            key,
            value,
            headers,
        })
}

fn base_timestamp() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        1_600_000_000_000i64..1_900_000_000_000,
        Just(i64::MIN),
        Just(i64::MAX),
        any::<i64>(),
    ]
}

fn records() -> impl Strategy<Value = Vec<RecordSpec>> {
    base_timestamp().prop_flat_map(|base| vec(record_near(base), 1..=MAX_RECORDS))
}

/// Producer fields the format accepts: none, or a non-negative id with a base sequence that
/// leaves room for `MAX_RECORDS` records (including the tightest such sequence).
fn valid_producer() -> impl Strategy<Value = Option<ProducerSpec>> {
    let sequence = prop_oneof![
        Just(0i32),
        0..=i32::MAX - MAX_RECORDS as i32,
        Just(i32::MAX - MAX_RECORDS as i32 + 1),
    ];
    proptest::option::of((0..=i64::MAX, any::<u16>(), sequence).prop_map(
        |(id, epoch, base_sequence)| ProducerSpec {
            id,
            epoch,
            base_sequence,
        },
    ))
}

fn build(records: &[RecordSpec], producer: Option<ProducerSpec>) -> Result<Bytes, BuildError> {
    let mut builder = BatchBuilder::new(batch::MAX_BATCH_BYTES as usize);
    if let Some(p) = producer {
        builder.producer(p.id, p.epoch, p.base_sequence);
    }
    for r in records {
        let headers: Vec<(&str, &[u8])> = r
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        builder.push(r.timestamp, r.key.as_deref(), &r.value, &headers)?;
    }
    builder.finish()
}

/// Checks that `batch` holds exactly `records` sent by `producer`.
fn assert_batch_holds(
    batch: &RecordBatch,
    records: &[RecordSpec],
    producer: Option<ProducerSpec>,
) -> Result<(), TestCaseError> {
    let header = batch.header();
    let first = records[0].timestamp;
    let max = records.iter().map(|r| r.timestamp).max();
    prop_assert_eq!(header.batch_length as usize, batch.as_bytes().len());
    prop_assert_eq!(header.record_count as usize, records.len());
    prop_assert_eq!(header.attributes, 0);
    prop_assert_eq!(header.first_timestamp, first);
    prop_assert_eq!(Some(header.max_timestamp), max);
    prop_assert_eq!(header.crc, batch::checksum(batch.as_bytes()));
    let (id, epoch, sequence) = producer.map_or((NO_PRODUCER_ID, 0, NO_SEQUENCE), |p| {
        (p.id, p.epoch, p.base_sequence)
    });
    prop_assert_eq!(header.producer_id, id);
    prop_assert_eq!(header.producer_epoch, epoch);
    prop_assert_eq!(header.base_sequence, sequence);
    prop_assert_eq!(batch.records().count(), records.len());
    for (index, (decoded, spec)) in batch.records().zip(records).enumerate() {
        prop_assert_eq!(decoded.offset_delta as usize, index);
        prop_assert_eq!(first + decoded.timestamp_delta, spec.timestamp);
        prop_assert_eq!(decoded.key, spec.key.as_deref());
        prop_assert_eq!(decoded.value, spec.value.as_slice());
        let headers: Vec<(&str, &[u8])> = decoded.headers.collect();
        let expected: Vec<(&str, &[u8])> = spec
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        prop_assert_eq!(headers, expected);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn encoded_records_decode_identically(
        records in records(),
        producer in valid_producer(),
    ) {
        let bytes = build(&records, producer).expect("valid records build");
        let batch = RecordBatch::decode(bytes.clone()).expect("built batch decodes");
        prop_assert_eq!(batch.header().base_offset, Offset::ZERO);
        prop_assert_eq!(batch.header().leader_epoch, LeaderEpoch::ZERO);
        prop_assert_eq!(batch.as_bytes(), &bytes);
        assert_batch_holds(&batch, &records, producer)?;
    }

    #[test]
    fn stamping_any_offset_and_epoch_keeps_the_batch_valid(
        records in records(),
        producer in valid_producer(),
        base_offset in any::<u64>(),
        leader_epoch in any::<u32>().prop_map(LeaderEpoch::new),
    ) {
        let built = build(&records, producer).expect("valid records build");
        let mut stamped = built.to_vec();
        batch::stamp(&mut stamped, Offset::new(base_offset), leader_epoch).expect("has a header");
        // Stamping writes only the first 16 bytes: the CRC and everything it covers stay put.
        prop_assert_eq!(&stamped[16..], &built[16..]);
        let batch = RecordBatch::decode(Bytes::from(stamped)).expect("stamped batch decodes");
        prop_assert_eq!(batch.header().base_offset, Offset::new(base_offset));
        prop_assert_eq!(batch.header().leader_epoch, leader_epoch);
        assert_batch_holds(&batch, &records, producer)?;
    }

    #[test]
    fn any_single_byte_change_under_the_crc_is_rejected(
        records in records(),
        producer in valid_producer(),
        position in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut bytes = build(&records, producer).expect("valid records build").to_vec();
        let at = CRC_COVERS_FROM + position.index(bytes.len() - CRC_COVERS_FROM);
        bytes[at] ^= flip;
        let computed = batch::checksum(&bytes);
        let bytes = Bytes::from(bytes);
        let decoded = RecordBatch::decode(bytes.clone());
        prop_assert!(decoded.is_err(), "change at byte {} accepted", at);
        prop_assert_eq!(
            RecordBatch::decode_prefix(&bytes).map(|(b, _)| b).err(),
            decoded.clone().err()
        );
        if at >= HEADER_LEN {
            // The header is intact, so the checksum is the first check to fail.
            let stored = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
            prop_assert_eq!(decoded.err(), Some(BatchError::ChecksumMismatch { stored, computed }));
        }
    }

    #[test]
    fn every_truncation_is_rejected(
        records in records(),
        producer in valid_producer(),
    ) {
        let bytes = build(&records, producer).expect("valid records build");
        let length = bytes.len();
        for cut in 0..length {
            let needed = if cut < HEADER_LEN { HEADER_LEN } else { length };
            let expected = BatchError::Truncated { needed, available: cut };
            let short = bytes.slice(..cut);
            prop_assert_eq!(RecordBatch::decode(short.clone()).err(), Some(expected.clone()));
            prop_assert_eq!(
                RecordBatch::decode_prefix(&short).map(|(b, _)| b).err(),
                Some(expected)
            );
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        prop_assert_eq!(
            RecordBatch::decode(Bytes::from(longer)).err(),
            Some(BatchError::LengthMismatch { declared: length as u32, available: length + 1 })
        );
    }

    #[test]
    fn decode_prefix_splits_concatenated_batches_exactly(
        batches in vec((records(), valid_producer()), 1..5),
        tail in 0usize..HEADER_LEN + 8,
    ) {
        let mut stream = Vec::new();
        let mut next_offset = 0u64;
        let mut encoded = Vec::new();
        for (records, producer) in &batches {
            let mut bytes = build(records, *producer).expect("valid records build").to_vec();
            batch::stamp(&mut bytes, Offset::new(next_offset), LeaderEpoch::new(1)).expect("has a header");
            next_offset += records.len() as u64;
            stream.extend_from_slice(&bytes);
            encoded.push(bytes);
        }
        let mut rest = Bytes::from(stream);
        for ((records, producer), bytes) in batches.iter().zip(&encoded) {
            prop_assert_eq!(batch::peek_batch_length(&rest), Some(bytes.len() as u32));
            let (batch, after) = RecordBatch::decode_prefix(&rest).expect("each batch decodes");
            prop_assert_eq!(batch.as_bytes().as_ref(), bytes.as_slice());
            assert_batch_holds(&batch, records, *producer)?;
            prop_assert_eq!(after.len(), rest.len() - bytes.len());
            rest = after;
        }
        prop_assert!(rest.is_empty());

        // A torn batch after the last whole one is reported as truncated, never split wrongly.
        let first = &encoded[0];
        let torn = Bytes::copy_from_slice(&first[..tail.min(first.len() - 1)]);
        let needed = if torn.len() < HEADER_LEN { HEADER_LEN } else { first.len() };
        prop_assert_eq!(
            RecordBatch::decode_prefix(&torn).map(|(b, _)| b).err(),
            Some(BatchError::Truncated { needed, available: torn.len() })
        );
    }

    /// Whatever producer fields and timestamps a client passes, the builder either refuses
    /// them or writes a batch every decoder accepts.
    #[test]
    fn whatever_the_builder_accepts_decodes(
        records in vec(record_near(0), 1..=MAX_RECORDS),
        timestamps in vec(any::<i64>(), MAX_RECORDS),
        producer_id in prop_oneof![Just(NO_PRODUCER_ID), any::<i64>()],
        producer_epoch in any::<u16>(),
        base_sequence in prop_oneof![Just(NO_SEQUENCE), any::<i32>()],
        arbitrary_timestamps in any::<bool>(),
    ) {
        let mut records = records;
        if arbitrary_timestamps {
            for (record, timestamp) in records.iter_mut().zip(timestamps) {
                record.timestamp = timestamp;
            }
        }
        let producer = ProducerSpec { id: producer_id, epoch: producer_epoch, base_sequence };
        if let Ok(bytes) = build(&records, Some(producer)) {
            let decoded = RecordBatch::decode(bytes);
            prop_assert!(decoded.is_ok(), "builder wrote a batch the decoder rejects: {:?}", decoded);
        }
    }
}
