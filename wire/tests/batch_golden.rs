//! Golden bytes for record-batch format version 1.
//!
//! `golden/batch_v1.hex` is the persisted format, written down once and annotated by hand
//! field by field. The encoder must reproduce it byte for byte, and the decoder must read it
//! back field by field: a change to either side that moves a byte fails here. Never
//! regenerate the fixture to make this test pass; a new layout is a new format version with
//! its own fixture, and this one stays readable.

use bytes::Bytes;
use floe_wire::batch::{self, FORMAT_VERSION, HEADER_LEN};
use floe_wire::{BatchBuilder, ControlKind, LeaderEpoch, Offset, RecordBatch};

const FIXTURE: &str = include_str!("golden/batch_v1.hex");

const BASE_OFFSET: u64 = 0x1000;
const LEADER_EPOCH: LeaderEpoch = LeaderEpoch::new(7);
const PRODUCER_ID: i64 = 42;
const PRODUCER_EPOCH: u16 = 3;
const BASE_SEQUENCE: i32 = 100;
const FIRST_TIMESTAMP: i64 = 1_700_000_000_000;

/// The fixed batch: a keyed record with a header, a record without key or headers that
/// carries the batch's largest timestamp, and a record with an empty key, an empty value, an
/// earlier timestamp and two headers (one with a non-ASCII name and a binary value).
fn golden_batch() -> Vec<u8> {
    let mut builder = BatchBuilder::new(1 << 20);
    builder.producer(PRODUCER_ID, PRODUCER_EPOCH, BASE_SEQUENCE);
    builder
        .push(
            FIRST_TIMESTAMP,
            Some(b"user-1"),
            b"hello",
            &[("trace", b"abc")],
        )
        .expect("record 0 fits");
    builder
        .push(FIRST_TIMESTAMP + 7, None, b"world", &[])
        .expect("record 1 fits");
    builder
        .push(
            FIRST_TIMESTAMP + 3,
            Some(b""),
            b"",
            &[("a", b""), ("\u{e9}", b"\x00\xff")],
        )
        .expect("record 2 fits");
    let mut bytes = builder.finish().expect("three records").to_vec();
    batch::stamp(&mut bytes, Offset::new(BASE_OFFSET), LEADER_EPOCH).expect("header present");
    bytes
}

/// Parses the fixture: hex digit pairs, whitespace ignored, `#` starts a comment to the end of
/// the line.
fn parse_hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .flat_map(str::bytes)
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    assert!(
        digits.len().is_multiple_of(2),
        "odd number of hex digits in fixture"
    );
    digits
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).expect("fixture is ASCII");
            u8::from_str_radix(pair, 16).expect("fixture holds only hex digits and comments")
        })
        .collect()
}

