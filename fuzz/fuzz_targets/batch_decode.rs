//! Fuzz target: arbitrary bytes into the record-batch decoder (`RecordBatch::decode` and
//! `decode_prefix`). Any input may be rejected, none may panic, and whatever is accepted must
//! hold together: record count, offset deltas, checksum, max timestamp, and re-encoding.

#![no_main]

use bytes::Bytes;
use floe_wire::batch::{self, BatchBuilder, BatchHeader, RecordBatch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    decode_both_ways(Bytes::copy_from_slice(data));
    // Random bytes almost never carry a matching CRC, which would keep the fuzzer at the
    // checksum. Sealing a copy with the CRC its declared length calls for lets it reach the
    // record parser with arbitrary records too.
    if let Some(sealed) = sealed(data) {
        decode_both_ways(sealed);
    }
});

/// Position of the CRC field in the batch header (stable, part of the format).
const CRC_AT: usize = 16;

/// `data` with the CRC field set to the checksum of its first batch, if it has a header.
fn sealed(data: &[u8]) -> Option<Bytes> {
    if data.len() < batch::HEADER_LEN {
        return None;
    }
    let declared = batch::peek_batch_length(data)? as usize;
    let crc = batch::checksum(&data[..declared.min(data.len())]);
    let mut copy = data.to_vec();
    copy[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    Some(Bytes::from(copy))
}

/// Decodes `bytes` as one batch and as a stream of batches, checking each accepted batch.
fn decode_both_ways(bytes: Bytes) {
    let whole = RecordBatch::decode(bytes.clone());
    if let Ok(batch) = &whole {
        assert_eq!(batch.as_bytes(), &bytes);
        check_batch(batch);
    }

    // Split the input as a stream of concatenated batches until one does not decode.
    let mut rest = bytes.clone();
    let mut first = true;
    loop {
        let (batch, after) = match RecordBatch::decode_prefix(&rest) {
            Ok(split) => split,
            Err(error) => {
                if first {
                    // A whole-input decode fails at the same check, unless the only problem is
                    // bytes after the batch, which decode_prefix returns instead.
                    assert_eq!(whole.as_ref().err(), Some(&error));
                }
                break;
            }
        };
        let length = batch.header().batch_length as usize;
        assert_eq!(batch.as_bytes(), &rest.slice(..length));
        assert_eq!(after, rest.slice(length..));
        if first {
            assert_eq!(whole.is_ok(), after.is_empty());
        }
        check_batch(&batch);
        first = false;
        rest = after;
    }
}

/// Invariants of every batch the decoder accepts.
fn check_batch(batch: &RecordBatch) {
    let header = *batch.header();
    let bytes = batch.as_bytes();
    assert_eq!(header.batch_length as usize, bytes.len());
    assert_eq!(BatchHeader::parse(bytes), Ok(header));
    assert_eq!(batch::checksum(bytes), header.crc);

    let mut count = 0u32;
    let mut max_timestamp = i64::MIN;
    for (index, record) in batch.records().enumerate() {
        assert_eq!(record.offset_delta as usize, index);
        let timestamp = header
            .first_timestamp
            .checked_add(record.timestamp_delta)
            .expect("accepted timestamps do not overflow");
        max_timestamp = max_timestamp.max(timestamp);
        // Headers were validated at decode; iterating them must not stop early (a debug
        // assertion inside the iterator fires if it does).
        for (name, value) in record.headers {
            assert!(name.len() <= usize::from(u16::MAX));
            assert!(value.len() <= bytes.len());
        }
        count += 1;
    }
    assert_eq!(count, header.record_count);
    assert_eq!(max_timestamp, header.max_timestamp);
    check_reencoding(batch);
}

/// Re-encoding the decoded records gives the same records; when the first record sits at the
/// batch's first timestamp (as the builder always writes it) and the batch is no control
/// batch, it gives the same bytes.
fn check_reencoding(batch: &RecordBatch) {
    let header = *batch.header();
    let mut builder = BatchBuilder::new(header.batch_length as usize);
    builder.producer(
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
    );
    for record in batch.records() {
        let headers: Vec<(&str, &[u8])> = record.headers.collect();
        let timestamp = header.first_timestamp + record.timestamp_delta;
        if builder
            .push(timestamp, record.key, record.value, &headers)
            .is_err()
        {
            // Two accepted timestamps may lie further apart than the builder's deltas reach
            // when the first record is not the earliest; nothing to compare then.
            return;
        }
    }
    let mut encoded = builder
        .finish()
        .expect("decoded producer fields are valid")
        .to_vec();
    batch::stamp(&mut encoded, header.base_offset, header.leader_epoch)
        .expect("encoded batch has a header");
    let again = RecordBatch::decode(Bytes::from(encoded)).expect("re-encoded batch decodes");
    // The builder measures deltas from the first record's timestamp.
    let first_delta = batch.records().next().map_or(0, |r| r.timestamp_delta);
    assert!(again.records().eq(batch.records().map(|mut r| {
        r.timestamp_delta -= first_delta;
        r
    })));
    // Producers cannot build control batches (only a leader writes them), so those differ in
    // their attributes and checksum.
    if first_delta == 0 && !header.is_control() {
        assert_eq!(again.as_bytes(), batch.as_bytes());
    }
}
