//! One scenario per way the decoder rejects a batch: each edits a valid batch, re-seals its
//! checksum where the edit is under the CRC (so the check under test is the one that fails),
//! and asserts the exact error, fields included.

use bytes::Bytes;
use floe_wire::batch::{self, MAX_BATCH_BYTES};
use floe_wire::{
    BatchBuilder, BatchError, BatchHeader, LeaderEpoch, Offset, RecordBatch, RecordFault,
};

const FIRST_TIMESTAMP: i64 = 1_700_000_000_000;

// Layout of `two_records()` (see docs/storage-format.md):
const BATCH_LENGTH: usize = 129;
const RECORD_0: usize = 64; // 37 bytes: key "k", value "v0", header ("h", "x")
const RECORD_1: usize = 101; // 28 bytes: no key, value "v1", no headers

// Header field positions.
const BATCH_LENGTH_AT: usize = 8;
const CRC_AT: usize = 16;
const VERSION_AT: usize = 20;
const RESERVED_BYTE_AT: usize = 21;
const ATTRIBUTES_AT: usize = 22;
const RECORD_COUNT_AT: usize = 24;
const RESERVED_SHORT_AT: usize = 30;
const FIRST_TIMESTAMP_AT: usize = 32;
const MAX_TIMESTAMP_AT: usize = 40;
const PRODUCER_ID_AT: usize = 48;
const BASE_SEQUENCE_AT: usize = 56;
const RESERVED_INT_AT: usize = 60;

// Field positions inside a record, from its start.
const LENGTH_IN_RECORD: usize = 0;
const OFFSET_DELTA_IN_RECORD: usize = 4;
const KEY_LENGTH_IN_RECORD: usize = 16;
/// In record 0 only: key "k" and value "v0" come before the header count.
const HEADER_NAME_IN_RECORD_0: usize = 31;

/// A valid two-record batch, stamped: every test starts from it.
fn two_records() -> Vec<u8> {
    let mut builder = BatchBuilder::new(1 << 10);
    builder
        .push(FIRST_TIMESTAMP, Some(b"k"), b"v0", &[("h", b"x")])
        .expect("record 0 fits");
    builder
        .push(FIRST_TIMESTAMP + 5, None, b"v1", &[])
        .expect("record 1 fits");
    let mut bytes = builder.finish().expect("two records").to_vec();
    batch::stamp(&mut bytes, Offset::new(10), LeaderEpoch::new(2)).expect("header present");
    assert_eq!(bytes.len(), BATCH_LENGTH);
    bytes
}

