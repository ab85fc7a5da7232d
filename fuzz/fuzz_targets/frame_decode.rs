//! Fuzzes the frame decoder the way a reader of a QUIC stream drives it: frame after frame
//! until it needs more bytes or refuses the stream. Every message that decodes must
//! re-encode to exactly the bytes it came from and decode again to the same message.

#![no_main]

use floe_wire::frame::{FrameDecoder, FrameLimits, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

/// Tight limits, so that the limit checks are reached with small inputs too.
const TIGHT: FrameLimits = FrameLimits {
    max_frame_bytes: 4096,
    max_batch_bytes: 1024,
    max_list_entries: 16,
};

fuzz_target!(|data: &[u8]| {
    for limits in [FrameLimits::FORMAT_MAX, TIGHT] {
        decode_stream(data, &limits);
    }
});

fn decode_stream(data: &[u8], limits: &FrameLimits) {
    let mut decoder = FrameDecoder::new(*limits);
    decoder.extend_from_slice(data);
    while let Ok(Some(frame)) = decoder.next_frame() {
        let Ok(message) = frame.message(limits) else {
            // A bad payload costs its request only; the next frame is still framed.
            continue;
        };
        let encoded: Vec<u8> = message
            .encode_chunks(frame.header.version, frame.header.request_id)
            .expect("a decoded message re-encodes")
            .into_chunks()
            .iter()
            .flat_map(|chunk| chunk.iter().copied())
            .collect();
        assert_eq!(&encoded[HEADER_LEN..], &frame.payload[..], "encoding is canonical");

        let mut again = FrameDecoder::new(*limits);
        again.extend_from_slice(&encoded);
        let reframed = again
            .next_frame()
            .expect("the re-encoded header is accepted")
            .expect("the re-encoded frame is whole");
        assert_eq!(reframed.header, frame.header);
        assert_eq!(reframed.message(limits), Ok(message));
        assert_eq!(again.buffered(), 0);
    }
}
