//! From the bytes of a fetch response to the records a consumer hands out. Pure.
//!
//! Every batch is validated (framing, checksum, every record) before any of its records is
//! used. Batches must move forward; records before the consumer's position — the broker
//! returns whole batches, so the first may start earlier — are skipped, and so are control
//! batches (a leader's markers, not data).

use std::collections::VecDeque;

use bytes::Bytes;
use floe_wire::{Offset, PartitionId, RecordBatch};

use crate::error::ProtocolViolation;
use crate::record::ConsumedRecord;

/// Which records of a response the consumer has not yet handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Records below this offset.
    Below(Offset),
    /// In the first batch, records before the first one at or after this time (ms): where a
    /// timestamp position starts.
    BeforeTime(i64),
    /// None: the position was the earliest or the latest offset.
    Nothing,
}

/// Appends the records of `records` after `skip` to `out`, in order. Returns the offset
/// after the last batch, or `None` when there was none. On error `out` is left as it was.
pub(crate) fn decode_fetched(
    records: &Bytes,
    partition: PartitionId,
    skip: Skip,
    out: &mut VecDeque<ConsumedRecord>,
) -> Result<Option<Offset>, ProtocolViolation> {
    let before = out.len();
    let decoded = decode_into(records, partition, skip, out);
    if decoded.is_err() {
        out.truncate(before);
    }
    decoded
}

