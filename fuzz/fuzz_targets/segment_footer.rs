//! Fuzz target: arbitrary bytes as the tail of a tiered segment object, into the footer
//! decoder (`Footer::decode`). Any input may be rejected, none may panic, and whatever is
//! accepted must hold together and re-encode to the same bytes.

#![no_main]

use floe_tier::segment::{Footer, TRAILER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The input is the whole object; also try it as the tail of a larger one.
    check(data, data.len() as u64);
    check(data, data.len() as u64 + 1000);
    // Random bytes rarely carry a matching footer CRC; seal a copy so the fuzzer reaches the
    // field checks too.
    if let Some(sealed) = sealed(data) {
        check(&sealed, sealed.len() as u64);
    }
});

fn check(tail: &[u8], object_size: u64) {
    let Ok(footer) = Footer::decode(tail, object_size) else {
        return;
    };
    assert_eq!(footer.record_count, footer.next_offset.get() - footer.base_offset.get());
    assert!(!footer.entries.is_empty());
    for pair in footer.entries.windows(2) {
        assert!(pair[0].relative_offset < pair[1].relative_offset);
        assert!(pair[0].position < pair[1].position);
    }
    let encoded = footer.encode();
    assert_eq!(&tail[tail.len() - encoded.len()..], &encoded[..]);
    assert_eq!(footer.data_len + encoded.len() as u64, object_size);
}

/// `data` with the trailer's footer CRC set to the checksum its declared length calls for.
fn sealed(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < TRAILER_LEN {
        return None;
    }
    let trailer = data.len() - TRAILER_LEN;
    let footer_len = u32::from_le_bytes(data[trailer..trailer + 4].try_into().ok()?) as usize;
    let footer = data.get(trailer.checked_sub(footer_len)?..trailer)?;
    let crc = crc32c::crc32c(footer);
    let mut copy = data.to_vec();
    copy[trailer + 4..trailer + 8].copy_from_slice(&crc.to_le_bytes());
    Some(copy)
}
