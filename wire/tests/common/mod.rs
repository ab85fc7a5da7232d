//! Helpers shared by the frame test files: fixtures, sample batches and encoding shortcuts.

#![allow(dead_code)] // each test file uses a different subset

use bytes::{Bytes, BytesMut};
use floe_wire::frame::{self, Frame, FrameLimits, Message, ProtocolVersion, RequestId};
use floe_wire::{BatchBuilder, LeaderEpoch, Offset, StreamName, batch};

/// First timestamp of the sample batches.
pub const TIMESTAMP: i64 = 1_700_000_000_000;

/// Parses a fixture: hex digit pairs, whitespace ignored, `#` starts a comment to the end of
/// the line.
pub fn parse_hex(text: &str) -> Vec<u8> {
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
pub fn hex_rows(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .enumerate()
        .map(|(row, chunk)| {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            format!("{:04x}: {}\n", row * 16, hex.join(" "))
        })
        .collect()
}

pub fn name(text: &str) -> StreamName {
    StreamName::new(text).expect("valid stream name")
}

/// Batch `index` (0 or 1) of the sample producer: id 42, epoch 3, one record each, as the
/// producer sends it (base offset and leader epoch zero).
pub fn produced_batch(index: usize) -> Bytes {
    let mut builder = BatchBuilder::new(1 << 20);
    builder.producer(42, 3, index as i32);
    let value: &[u8] = [b"hi", b"yo"][index];
    builder
        .push(TIMESTAMP + 5 * index as i64, None, value, &[])
        .expect("record fits");
    builder.finish().expect("one record")
}

/// The same batch as the leader stores it: stamped with its base offset and leader epoch.
pub fn stored_batch(index: usize, base_offset: u64, leader_epoch: u32) -> Bytes {
    let mut bytes = produced_batch(index).to_vec();
    batch::stamp(
        &mut bytes,
        Offset::new(base_offset),
        LeaderEpoch::new(leader_epoch),
    )
    .expect("header present");
    Bytes::from(bytes)
}

/// Encodes `message` as one frame in version 1.
pub fn encode(message: &Message, request_id: u64) -> Bytes {
    let mut buf = BytesMut::new();
    message
        .encode(ProtocolVersion::V1, RequestId::new(request_id), &mut buf)
        .expect("message encodes");
    buf.freeze()
}

/// Decodes exactly one whole frame from `bytes` under `limits`.
pub fn decode_one(bytes: &Bytes, limits: &FrameLimits) -> Frame {
    let (frame, consumed) = frame::decode_frame(bytes, limits)
        .expect("header accepted")
        .expect("whole frame present");
    assert_eq!(consumed, bytes.len(), "one frame uses every byte");
    frame
}

/// A frame with a valid header of `message_type` around an arbitrary `payload`.
pub fn raw_frame(message_type: u8, request_id: u64, payload: &[u8]) -> Bytes {
    let mut bytes = Vec::with_capacity(frame::HEADER_LEN + payload.len());
    bytes.extend_from_slice(&frame::MAGIC);
    bytes.extend_from_slice(&[1, message_type, 0, 0]);
    bytes.extend_from_slice(&request_id.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(payload);
    Bytes::from(bytes)
}
pub mod strategies;
