//! `CreateStream` and `DeleteStream` with their responses: the temporary admin path over
//! QUIC, until the controlplane's REST API takes it over.
//!
//! ```text
//! CreateStream           string name, u32 partition_count, u8 ack_mode,
//!                        settings
//!   settings             option<u64> segment_bytes, option<u64> segment_age_ms,
//!                        option<u64> local_retention_bytes, option<u64> local_retention_ms,
//!                        option<u64> retention_bytes, option<u64> retention_ms
//! CreateStreamResponse   string name
//! DeleteStream           string name
//! DeleteStreamResponse   string name
//! ```

use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::payload::{PayloadReader, PayloadWriter, invalid_message, invalid_payload};
use crate::{AckMode, StreamName};

/// Creates a stream. Fails with `StreamExists` if the name is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateStream {
    pub name: StreamName,
    /// At least 1; fixed for the stream's life.
    pub partition_count: u32,
    pub ack_mode: AckMode,
    pub settings: StreamSettings,
}

/// Optional per-stream settings; an absent one takes the broker's default. The broker
/// rejects values outside its accepted ranges with `InvalidRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamSettings {
    /// A segment is sealed once it holds this many bytes.
    pub segment_bytes: Option<u64>,
    /// A segment is sealed once it is this old, so tiering never lags more than this.
    pub segment_age_ms: Option<u64>,
    /// Local retention by size, per partition: sealed segments beyond it leave the
    /// broker's disk once they are tiered.
    pub local_retention_bytes: Option<u64>,
    /// Local retention by age (of a segment's newest record).
    pub local_retention_ms: Option<u64>,
    /// Retention of the whole partition (tier included) by size.
    pub retention_bytes: Option<u64>,
    /// Retention of the whole partition (tier included) by age.
    pub retention_ms: Option<u64>,
}

impl StreamSettings {
    /// The settings in their wire order, with their field names.
    fn fields(&self) -> [(&'static str, Option<u64>); 6] {
        [
            ("segment_bytes", self.segment_bytes),
            ("segment_age_ms", self.segment_age_ms),
            ("local_retention_bytes", self.local_retention_bytes),
            ("local_retention_ms", self.local_retention_ms),
            ("retention_bytes", self.retention_bytes),
            ("retention_ms", self.retention_ms),
        ]
    }

    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        for (_, value) in self.fields() {
            out.option(value.as_ref(), |out, value| {
                out.u64(*value);
                Ok(())
            })?;
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<StreamSettings, PayloadError> {
        let mut values = [None; 6];
        for (value, (field, _)) in values.iter_mut().zip(StreamSettings::default().fields()) {
            *value = input.option(field, |input| input.u64(field))?;
        }
        let [
            segment_bytes,
            segment_age_ms,
            local_retention_bytes,
            local_retention_ms,
            retention_bytes,
            retention_ms,
        ] = values;
        Ok(StreamSettings {
            segment_bytes,
            segment_age_ms,
            local_retention_bytes,
            local_retention_ms,
            retention_bytes,
            retention_ms,
        })
    }
}

/// The stream was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateStreamResponse {
    pub name: StreamName,
}

/// Deletes a stream and all its data. Fails with `UnknownStream` if there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteStream {
    pub name: StreamName,
}

/// The stream was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteStreamResponse {
    pub name: StreamName,
}

fn check_partition_count(count: u32) -> Result<(), (&'static str, &'static str)> {
    if count == 0 {
        Err(("partition_count", "a stream has at least one partition"))
    } else {
        Ok(())
    }
}

impl CreateStream {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        check_partition_count(self.partition_count).map_err(invalid_message)?;
        out.bytes_u16("name", self.name.as_str().as_bytes())?;
        out.u32(self.partition_count);
        out.u8(self.ack_mode.as_u8());
        self.settings.write(out)
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<CreateStream, PayloadError> {
        let name = input.stream_name("name")?;
        let partition_count = input.u32("partition_count")?;
        check_partition_count(partition_count).map_err(invalid_payload)?;
        let ack_mode = input.ack_mode("ack_mode")?;
        let settings = StreamSettings::read(input)?;
        Ok(CreateStream {
            name,
            partition_count,
            ack_mode,
            settings,
        })
    }
}

/// The three messages that carry only a stream name share one layout.
macro_rules! name_only {
    ($($message:ident),*) => {$(
        impl $message {
            pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
                out.bytes_u16("name", self.name.as_str().as_bytes())
            }

            pub(crate) fn read(input: &mut PayloadReader) -> Result<$message, PayloadError> {
                Ok($message {
                    name: input.stream_name("name")?,
                })
            }
        }
    )*};
}

name_only!(CreateStreamResponse, DeleteStream, DeleteStreamResponse);
