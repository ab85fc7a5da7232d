//! A segment's sparse index: offset → byte position and time → offset, in one table, and its
//! file format. The data is the truth; an index that disagrees with it is rebuilt.
//!
//! ```text
//! index file := header (48 bytes) entry*
//! header     := u32 magic "FLIX" | u8 version (1) | 3 × u8 zero
//!             | u64 base_offset | u64 next_offset | u64 segment_bytes | i64 max_timestamp
//!             | u32 entry_count | u32 crc32c (of the header before it, then the entries)
//! entry      := u32 relative_offset | u32 position | i64 max_timestamp_so_far
//! ```

use floe_wire::Offset;

pub(crate) const INDEX_MAGIC: [u8; 4] = *b"FLIX";
pub(crate) const INDEX_VERSION: u8 = 1;
pub(crate) const INDEX_HEADER_LEN: usize = 48;
pub(crate) const INDEX_ENTRY_LEN: usize = 16;

/// One index entry: the batch at `position` starts at `base + relative_offset`, and no batch
/// up to and including it has a timestamp above `max_timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
    pub max_timestamp: i64,
}

/// The in-memory index of a segment.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentIndex {
    /// Strictly increasing in both offset and position; the first batch always has one.
    pub entries: Vec<IndexEntry>,
    /// Bytes appended since the last entry.
    bytes_since_entry: u64,
    /// Largest timestamp of every batch appended so far.
    running_max_timestamp: Option<i64>,
}

/// What an index file says about its segment.
#[derive(Debug, Clone)]
pub(crate) struct IndexFile {
    pub next_offset: Offset,
    pub max_timestamp: i64,
    pub index: SegmentIndex,
}

