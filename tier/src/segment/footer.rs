//! The footer of a segment object and its trailer: a pure, bounded codec (no I/O). The decoder
//! never panics and never allocates more than its input justifies.
//!
//! ```text
//! object  := data footer trailer
//! footer  := u8 version (1) | 3 × u8 zero
//!          | u64 base_offset | u64 next_offset | u64 data_len | u64 record_count
//!          | i64 max_timestamp | u32 data_crc32c | u32 entry_count
//!          | entry_count × entry
//! entry   := u32 relative_offset | u32 position | i64 max_timestamp_so_far     (16 bytes)
//! trailer := u32 footer_len | u32 footer_crc32c | 8 × u8 magic "FLOETIER"     (16 bytes)
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use floe_wire::Offset;

use crate::CorruptReason;

/// Current footer version (stable; decoders keep accepting every version ever written).
pub const FOOTER_VERSION: u8 = 1;
/// Last eight bytes of every segment object.
pub const TRAILER_MAGIC: [u8; 8] = *b"FLOETIER";
/// The trailer's fixed size.
pub const TRAILER_LEN: usize = 16;
pub(crate) const FOOTER_HEADER_LEN: usize = 52;
pub(crate) const ENTRY_LEN: usize = 16;
/// Largest footer a decoder accepts: 1M entries.
pub(crate) const FOOTER_LEN_MAX: u32 = (FOOTER_HEADER_LEN + (1 << 20) * ENTRY_LEN) as u32;

/// One index entry: the batch at byte `position` of the data starts at offset
/// `base_offset + relative_offset`; no batch up to and including it has a timestamp above
/// `max_timestamp`. Entries are strictly increasing in offset and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FooterEntry {
    pub relative_offset: u32,
    pub position: u32,
    pub max_timestamp: i64,
}

/// What a segment object says about its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footer {
    pub base_offset: Offset,
    /// Offset after the last record; greater than `base_offset`.
    pub next_offset: Offset,
    /// Bytes of batches before the footer.
    pub data_len: u64,
    pub record_count: u64,
    pub max_timestamp: i64,
    /// CRC32C of the data bytes.
    pub data_crc32c: u32,
    /// The offset and time index; the first entry is the first batch.
    pub entries: Vec<FooterEntry>,
}

impl Footer {
    /// Footer and trailer bytes, to be appended to the data.
    pub fn encode(&self) -> Bytes {
        let footer_len = FOOTER_HEADER_LEN + self.entries.len() * ENTRY_LEN;
        let mut out = BytesMut::with_capacity(footer_len + TRAILER_LEN);
        out.put_u8(FOOTER_VERSION);
        out.put_bytes(0, 3);
        out.put_u64_le(self.base_offset.get());
        out.put_u64_le(self.next_offset.get());
        out.put_u64_le(self.data_len);
        out.put_u64_le(self.record_count);
        out.put_i64_le(self.max_timestamp);
        out.put_u32_le(self.data_crc32c);
        out.put_u32_le(self.entries.len() as u32);
        for e in &self.entries {
            out.put_u32_le(e.relative_offset);
            out.put_u32_le(e.position);
            out.put_i64_le(e.max_timestamp);
        }
        let crc = crc32c::crc32c(&out);
        out.put_u32_le(footer_len as u32);
        out.put_u32_le(crc);
        out.put_slice(&TRAILER_MAGIC);
        out.freeze()
    }

    /// Reads the trailer (the object's last [`TRAILER_LEN`] bytes) of an object of
    /// `object_size` bytes; returns the footer's length.
    pub fn footer_len(trailer: &[u8], object_size: u64) -> Result<u32, CorruptReason> {
        let trailer: &[u8; TRAILER_LEN] = trailer
            .try_into()
            .map_err(|_| CorruptReason::TooShort { size: object_size })?;
        if trailer[8..] != TRAILER_MAGIC {
            return Err(CorruptReason::Magic);
        }
        let footer_len = u32_at(trailer, 0);
        let fits = u64::from(footer_len) + TRAILER_LEN as u64 <= object_size;
        if !fits || footer_len > FOOTER_LEN_MAX || (footer_len as usize) < FOOTER_HEADER_LEN {
            return Err(CorruptReason::FooterLength {
                footer_len,
                size: object_size,
            });
        }
        Ok(footer_len)
    }

