//! Round-trip properties of the frame codec, for every message type, and the decoder's
//! behaviour on arbitrary, truncated, split and corrupted input.

mod common;

use bytes::Bytes;
use common::strategies;
use common::{decode_one, encode, raw_frame};
use floe_wire::frame::{
    self, FrameDecoder, FrameFlags, FrameLimits, HEADER_LEN, MessageType, ProtocolVersion,
    RequestId,
};
use floe_wire::{Frame, Message};
use proptest::collection::vec;
use proptest::prelude::*;

const LIMITS: FrameLimits = FrameLimits::FORMAT_MAX;

/// Encode, frame, decode: the same message comes back under the same header, both encoders
/// agree byte for byte, and the decoded message re-encodes to the same bytes.
fn round_trip(message: Message, request_id: u64) -> Result<(), TestCaseError> {
    let bytes = encode(&message, request_id);
    let chunks = message
        .encode_chunks(ProtocolVersion::V1, RequestId::new(request_id))
        .expect("message encodes as chunks");
    prop_assert_eq!(chunks.frame_len(), bytes.len());
    prop_assert_eq!(&chunks.into_chunks().concat()[..], &bytes[..]);

    let frame = decode_one(&bytes, &LIMITS);
    prop_assert_eq!(frame.header.version, ProtocolVersion::V1);
    prop_assert_eq!(frame.header.message_type, message.message_type());
    prop_assert_eq!(frame.header.flags, FrameFlags::EMPTY);
    prop_assert_eq!(frame.header.request_id, RequestId::new(request_id));
    prop_assert_eq!(frame.header.payload_len as usize, bytes.len() - HEADER_LEN);
    let decoded = frame.message(&LIMITS).expect("encoded message decodes");
    prop_assert_eq!(&decoded, &message);
    prop_assert_eq!(encode(&decoded, request_id), bytes);
    Ok(())
}

/// Whatever a decoder accepts is canonical: it re-encodes to exactly the bytes it came from.
fn accepted_is_canonical(frame: &Frame) -> Result<(), TestCaseError> {
    if let Ok(message) = frame.message(&LIMITS) {
        prop_assert_eq!(message.message_type(), frame.header.message_type);
        let again = encode(&message, frame.header.request_id.get());
        prop_assert_eq!(&again[HEADER_LEN..], &frame.payload[..]);
    }
    Ok(())
}

proptest! {
    #[test]
    fn hello_round_trips(m in strategies::hello(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn hello_ack_round_trips(m in strategies::hello_ack(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn metadata_request_round_trips(m in strategies::metadata_request(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn metadata_response_round_trips(m in strategies::metadata_response(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn create_stream_round_trips(m in strategies::create_stream(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn create_stream_response_round_trips(
        m in strategies::create_stream_response(),
        id in any::<u64>(),
    ) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn delete_stream_round_trips(m in strategies::delete_stream(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn delete_stream_response_round_trips(
        m in strategies::delete_stream_response(),
        id in any::<u64>(),
    ) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn produce_round_trips(m in strategies::produce(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn produce_ack_round_trips(m in strategies::produce_ack(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn fetch_round_trips(m in strategies::fetch(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn fetch_response_round_trips(m in strategies::fetch_response(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn error_round_trips(m in strategies::error_response(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn replica_append_round_trips(m in strategies::replica_append(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn replica_ack_round_trips(m in strategies::replica_ack(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn replica_mismatch_round_trips(m in strategies::replica_mismatch(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    #[test]
    fn replica_stale_round_trips(m in strategies::replica_stale(), id in any::<u64>()) {
        round_trip(m.into(), id)?;
    }

    /// A stream of frames read in arbitrary pieces yields the same messages, in order.
    #[test]
    fn frames_split_anywhere_decode_in_order(
        messages in vec(strategies::message(), 1..5),
        piece_lens in vec(1usize..96, 1..64),
    ) {
        let stream: Vec<u8> = messages
            .iter()
            .enumerate()
            .flat_map(|(id, m)| encode(m, id as u64 + 1).to_vec())
            .collect();
        let mut decoder = FrameDecoder::new(LIMITS);
        let mut decoded = Vec::new();
        let mut rest = &stream[..];
        let mut pieces = piece_lens.iter().cycle();
        while !rest.is_empty() {
            let len = (*pieces.next().expect("cycle never ends")).min(rest.len());
            decoder.extend_from_slice(&rest[..len]);
            rest = &rest[len..];
            while let Some(frame) = decoder.next_frame().expect("valid stream") {
                decoded.push((frame.header.request_id, frame.message(&LIMITS).expect("valid")));
            }
        }
        prop_assert_eq!(decoder.buffered(), 0);
        prop_assert_eq!(decoder.bytes_needed(), Ok(HEADER_LEN));
        let expected: Vec<_> = messages
            .into_iter()
            .enumerate()
            .map(|(id, m)| (RequestId::new(id as u64 + 1), m))
            .collect();
        prop_assert_eq!(decoded, expected);
    }

    /// Reading exactly what `bytes_needed` asks for, a frame arrives in at most two reads.
    #[test]
    fn bytes_needed_leads_to_each_frame(message in strategies::message()) {
        let bytes = encode(&message, 9);
        let mut decoder = FrameDecoder::new(LIMITS);
        let mut read = 0;
        let mut reads = 0;
        let frame = loop {
            if let Some(frame) = decoder.next_frame().expect("valid frame") {
                break frame;
            }
            let wanted = decoder.bytes_needed().expect("valid header");
            prop_assert!(wanted > 0);
            decoder.extend_from_slice(&bytes[read..read + wanted]);
            read += wanted;
            reads += 1;
        };
        prop_assert_eq!(read, bytes.len());
        prop_assert!(reads <= 2);
        prop_assert_eq!(frame.message(&LIMITS), Ok(message));
    }

    /// Every strict prefix of a frame is "need more", with an honest count, never an error.
    #[test]
    fn every_prefix_of_a_frame_needs_more(message in strategies::message()) {
        let bytes = encode(&message, 3);
        for len in 0..bytes.len() {
            let prefix = bytes.slice(..len);
            prop_assert_eq!(frame::decode_frame(&prefix, &LIMITS), Ok(None));
            let needed = frame::bytes_needed(&prefix, &LIMITS).expect("valid prefix");
            prop_assert!(needed > 0 && len + needed <= bytes.len());
            if len >= HEADER_LEN {
                prop_assert_eq!(len + needed, bytes.len());
            }
        }
    }

    /// Any payload under a valid header of any type: an error or a message, never a panic,
    /// and whatever is accepted is canonical.
    #[test]
    fn arbitrary_payloads_never_panic(
        message_type in proptest::sample::select(MessageType::ALL.to_vec()),
        payload in vec(any::<u8>(), 0..300),
    ) {
        let bytes = raw_frame(message_type.as_u8(), 1, &payload);
        let frame = decode_one(&bytes, &LIMITS);
        accepted_is_canonical(&frame)?;
    }

    /// A valid frame with one byte changed: an error, "need more", or a canonical message.
    #[test]
    fn corrupted_frames_never_panic(
        message in strategies::message(),
        position in any::<prop::sample::Index>(),
        xor in 1u8..,
    ) {
        let mut bytes = encode(&message, 5).to_vec();
        let at = position.index(bytes.len());
        bytes[at] ^= xor;
        let bytes = Bytes::from(bytes);
        if let Ok(Some((frame, _))) = frame::decode_frame(&bytes, &LIMITS) {
            accepted_is_canonical(&frame)?;
        }
    }
}