impl SegmentIndex {
    /// Records a batch appended at `position`; adds an entry every `interval` bytes.
    pub fn on_append(
        &mut self,
        relative_offset: u32,
        position: u32,
        len: u32,
        max_ts: i64,
        interval: u32,
    ) {
        let running_max = self.running_max_timestamp.map_or(max_ts, |m| m.max(max_ts));
        self.running_max_timestamp = Some(running_max);
        if self.entries.is_empty() || self.bytes_since_entry >= u64::from(interval) {
            self.entries.push(IndexEntry {
                relative_offset,
                position,
                max_timestamp: running_max,
            });
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += u64::from(len);
    }

    /// The last entry at or before `relative_offset`: where a scan for it starts.
    pub fn floor_for_offset(&self, relative_offset: u32) -> Option<IndexEntry> {
        let i = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The entry to start scanning from for the first batch with a timestamp ≥ `timestamp`.
    pub fn floor_for_timestamp(&self, timestamp: i64) -> Option<IndexEntry> {
        let i = self
            .entries
            .partition_point(|e| e.max_timestamp < timestamp);
        // Entry i is the first whose prefix reaches `timestamp`; the batch sought lies after
        // entry i-1.
        i.checked_sub(1)
            .or(Some(0))
            .and_then(|i| self.entries.get(i).copied())
    }

    pub fn encode(
        &self,
        base: Offset,
        next_offset: Offset,
        segment_bytes: u64,
        max_ts: i64,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(INDEX_HEADER_LEN + self.entries.len() * INDEX_ENTRY_LEN);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&[INDEX_VERSION, 0, 0, 0]);
        out.extend_from_slice(&base.get().to_le_bytes());
        out.extend_from_slice(&next_offset.get().to_le_bytes());
        out.extend_from_slice(&segment_bytes.to_le_bytes());
        out.extend_from_slice(&max_ts.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for e in &self.entries {
            out.extend_from_slice(&e.relative_offset.to_le_bytes());
            out.extend_from_slice(&e.position.to_le_bytes());
            out.extend_from_slice(&e.max_timestamp.to_le_bytes());
        }
        let crc = index_crc(&out);
        out[44..48].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and checks an index file against its segment; `Err` says why it cannot be
    /// trusted (the caller rebuilds it from the data).
    pub fn decode(
        bytes: &[u8],
        base: Offset,
        segment_bytes: u64,
    ) -> Result<IndexFile, &'static str> {
        let header = decode_header(bytes, base, segment_bytes)?;
        let entries = decode_entries(
            &bytes[INDEX_HEADER_LEN..],
            header.count,
            header.span,
            segment_bytes,
        )?;
        Ok(IndexFile {
            next_offset: header.next_offset,
            max_timestamp: header.max_timestamp,
            index: SegmentIndex {
                entries,
                bytes_since_entry: 0,
                running_max_timestamp: None,
            },
        })
    }
}

/// What an index file's header says, once checked against its segment.
struct IndexHeader {
    next_offset: Offset,
    max_timestamp: i64,
    /// Entries that follow; the file's length agrees.
    count: usize,
    /// Offsets the segment holds: at least 1, at most `u32::MAX`.
    span: u64,
}

/// Parses and checks the header of the index file `bytes` (the checksum covers the entries
/// too).
fn decode_header(
    bytes: &[u8],
    base: Offset,
    segment_bytes: u64,
) -> Result<IndexHeader, &'static str> {
    if bytes.len() < INDEX_HEADER_LEN {
        return Err("shorter than its header");
    }
    if bytes[0..4] != INDEX_MAGIC || bytes[4] != INDEX_VERSION || bytes[5..8] != [0, 0, 0] {
        return Err("bad magic or version");
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if index_crc(bytes) != u32_at(44) {
        return Err("checksum mismatch");
    }
    if u64_at(8) != base.get() {
        return Err("base offset differs from the file name");
    }
    let next_offset = Offset::new(u64_at(16));
    if u64_at(24) != segment_bytes {
        return Err("segment length differs from the data file");
    }
    let count = u32_at(40) as usize;
    if bytes.len() != INDEX_HEADER_LEN + count * INDEX_ENTRY_LEN {
        return Err("entry count differs from the file length");
    }
    let span = next_offset.distance_from(base);
    if span == 0 || span > u64::from(u32::MAX) || count == 0 {
        return Err("empty or impossible offset range");
    }
    Ok(IndexHeader {
        next_offset,
        max_timestamp: i64::from_le_bytes(bytes[32..40].try_into().map_err(|_| "header")?),
        count,
        span,
    })
}

/// Parses the `count` entries of an index file, checking that they are ordered and within
/// the segment's `span` offsets and `segment_bytes`.
fn decode_entries(
    bytes: &[u8],
    count: usize,
    span: u64,
    segment_bytes: u64,
) -> Result<Vec<IndexEntry>, &'static str> {
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(count);
    for chunk in bytes.chunks_exact(INDEX_ENTRY_LEN) {
        let rel = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let pos = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&chunk[8..16]);
        let entry = IndexEntry {
            relative_offset: rel,
            position: pos,
            max_timestamp: i64::from_le_bytes(ts),
        };
        let ordered = match entries.last() {
            None => rel == 0 && pos == 0,
            Some(prev) => {
                rel > prev.relative_offset
                    && pos > prev.position
                    && entry.max_timestamp >= prev.max_timestamp
            }
        };
        if !ordered || u64::from(pos) >= segment_bytes || u64::from(rel) >= span {
            return Err("entries out of order or out of range");
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn index_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&bytes[..44]);
    crc32c::crc32c_append(crc, &bytes[INDEX_HEADER_LEN..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_of(batches: &[(u32, u32, i64)]) -> SegmentIndex {
        let mut index = SegmentIndex::default();
        for &(rel, len, ts) in batches {
            index.on_append(rel, rel * 100, len, ts, 150);
        }
        index
    }

    #[test]
    fn entries_are_sparse_by_bytes() {
        // Batches of 100 bytes at positions 0,100,200,...: an entry every ≥150 bytes.
        let index = index_of(&[
            (0, 100, 5),
            (1, 100, 3),
            (2, 100, 9),
            (3, 100, 1),
            (4, 100, 2),
        ]);
        let positions: Vec<u32> = index.entries.iter().map(|e| e.position).collect();
        assert_eq!(positions, vec![0, 200, 400]);
        let times: Vec<i64> = index.entries.iter().map(|e| e.max_timestamp).collect();
        assert_eq!(times, vec![5, 9, 9]);
    }

    #[test]
    fn offset_lookup_finds_the_floor_entry() {
        let index = index_of(&[(0, 100, 1), (1, 100, 2), (2, 100, 3), (3, 100, 4)]);
        assert_eq!(index.floor_for_offset(0).map(|e| e.position), Some(0));
        assert_eq!(index.floor_for_offset(1).map(|e| e.position), Some(0));
        assert_eq!(index.floor_for_offset(3).map(|e| e.position), Some(200));
    }

    #[test]
    fn timestamp_lookup_starts_before_the_first_batch_reaching_it() {
        let index = index_of(&[
            (0, 100, 10),
            (1, 100, 20),
            (2, 100, 30),
            (3, 100, 40),
            (4, 100, 50),
        ]);
        // entries at 0 (ts 10), 200 (ts 30), 400 (ts 50)
        assert_eq!(index.floor_for_timestamp(5).map(|e| e.position), Some(0));
        assert_eq!(index.floor_for_timestamp(25).map(|e| e.position), Some(0));
        assert_eq!(index.floor_for_timestamp(31).map(|e| e.position), Some(200));
        assert_eq!(index.floor_for_timestamp(99).map(|e| e.position), Some(400));
    }

    #[test]
    fn index_file_round_trips_and_rejects_tampering() {
        let index = index_of(&[(0, 100, 10), (1, 100, 20), (2, 100, 30)]);
        let base = Offset::new(1000);
        let bytes = index.encode(base, Offset::new(1003), 300, 30);
        let decoded = SegmentIndex::decode(&bytes, base, 300).expect("valid index");
        assert_eq!(decoded.index.entries, index.entries);
        assert_eq!(decoded.next_offset, Offset::new(1003));
        assert_eq!(decoded.max_timestamp, 30);
        assert_eq!(
            SegmentIndex::decode(&bytes, base, 301).err(),
            Some("segment length differs from the data file")
        );
        assert_eq!(
            SegmentIndex::decode(&bytes, Offset::new(7), 300).err(),
            Some("base offset differs from the file name")
        );
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                SegmentIndex::decode(&bad, base, 300).is_err(),
                "flip at {i} accepted"
            );
        }
        assert!(SegmentIndex::decode(&bytes[..bytes.len() - 1], base, 300).is_err());
    }
}