/// A valid one-record batch whose 100-byte value leaves room for four minimal records.
fn one_large_record() -> Vec<u8> {
    let mut builder = BatchBuilder::new(1 << 10);
    builder
        .push(FIRST_TIMESTAMP, None, &[7; 100], &[])
        .expect("record fits");
    builder.finish().expect("one record").to_vec()
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// Recomputes the CRC after an edit under it, as a well-meaning but wrong encoder would.
fn reseal(bytes: &mut [u8]) {
    let crc = batch::checksum(bytes);
    put(bytes, CRC_AT, &crc.to_le_bytes());
}

/// Edits, re-seals, and returns what the decoder says.
fn decode_edited(edit: impl FnOnce(&mut Vec<u8>)) -> Result<RecordBatch, BatchError> {
    let mut bytes = two_records();
    edit(&mut bytes);
    reseal(&mut bytes);
    decode_both(bytes)
}

/// Decodes with both entry points, which must agree on every error they share.
fn decode_both(bytes: Vec<u8>) -> Result<RecordBatch, BatchError> {
    let bytes = Bytes::from(bytes);
    let whole = RecordBatch::decode(bytes.clone());
    let prefix = RecordBatch::decode_prefix(&bytes).map(|(batch, _)| batch);
    assert_eq!(whole, prefix, "decode and decode_prefix disagree");
    whole
}

fn record_fault(index: u32, fault: RecordFault) -> Option<BatchError> {
    Some(BatchError::Record { index, fault })
}

#[test]
fn the_unedited_batch_is_valid() {
    let batch = decode_both(two_records()).expect("valid");
    assert_eq!(batch.header().record_count, 2);
    assert_eq!(batch.header().max_timestamp, FIRST_TIMESTAMP + 5);
    let first = batch.records().next().expect("record 0");
    assert_eq!(first.headers.collect::<Vec<_>>(), [("h", &b"x"[..])]);
}

// ---- lengths ----

#[test]
fn fewer_bytes_than_a_header_are_truncated() {
    let bytes = two_records();
    assert_eq!(
        decode_both(bytes[..63].to_vec()).err(),
        Some(BatchError::Truncated {
            needed: 64,
            available: 63,
        })
    );
    assert_eq!(
        decode_both(Vec::new()).err(),
        Some(BatchError::Truncated {
            needed: 64,
            available: 0,
        })
    );
}

#[test]
fn fewer_bytes_than_the_batch_length_are_truncated() {
    let bytes = two_records();
    assert_eq!(
        decode_both(bytes[..BATCH_LENGTH - 1].to_vec()).err(),
        Some(BatchError::Truncated {
            needed: BATCH_LENGTH,
            available: BATCH_LENGTH - 1,
        })
    );
}

#[test]
fn batch_length_below_one_minimal_record_is_rejected() {
    let result = decode_edited(|b| put(b, BATCH_LENGTH_AT, &89u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::LengthOutOfRange {
            declared: 89,
            min: 90,
            max: MAX_BATCH_BYTES,
        })
    );
}

#[test]
fn batch_length_above_the_format_limit_is_rejected() {
    let declared = MAX_BATCH_BYTES + 1;
    let result = decode_edited(|b| put(b, BATCH_LENGTH_AT, &declared.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::LengthOutOfRange {
            declared,
            min: 90,
            max: MAX_BATCH_BYTES,
        })
    );
}

#[test]
fn bytes_after_the_batch_are_rejected_by_decode_but_returned_by_decode_prefix() {
    let mut bytes = two_records();
    bytes.push(0xab);
    let bytes = Bytes::from(bytes);
    assert_eq!(
        RecordBatch::decode(bytes.clone()).err(),
        Some(BatchError::LengthMismatch {
            declared: BATCH_LENGTH as u32,
            available: BATCH_LENGTH + 1,
        })
    );
    let (batch, rest) = RecordBatch::decode_prefix(&bytes).expect("whole batch first");
    assert_eq!(batch.as_bytes().len(), BATCH_LENGTH);
    assert_eq!(rest.as_ref(), [0xab]);
}

// ---- header fields under the CRC ----

#[test]
fn unknown_version_is_rejected() {
    for version in [0u8, 2, 0xff] {
        let result = decode_edited(|b| b[VERSION_AT] = version);
        assert_eq!(
            result.err(),
            Some(BatchError::UnsupportedVersion { version })
        );
    }
}

#[test]
fn reserved_byte_set_is_rejected() {
    let result = decode_edited(|b| b[RESERVED_BYTE_AT] = 1);
    assert_eq!(
        result.err(),
        Some(BatchError::ReservedNotZero {
            field: "reserved byte"
        })
    );
}

#[test]
fn reserved_short_set_is_rejected() {
    let result = decode_edited(|b| put(b, RESERVED_SHORT_AT, &0x8000u16.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::ReservedNotZero {
            field: "reserved short"
        })
    );
}

#[test]
fn reserved_int_set_is_rejected() {
    let result = decode_edited(|b| b[RESERVED_INT_AT + 3] = 0x01);
    assert_eq!(
        result.err(),
        Some(BatchError::ReservedNotZero {
            field: "reserved int"
        })
    );
}

#[test]
fn unknown_compression_codec_is_rejected() {
    let result = decode_edited(|b| put(b, ATTRIBUTES_AT, &1u16.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::UnsupportedAttributes { attributes: 1 })
    );
}

#[test]
fn reserved_attribute_bits_set_are_rejected() {
    let result = decode_edited(|b| put(b, ATTRIBUTES_AT, &0x8000u16.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::UnsupportedAttributes { attributes: 0x8000 })
    );
}

#[test]
fn zero_record_count_is_rejected() {
    let result = decode_edited(|b| put(b, RECORD_COUNT_AT, &0u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::RecordCount {
            count: 0,
            batch_length: BATCH_LENGTH as u32,
        })
    );
}

#[test]
fn record_count_larger_than_bytes_allow_is_rejected() {
    // 65 bytes of records hold at most two 26-byte minimal records.
    let result = decode_edited(|b| put(b, RECORD_COUNT_AT, &3u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::RecordCount {
            count: 3,
            batch_length: BATCH_LENGTH as u32,
        })
    );
}

#[test]
fn producer_id_without_a_sequence_is_rejected() {
    let result = decode_edited(|b| put(b, PRODUCER_ID_AT, &42i64.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::ProducerFields {
            producer_id: 42,
            base_sequence: -1,
            count: 2,
        })
    );
}

#[test]
fn sequence_without_a_producer_id_is_rejected() {
    let result = decode_edited(|b| put(b, BASE_SEQUENCE_AT, &0i32.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::ProducerFields {
            producer_id: -1,
            base_sequence: 0,
            count: 2,
        })
    );
}

#[test]
fn negative_producer_id_other_than_none_is_rejected() {
    let result = decode_edited(|b| {
        put(b, PRODUCER_ID_AT, &(-2i64).to_le_bytes());
        put(b, BASE_SEQUENCE_AT, &0i32.to_le_bytes());
    });
    assert_eq!(
        result.err(),
        Some(BatchError::ProducerFields {
            producer_id: -2,
            base_sequence: 0,
            count: 2,
        })
    );
}

#[test]
fn sequence_overflowing_i32_is_rejected() {
    // Two records from i32::MAX would number the second one past i32::MAX.
    let result = decode_edited(|b| {
        put(b, PRODUCER_ID_AT, &42i64.to_le_bytes());
        put(b, BASE_SEQUENCE_AT, &i32::MAX.to_le_bytes());
    });
    assert_eq!(
        result.err(),
        Some(BatchError::ProducerFields {
            producer_id: 42,
            base_sequence: i32::MAX,
            count: 2,
        })
    );
}

#[test]
fn max_timestamp_differing_from_the_records_is_rejected() {
    let declared = FIRST_TIMESTAMP + 4;
    let result = decode_edited(|b| put(b, MAX_TIMESTAMP_AT, &declared.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::MaxTimestamp {
            declared,
            computed: FIRST_TIMESTAMP + 5,
        })
    );
}

// ---- checksum ----

#[test]
fn changed_record_byte_is_a_checksum_mismatch() {
    let mut bytes = two_records();
    let stored = batch::checksum(&bytes);
    bytes[BATCH_LENGTH - 1] ^= 0x01;
    let computed = batch::checksum(&bytes);
    assert_ne!(stored, computed);
    assert_eq!(
        decode_both(bytes).err(),
        Some(BatchError::ChecksumMismatch { stored, computed })
    );
}

#[test]
fn changed_crc_field_is_a_checksum_mismatch() {
    let mut bytes = two_records();
    let computed = batch::checksum(&bytes);
    let stored = computed ^ 0x8000_0000;
    put(&mut bytes, CRC_AT, &stored.to_le_bytes());
    assert_eq!(
        decode_both(bytes).err(),
        Some(BatchError::ChecksumMismatch { stored, computed })
    );
}

#[test]
fn header_structure_is_checked_before_the_checksum() {
    // Not re-sealed: the version check runs first and names the actual problem.
    let mut bytes = two_records();
    bytes[VERSION_AT] = 2;
    assert_eq!(
        decode_both(bytes).err(),
        Some(BatchError::UnsupportedVersion { version: 2 })
    );
}

// ---- record count against the records present ----

#[test]
fn record_count_smaller_than_the_records_leaves_trailing_bytes() {
    let result = decode_edited(|b| put(b, RECORD_COUNT_AT, &1u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        Some(BatchError::TrailingBytes {
            extra: BATCH_LENGTH - RECORD_1,
        })
    );
}

#[test]
fn record_count_larger_than_the_records_present_is_a_truncated_record() {
    // Room for four minimal records by length, but only one is there.
    let mut bytes = one_large_record();
    put(&mut bytes, RECORD_COUNT_AT, &2u32.to_le_bytes());
    reseal(&mut bytes);
    assert_eq!(
        decode_both(bytes).err(),
        record_fault(1, RecordFault::Truncated)
    );
}

// ---- record faults ----

#[test]
fn record_length_past_the_batch_end_is_an_overrun() {
    let result = decode_edited(|b| put(b, RECORD_1 + LENGTH_IN_RECORD, &100u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        record_fault(
            1,
            RecordFault::LengthOverrun {
                length: 100,
                remaining: BATCH_LENGTH - RECORD_1 - 4,
            }
        )
    );
}

#[test]
fn record_length_longer_than_its_fields_leaves_unused_bytes() {
    // Record 0 claims three bytes of record 1 that none of its fields use.
    let result = decode_edited(|b| put(b, RECORD_0 + LENGTH_IN_RECORD, &36u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        record_fault(0, RecordFault::UnusedBytes { unused: 3 })
    );
}

#[test]
fn record_length_shorter_than_its_fields_is_truncated() {
    let result = decode_edited(|b| put(b, RECORD_0 + LENGTH_IN_RECORD, &30u32.to_le_bytes()));
    assert_eq!(result.err(), record_fault(0, RecordFault::Truncated));
}

#[test]
fn key_longer_than_its_record_is_truncated() {
    let result = decode_edited(|b| put(b, RECORD_0 + KEY_LENGTH_IN_RECORD, &40i32.to_le_bytes()));
    assert_eq!(result.err(), record_fault(0, RecordFault::Truncated));
}

#[test]
fn negative_key_length_other_than_no_key_is_rejected() {
    let result = decode_edited(|b| put(b, RECORD_0 + KEY_LENGTH_IN_RECORD, &(-2i32).to_le_bytes()));
    assert_eq!(result.err(), record_fault(0, RecordFault::KeyLength(-2)));
}

#[test]
fn offset_delta_out_of_order_is_rejected() {
    let result = decode_edited(|b| put(b, RECORD_1 + OFFSET_DELTA_IN_RECORD, &5u32.to_le_bytes()));
    assert_eq!(
        result.err(),
        record_fault(
            1,
            RecordFault::OffsetDelta {
                expected: 1,
                found: 5,
            }
        )
    );
}

#[test]
fn record_timestamp_past_i64_is_rejected() {
    // Record 1 sits 5 ms after the first timestamp, which is now one below i64::MAX.
    let result = decode_edited(|b| {
        put(b, FIRST_TIMESTAMP_AT, &(i64::MAX - 1).to_le_bytes());
        put(b, MAX_TIMESTAMP_AT, &(i64::MAX - 1).to_le_bytes());
    });
    assert_eq!(
        result.err(),
        record_fault(1, RecordFault::TimestampOverflow)
    );
}

#[test]
fn header_name_that_is_not_utf8_is_rejected() {
    let result = decode_edited(|b| b[RECORD_0 + HEADER_NAME_IN_RECORD_0] = 0xff);
    assert_eq!(result.err(), record_fault(0, RecordFault::HeaderName));
}

// ---- the other entry points ----

#[test]
fn header_parse_alone_does_not_check_the_checksum() {
    let mut bytes = two_records();
    bytes[BATCH_LENGTH - 1] ^= 0x01;
    let header = BatchHeader::parse(&bytes).expect("structure is intact");
    assert_eq!(header.batch_length, BATCH_LENGTH as u32);
    assert_eq!(header.base_offset, Offset::new(10));
    assert_eq!(header.leader_epoch, LeaderEpoch::new(2));
}

#[test]
fn stamping_fewer_bytes_than_a_header_is_rejected() {
    let mut bytes = [0u8; 63];
    assert_eq!(
        batch::stamp(&mut bytes, Offset::new(1), LeaderEpoch::new(1)),
        Err(BatchError::Truncated {
            needed: 64,
            available: 63,
        })
    );
    assert_eq!(bytes, [0u8; 63]);
}

#[test]
fn batch_length_is_read_only_when_present() {
    let bytes = two_records();
    assert_eq!(batch::peek_batch_length(&bytes), Some(BATCH_LENGTH as u32));
    assert_eq!(
        batch::peek_batch_length(&bytes[..12]),
        Some(BATCH_LENGTH as u32)
    );
    assert_eq!(batch::peek_batch_length(&bytes[..11]), None);
}