    /// Decodes the footer from the object's tail: `tail` is the last bytes of an object of
    /// `object_size` bytes and must hold at least the footer and trailer.
    pub fn decode(tail: &[u8], object_size: u64) -> Result<Footer, CorruptReason> {
        if tail.len() < TRAILER_LEN || tail.len() as u64 > object_size {
            return Err(CorruptReason::TooShort { size: object_size });
        }
        let (rest, trailer) = tail.split_at(tail.len() - TRAILER_LEN);
        let footer_len = Footer::footer_len(trailer, object_size)? as usize;
        if rest.len() < footer_len {
            return Err(CorruptReason::TooShort { size: object_size });
        }
        let footer = &rest[rest.len() - footer_len..];
        let stored = u32_at(trailer, 4);
        let computed = crc32c::crc32c(footer);
        if stored != computed {
            return Err(CorruptReason::FooterChecksum { stored, computed });
        }
        let data_len_in_object = object_size - (footer_len + TRAILER_LEN) as u64;
        decode_footer(footer, data_len_in_object)
    }

    /// The entry to start from for `offset`: the last one at or below it.
    pub fn entry_for(&self, offset: Offset) -> Option<FooterEntry> {
        let relative = offset.get().checked_sub(self.base_offset.get())?;
        let i = self
            .entries
            .partition_point(|e| u64::from(e.relative_offset) <= relative);
        self.entries.get(i.checked_sub(1)?).copied()
    }

    /// The position of the first batch holding a record at or after `timestamp`, as the entry
    /// to scan from; `None` when every record is older.
    pub fn entry_for_timestamp(&self, timestamp: i64) -> Option<FooterEntry> {
        if self.max_timestamp < timestamp {
            return None;
        }
        let i = self
            .entries
            .partition_point(|e| e.max_timestamp < timestamp);
        // The batch reaching `timestamp` lies between the previous entry and this one.
        self.entries.get(i.saturating_sub(1)).copied()
    }

    /// Where the data of the entry after `entry` starts (or the data's end).
    pub fn end_of_entry(&self, entry: &FooterEntry) -> u64 {
        let i = self
            .entries
            .partition_point(|e| e.position <= entry.position);
        self.entries
            .get(i)
            .map_or(self.data_len, |e| u64::from(e.position))
    }
}

fn decode_footer(footer: &[u8], data_len_in_object: u64) -> Result<Footer, CorruptReason> {
    if footer[0] != FOOTER_VERSION {
        return Err(CorruptReason::Version(footer[0]));
    }
    if footer[1..4] != [0, 0, 0] {
        return Err(CorruptReason::Field("reserved"));
    }
    let base_offset = u64_at(footer, 4);
    let next_offset = u64_at(footer, 12);
    let data_len = u64_at(footer, 20);
    let record_count = u64_at(footer, 28);
    let max_timestamp = u64_at(footer, 36) as i64;
    let data_crc32c = u32_at(footer, 44);
    let entry_count = u32_at(footer, 48) as usize;
    if data_len != data_len_in_object {
        return Err(CorruptReason::Field("data_len"));
    }
    if next_offset <= base_offset || next_offset > Offset::MAX.get() {
        return Err(CorruptReason::Field("next_offset"));
    }
    if record_count != next_offset - base_offset {
        return Err(CorruptReason::Field("record_count"));
    }
    let entries_bytes = &footer[FOOTER_HEADER_LEN..];
    if entries_bytes.len() != entry_count.saturating_mul(ENTRY_LEN) || entry_count == 0 {
        return Err(CorruptReason::Field("entry_count"));
    }
    let mut entries = Vec::with_capacity(entry_count);
    for raw in entries_bytes.chunks_exact(ENTRY_LEN) {
        let entry = FooterEntry {
            relative_offset: u32_at(raw, 0),
            position: u32_at(raw, 4),
            max_timestamp: u64_at(raw, 8) as i64,
        };
        check_entry(
            entries.last(),
            &entry,
            record_count,
            data_len,
            max_timestamp,
        )?;
        entries.push(entry);
    }
    Ok(Footer {
        base_offset: Offset::new(base_offset),
        next_offset: Offset::new(next_offset),
        data_len,
        record_count,
        max_timestamp,
        data_crc32c,
        entries,
    })
}