fn decode_into(
    records: &Bytes,
    partition: PartitionId,
    skip: Skip,
    out: &mut VecDeque<ConsumedRecord>,
) -> Result<Option<Offset>, ProtocolViolation> {
    let mut rest = records.clone();
    let mut next: Option<Offset> = None;
    let mut before_time = match skip {
        Skip::BeforeTime(ms) => Some(ms),
        Skip::Below(_) | Skip::Nothing => None,
    };
    let below = match skip {
        Skip::Below(offset) => offset,
        Skip::BeforeTime(_) | Skip::Nothing => Offset::ZERO,
    };
    while !rest.is_empty() {
        let (batch, after) = RecordBatch::decode_prefix(&rest)?;
        rest = after;
        let header = *batch.header();
        if let Some(expected) = next
            && header.base_offset < expected
        {
            return Err(ProtocolViolation::BatchOrder {
                expected: expected.get(),
                base: header.base_offset.get(),
            });
        }
        next = Some(header.next_offset());
        if header.is_control() {
            // A leader's marker, not data: its offsets are passed over.
            continue;
        }
        let bytes = batch.as_bytes();
        for record in batch.records() {
            let offset = Offset::new(header.base_offset.get() + u64::from(record.offset_delta));
            // Validated when the batch was decoded: the sum does not overflow.
            let timestamp = header
                .first_timestamp
                .saturating_add(record.timestamp_delta);
            if offset < below {
                continue;
            }
            if let Some(start) = before_time {
                if timestamp < start {
                    continue;
                }
                before_time = None;
            }
            out.push_back(ConsumedRecord {
                partition,
                offset,
                timestamp,
                key: record.key.map(|key| bytes.slice_ref(key)),
                value: bytes.slice_ref(record.value),
                headers: record
                    .headers
                    .map(|(name, value)| (name.to_owned(), bytes.slice_ref(value)))
                    .collect(),
            });
        }
        // A timestamp position starts inside the first batch only.
        before_time = None;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use floe_wire::{BatchBuilder, LeaderEpoch};

    use super::*;

    /// A stored batch: records `values` with timestamps 1000, 1001, … from `base`.
    fn stored(base: u64, values: &[&str]) -> Bytes {
        let mut builder = BatchBuilder::new(1 << 20);
        for (i, value) in values.iter().enumerate() {
            builder
                .push(
                    1000 + i as i64,
                    Some(b"k"),
                    value.as_bytes(),
                    &[("h", b"v")],
                )
                .expect("fits");
        }
        let mut bytes = BytesMut::from(&builder.finish().expect("a batch")[..]);
        floe_wire::batch::stamp(&mut bytes, Offset::new(base), LeaderEpoch::ZERO)
            .expect("a header");
        bytes.freeze()
    }

    fn concat(batches: &[Bytes]) -> Bytes {
        batches
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect::<Vec<u8>>()
            .into()
    }

    fn decode(records: &Bytes, skip: Skip) -> (Vec<(u64, String)>, Option<Offset>) {
        let mut out = VecDeque::new();
        let next = decode_fetched(records, PartitionId::new(2), skip, &mut out).expect("valid");
        let got = out
            .iter()
            .map(|r| {
                (
                    r.offset.get(),
                    String::from_utf8_lossy(&r.value).into_owned(),
                )
            })
            .collect();
        (got, next)
    }

    #[test]
    fn records_come_out_in_order_with_their_offsets_and_fields() {
        let records = concat(&[stored(10, &["a", "b"]), stored(12, &["c"])]);
        let mut out = VecDeque::new();
        let next =
            decode_fetched(&records, PartitionId::new(2), Skip::Nothing, &mut out).expect("valid");
        assert_eq!(next, Some(Offset::new(13)));
        let offsets: Vec<u64> = out.iter().map(|r| r.offset.get()).collect();
        assert_eq!(offsets, [10, 11, 12]);
        let b = &out[1];
        assert_eq!(b.partition, PartitionId::new(2));
        assert_eq!(b.timestamp, 1001);
        assert_eq!(b.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(&b.value[..], b"b");
        assert_eq!(b.headers, [("h".to_string(), Bytes::from_static(b"v"))]);
    }

    #[test]
    fn records_below_the_position_in_the_first_batch_are_skipped() {
        let records = concat(&[stored(10, &["a", "b", "c"]), stored(13, &["d"])]);
        let (got, next) = decode(&records, Skip::Below(Offset::new(12)));
        assert_eq!(got, [(12, "c".into()), (13, "d".into())]);
        assert_eq!(next, Some(Offset::new(14)));
    }

    #[test]
    fn a_batch_entirely_below_the_position_yields_nothing_but_moves_on() {
        let (got, next) = decode(&stored(10, &["a", "b"]), Skip::Below(Offset::new(20)));
        assert!(got.is_empty());
        assert_eq!(next, Some(Offset::new(12)));
    }

    #[test]
    fn a_timestamp_position_skips_earlier_records_of_the_first_batch_only() {
        let records = concat(&[stored(0, &["a", "b", "c"]), stored(3, &["d", "e"])]);
        let (got, _) = decode(&records, Skip::BeforeTime(1001));
        assert_eq!(
            got,
            [
                (1, "b".into()),
                (2, "c".into()),
                (3, "d".into()),
                (4, "e".into())
            ]
        );
    }

    /// A leader's epoch-start marker stored at `base`, with timestamp 5000.
    fn marker(base: u64) -> Bytes {
        let batch = floe_wire::batch::control_batch(floe_wire::ControlKind::EpochStart, 5000);
        let mut bytes = BytesMut::from(&batch[..]);
        floe_wire::batch::stamp(&mut bytes, Offset::new(base), LeaderEpoch::new(2))
            .expect("a header");
        bytes.freeze()
    }

    #[test]
    fn control_batches_are_passed_over() {
        let records = concat(&[
            stored(10, &["a"]),
            marker(11),
            stored(12, &["b"]),
            marker(13),
        ]);
        let (got, next) = decode(&records, Skip::Nothing);
        assert_eq!(got, [(10, "a".into()), (12, "b".into())]);
        assert_eq!(
            next,
            Some(Offset::new(14)),
            "the position moves past a marker"
        );
        // A marker first does not use up a timestamp position.
        let records = concat(&[marker(2), stored(3, &["d", "e"])]);
        let (got, _) = decode(&records, Skip::BeforeTime(1001));
        assert_eq!(got, [(4, "e".into())]);
    }

    #[test]
    fn an_empty_response_has_no_next_offset() {
        assert_eq!(decode(&Bytes::new(), Skip::Nothing), (vec![], None));
    }

    #[test]
    fn a_corrupt_batch_is_a_protocol_violation() {
        let mut bytes = BytesMut::from(&stored(0, &["a"])[..]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let mut out = VecDeque::new();
        let result = decode_fetched(
            &bytes.freeze(),
            PartitionId::new(0),
            Skip::Nothing,
            &mut out,
        );
        assert!(
            matches!(result, Err(ProtocolViolation::Batch(_))),
            "{result:?}"
        );
        assert!(out.is_empty());
    }

    #[test]
    fn batches_that_go_backwards_are_a_protocol_violation() {
        let records = concat(&[stored(10, &["a", "b"]), stored(11, &["c"])]);
        let mut out = VecDeque::new();
        let result = decode_fetched(&records, PartitionId::new(0), Skip::Nothing, &mut out);
        assert!(matches!(
            result,
            Err(ProtocolViolation::BatchOrder {
                expected: 12,
                base: 11
            })
        ));
        assert!(out.is_empty(), "nothing of a bad response is kept");
    }
}