/// Sixteen bytes a line, prefixed by their position, so a mismatch shows where it is.
fn hex_rows(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .enumerate()
        .map(|(row, chunk)| {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            format!("{:04x}: {}\n", row * 16, hex.join(" "))
        })
        .collect()
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

#[test]
fn encoder_reproduces_the_golden_bytes() {
    let expected = parse_hex(FIXTURE);
    let actual = golden_batch();
    assert_eq!(hex_rows(&actual), hex_rows(&expected));
}

#[test]
fn golden_header_fields_sit_at_their_persisted_positions() {
    // Read straight from the fixture, independently of the decoder.
    let bytes = parse_hex(FIXTURE);
    assert_eq!(bytes.len(), 189);
    assert_eq!(bytes[0..8], BASE_OFFSET.to_le_bytes());
    assert_eq!(le_u32(&bytes, 8), 189);
    assert_eq!(bytes[12..16], LEADER_EPOCH.get().to_le_bytes());
    assert_eq!(le_u32(&bytes, 16), crc32c::crc32c(&bytes[20..]));
    assert_eq!(bytes[20], 1);
    assert_eq!(bytes[21], 0);
    assert_eq!(bytes[22..24], [0, 0]);
    assert_eq!(le_u32(&bytes, 24), 3);
    assert_eq!(bytes[28..30], PRODUCER_EPOCH.to_le_bytes());
    assert_eq!(bytes[30..32], [0, 0]);
    assert_eq!(bytes[32..40], FIRST_TIMESTAMP.to_le_bytes());
    assert_eq!(bytes[40..48], (FIRST_TIMESTAMP + 7).to_le_bytes());
    assert_eq!(bytes[48..56], PRODUCER_ID.to_le_bytes());
    assert_eq!(bytes[56..60], BASE_SEQUENCE.to_le_bytes());
    assert_eq!(bytes[60..64], [0, 0, 0, 0]);
}

#[test]
fn golden_bytes_decode_to_every_field() {
    let batch = RecordBatch::decode(Bytes::from(parse_hex(FIXTURE))).expect("golden is valid");
    let header = *batch.header();
    assert_eq!(header.base_offset, Offset::new(BASE_OFFSET));
    assert_eq!(header.batch_length, 189);
    assert_eq!(header.leader_epoch, LEADER_EPOCH);
    assert_eq!(header.crc, batch::checksum(batch.as_bytes()));
    assert_eq!(header.attributes, 0);
    assert_eq!(header.record_count, 3);
    assert_eq!(header.producer_epoch, PRODUCER_EPOCH);
    assert_eq!(header.first_timestamp, FIRST_TIMESTAMP);
    assert_eq!(header.max_timestamp, FIRST_TIMESTAMP + 7);
    assert_eq!(header.producer_id, PRODUCER_ID);
    assert_eq!(header.base_sequence, BASE_SEQUENCE);
    assert!(header.has_producer());
    assert_eq!(header.last_offset(), Offset::new(BASE_OFFSET + 2));
    assert_eq!(header.next_offset(), Offset::new(BASE_OFFSET + 3));
    assert_eq!(header.last_sequence(), BASE_SEQUENCE + 2);
    assert_eq!(batch.as_bytes().len(), HEADER_LEN + 125);
    assert_eq!(batch.as_bytes()[20], FORMAT_VERSION);

    let records: Vec<_> = batch.records().collect();
    assert_eq!(records.len(), 3);

    assert_eq!(records[0].offset_delta, 0);
    assert_eq!(records[0].timestamp_delta, 0);
    assert_eq!(records[0].key, Some(&b"user-1"[..]));
    assert_eq!(records[0].value, b"hello");
    assert_eq!(
        records[0].headers.collect::<Vec<_>>(),
        [("trace", &b"abc"[..])]
    );

    assert_eq!(records[1].offset_delta, 1);
    assert_eq!(records[1].timestamp_delta, 7);
    assert_eq!(records[1].key, None);
    assert_eq!(records[1].value, b"world");
    assert_eq!(records[1].headers.count(), 0);

    assert_eq!(records[2].offset_delta, 2);
    assert_eq!(records[2].timestamp_delta, 3);
    assert_eq!(records[2].key, Some(&b""[..]));
    assert_eq!(records[2].value, b"");
    assert_eq!(
        records[2].headers.collect::<Vec<_>>(),
        [("a", &b""[..]), ("\u{e9}", &b"\x00\xff"[..])]
    );
}

#[test]
fn golden_bytes_split_from_a_stream_of_batches() {
    let one = parse_hex(FIXTURE);
    let mut stream = one.clone();
    stream.extend_from_slice(&one);
    let stream = Bytes::from(stream);
    let (first, rest) = RecordBatch::decode_prefix(&stream).expect("first batch");
    assert_eq!(first.as_bytes()[..], one[..]);
    let (second, rest) = RecordBatch::decode_prefix(&rest).expect("second batch");
    assert_eq!(second.as_bytes()[..], one[..]);
    assert!(rest.is_empty());
}

const CONTROL_FIXTURE: &str = include_str!("golden/control_v1.hex");

/// The epoch-start marker a leader of epoch 7 writes at offset 4096.
fn golden_control_batch() -> Vec<u8> {
    let mut bytes = batch::control_batch(ControlKind::EpochStart, FIRST_TIMESTAMP).to_vec();
    batch::stamp(&mut bytes, Offset::new(BASE_OFFSET), LEADER_EPOCH).expect("header present");
    bytes
}

#[test]
fn encoder_reproduces_the_golden_control_batch() {
    let expected = parse_hex(CONTROL_FIXTURE);
    assert_eq!(hex_rows(&golden_control_batch()), hex_rows(&expected));
}

#[test]
fn golden_control_batch_decodes_as_a_marker() {
    let batch = RecordBatch::decode(Bytes::from(parse_hex(CONTROL_FIXTURE))).expect("valid");
    let header = batch.header();
    assert!(header.is_control());
    assert_eq!(header.attributes, batch::ATTR_CONTROL);
    assert_eq!(header.base_offset, Offset::new(BASE_OFFSET));
    assert_eq!(header.leader_epoch, LEADER_EPOCH);
    assert_eq!(header.record_count, 1);
    assert!(!header.has_producer());
    assert_eq!(header.first_timestamp, FIRST_TIMESTAMP);
    assert_eq!(batch.control_kind(), Some(ControlKind::EpochStart));
    let record = batch.records().next().expect("one record");
    assert_eq!(record.key, Some(&[0u8, 0, 1, 0][..]));
    assert!(record.value.is_empty());
    // An ordinary batch is no control batch.
    let data = RecordBatch::decode(Bytes::from(parse_hex(FIXTURE))).expect("valid");
    assert!(!data.header().is_control());
    assert_eq!(data.control_kind(), None);
}