fn check_entry(
    previous: Option<&FooterEntry>,
    entry: &FooterEntry,
    record_count: u64,
    data_len: u64,
    max_timestamp: i64,
) -> Result<(), CorruptReason> {
    match previous {
        None if entry.relative_offset != 0 || entry.position != 0 => {
            return Err(CorruptReason::Field("first entry"));
        }
        Some(p)
            if entry.relative_offset <= p.relative_offset
                || entry.position <= p.position
                || entry.max_timestamp < p.max_timestamp =>
        {
            return Err(CorruptReason::Field("entry order"));
        }
        _ => {}
    }
    if u64::from(entry.relative_offset) >= record_count
        || u64::from(entry.position) >= data_len
        || entry.max_timestamp > max_timestamp
    {
        return Err(CorruptReason::Field("entry range"));
    }
    Ok(())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(raw)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Footer {
        Footer {
            base_offset: Offset::new(100),
            next_offset: Offset::new(130),
            data_len: 9000,
            record_count: 30,
            max_timestamp: 1_700_000_000_500,
            data_crc32c: 0xDEAD_BEEF,
            entries: vec![
                FooterEntry {
                    relative_offset: 0,
                    position: 0,
                    max_timestamp: 1_700_000_000_000,
                },
                FooterEntry {
                    relative_offset: 10,
                    position: 4096,
                    max_timestamp: 1_700_000_000_500,
                },
            ],
        }
    }

    /// The version 1 footer of [`sample`], byte for byte (stable: never edit, only add).
    const GOLDEN_V1: &str = concat!(
        "01000000",         // version, reserved
        "6400000000000000", // base_offset 100
        "8200000000000000", // next_offset 130
        "2823000000000000", // data_len 9000
        "1e00000000000000", // record_count 30
        "f469e5cf8b010000", // max_timestamp
        "efbeadde",         // data_crc32c
        "02000000",         // entry_count
        "00000000",
        "00000000",
        "0068e5cf8b010000", // entry 0
        "0a000000",
        "00100000",
        "f469e5cf8b010000", // entry 1
        "54000000",         // trailer: footer_len 84
    );

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn footer_v1_golden_bytes() {
        let encoded = sample().encode();
        let footer_len = 84;
        assert_eq!(encoded.len(), footer_len + TRAILER_LEN);
        assert_eq!(hex(&encoded[..footer_len + 4]), GOLDEN_V1);
        let crc = crc32c::crc32c(&encoded[..footer_len]);
        assert_eq!(encoded[footer_len + 4..footer_len + 8], crc.to_le_bytes());
        assert_eq!(&encoded[footer_len + 8..], b"FLOETIER");
    }

    #[test]
    fn footer_round_trips_behind_its_data() {
        let footer = sample();
        let mut object = vec![0u8; 9000];
        object.extend_from_slice(&footer.encode());
        let decoded = Footer::decode(&object, object.len() as u64).expect("decodes");
        assert_eq!(decoded, footer);
        let tail = &object[object.len() - 100..];
        assert_eq!(Footer::decode(tail, object.len() as u64), Ok(footer));
    }

    #[test]
    fn the_fuzz_seed_written_by_another_encoder_decodes() {
        let seed = include_bytes!("../../../fuzz/seeds/segment_footer/two-entries.bin");
        let footer = Footer::decode(seed, seed.len() as u64).expect("decodes");
        assert_eq!(footer.base_offset, Offset::new(100));
        assert_eq!(footer.data_len, 100);
        assert_eq!(footer.entries[1].position, 50);
        assert_eq!(&footer.encode()[..], &seed[100..]);
    }

    #[test]
    fn every_flipped_byte_of_the_footer_is_detected() {
        let footer = sample();
        let mut object = vec![0u8; 9000];
        object.extend_from_slice(&footer.encode());
        for i in 9000..object.len() {
            let mut bad = object.clone();
            bad[i] ^= 0x40;
            assert!(
                Footer::decode(&bad, bad.len() as u64).is_err(),
                "flip at {i} went unnoticed"
            );
        }
    }

    #[test]
    fn a_lookup_finds_the_entry_at_or_below_the_offset() {
        let footer = sample();
        let at = |o| footer.entry_for(Offset::new(o)).map(|e| e.position);
        assert_eq!(at(99), None);
        assert_eq!(at(100), Some(0));
        assert_eq!(at(109), Some(0));
        assert_eq!(at(110), Some(4096));
        assert_eq!(at(129), Some(4096));
        assert_eq!(footer.end_of_entry(&footer.entries[0]), 4096);
        assert_eq!(footer.end_of_entry(&footer.entries[1]), 9000);
        let by_time = |t| footer.entry_for_timestamp(t).map(|e| e.position);
        assert_eq!(by_time(0), Some(0));
        assert_eq!(by_time(1_700_000_000_200), Some(0));
        assert_eq!(by_time(1_700_000_000_600), None);
    }

    #[test]
    fn short_and_oversized_inputs_are_errors() {
        assert_eq!(
            Footer::decode(&[0; 4], 4),
            Err(CorruptReason::TooShort { size: 4 })
        );
        let mut trailer = [0u8; TRAILER_LEN];
        trailer[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        trailer[8..].copy_from_slice(&TRAILER_MAGIC);
        assert!(matches!(
            Footer::footer_len(&trailer, u64::MAX),
            Err(CorruptReason::FooterLength { .. })
        ));
    }
}
