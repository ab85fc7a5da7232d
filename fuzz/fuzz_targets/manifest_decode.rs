//! Fuzz target: arbitrary bytes into the tier manifest's document decoders (a version and a
//! checkpoint). Any input may be rejected, none may panic; an accepted version re-encodes to a
//! document that decodes to the same change, an accepted checkpoint holds a contiguous state,
//! and applying an accepted change to it never panics.

#![no_main]

use floe_tier::manifest::{decode_checkpoint, decode_version, encode_version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let version = decode_version(data);
    if let Ok((number, change)) = &version {
        let again = decode_version(&encode_version(*number, change));
        assert_eq!(again.as_ref(), Ok(&(*number, change.clone())));
    }
    let Ok(state) = decode_checkpoint(data) else {
        return;
    };
    for pair in state.segments.windows(2) {
        assert_eq!(pair[0].next_offset, pair[1].base_offset);
    }
    if let Ok((_, change)) = version {
        if let Ok(next) = state.apply(&change) {
            assert_eq!(next.version, state.version + 1);
        }
    }
    let _ = state.data_bytes();
    let _ = state.segment_for(floe_wire::Offset::new(state.tier_end().get().saturating_sub(1)));
});
