//! `Hello` and `HelloAck`: version negotiation, authentication and the connection's limits.
//!
//! ```text
//! Hello      u8 min_version, u8 max_version, string client_name, option<bytes> auth_token
//! HelloAck   u8 version, u32 broker_id, u32 max_frame_bytes, u32 max_batch_bytes,
//!            u32 max_list_entries, u64 max_in_flight_bytes, u16 max_in_flight_batches
//! ```

use std::fmt;

use bytes::Bytes;

use crate::BrokerId;
use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::limits::ConnectionLimits;
use crate::frame::payload::{PayloadReader, PayloadWriter, invalid_message, invalid_payload};
use crate::frame::version::ProtocolVersion;

/// The first request on a connection: which versions the client speaks and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Oldest protocol version the client speaks; may be one this build does not know.
    pub min_version: u8,
    /// Newest protocol version the client speaks; may be one this build does not know.
    pub max_version: u8,
    /// Free-form name of the client software and instance, for the broker's logs.
    pub client_name: String,
    /// Proof of identity; absent for an anonymous client.
    pub auth_token: Option<AuthToken>,
}

/// An opaque bearer token. Its `Debug` output never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(Bytes);

impl AuthToken {
    /// Wraps the token's bytes.
    pub fn new(token: impl Into<Bytes>) -> AuthToken {
        AuthToken(token.into())
    }

    /// The secret bytes. Compare them in constant time.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuthToken(<{} bytes redacted>)", self.0.len())
    }
}

/// The broker's answer to `Hello`: the version both sides use from now on, who answered,
/// and the limits both sides obey on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloAck {
    /// The negotiated version; the `HelloAck` frame itself is sent in it.
    pub version: ProtocolVersion,
    pub broker_id: BrokerId,
    /// Consistent by construction of the decoder: [`ConnectionLimits::check`] holds.
    pub limits: ConnectionLimits,
}

impl Hello {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.u8(self.min_version);
        out.u8(self.max_version);
        out.bytes_u16("client_name", self.client_name.as_bytes())?;
        out.option(self.auth_token.as_ref(), |out, token| {
            out.bytes_u16("auth_token", &token.0)
        })
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<Hello, PayloadError> {
        Ok(Hello {
            min_version: input.u8("min_version")?,
            max_version: input.u8("max_version")?,
            client_name: input.string_u16("client_name")?,
            auth_token: input.option("auth_token", |input| {
                input.bytes_u16("auth_token").map(AuthToken)
            })?,
        })
    }
}

impl HelloAck {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        let limits = &self.limits;
        limits
            .check()
            .map_err(|reason| invalid_message(("limits", reason)))?;
        out.u8(self.version.as_u8());
        out.u32(self.broker_id.get());
        out.u32(limits.max_frame_bytes);
        out.u32(limits.max_batch_bytes);
        out.u32(limits.max_list_entries);
        out.u64(limits.max_in_flight_bytes);
        out.u16(limits.max_in_flight_batches);
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<HelloAck, PayloadError> {
        let version = ProtocolVersion::from_u8(input.u8("version")?).ok_or(invalid_payload((
            "version",
            "not a protocol version this build speaks",
        )))?;
        let broker_id = BrokerId::new(input.u32("broker_id")?);
        let limits = ConnectionLimits {
            max_frame_bytes: input.u32("max_frame_bytes")?,
            max_batch_bytes: input.u32("max_batch_bytes")?,
            max_list_entries: input.u32("max_list_entries")?,
            max_in_flight_bytes: input.u64("max_in_flight_bytes")?,
            max_in_flight_batches: input.u16("max_in_flight_batches")?,
        };
        limits
            .check()
            .map_err(|reason| invalid_payload(("limits", reason)))?;
        Ok(HelloAck {
            version,
            broker_id,
            limits,
        })
    }
}
