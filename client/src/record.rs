//! Records as an application sees them: [`ProducerRecord`] going out, [`ConsumedRecord`]
//! coming back. Payloads are [`Bytes`], so a consumed record shares the fetched frame's
//! memory instead of copying it.

use bytes::Bytes;
use floe_wire::{Offset, PartitionId};

/// A record to publish.
///
/// Without an explicit partition, a keyed record goes to the partition its key hashes to
/// (so one key always lands in one partition) and a keyless one to the partition currently
/// being filled, moving round-robin to the next one each time a batch is sealed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Bytes,
    /// `(name, value)` pairs, kept in order.
    pub headers: Vec<(String, Bytes)>,
    /// Milliseconds since the Unix epoch; the send time when absent.
    pub timestamp: Option<i64>,
    /// Send to this partition, whatever the key.
    pub partition: Option<PartitionId>,
}

impl ProducerRecord {
    /// A keyless record.
    pub fn new(value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord {
            value: value.into(),
            ..ProducerRecord::default()
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    /// Adds a header.
    pub fn with_header(
        mut self,
        name: impl Into<String>,
        value: impl Into<Bytes>,
    ) -> ProducerRecord {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the timestamp (ms since the Unix epoch).
    pub fn with_timestamp(mut self, timestamp_ms: i64) -> ProducerRecord {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// Sends the record to this partition.
    pub fn with_partition(mut self, partition: PartitionId) -> ProducerRecord {
        self.partition = Some(partition);
        self
    }
}

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub partition: PartitionId,
    pub offset: Offset,
    /// Milliseconds since the Unix epoch, as the producer set it.
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Bytes,
    /// `(name, value)` pairs in the order they were written.
    pub headers: Vec<(String, Bytes)>,
}
