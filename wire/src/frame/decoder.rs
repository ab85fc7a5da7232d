//! Incremental framing of a byte stream: find where each frame ends without trusting a
//! length before its header has been checked.

use bytes::{Bytes, BytesMut};

use super::Frame;
use super::error::FrameError;
use super::header::{FrameHeader, HEADER_LEN};
use super::limits::FrameLimits;

/// Decodes the frame at the start of `buf`.
///
/// - `Ok(None)`: the frame is not complete yet; [`bytes_needed`] says how many more bytes to
///   read at least.
/// - `Ok(Some((frame, consumed)))`: a frame whose payload is a zero-copy slice of `buf`;
///   the next frame starts at `consumed`.
/// - `Err(_)`: the header is unacceptable and the stream cannot be framed further. The
///   header is checked, its payload length against `limits` included, as soon as its 20
///   bytes are present, so an oversized frame is refused before its payload is awaited.
///
/// The payload is not decoded here; see [`Frame::message`].
pub fn decode_frame(
    buf: &Bytes,
    limits: &FrameLimits,
) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(header) = FrameHeader::decode(buf, limits)? else {
        return Ok(None);
    };
    let frame_len = header.frame_len();
    if buf.len() < frame_len {
        return Ok(None);
    }
    let payload = buf.slice(HEADER_LEN..frame_len);
    Ok(Some((Frame { header, payload }, frame_len)))
}

/// How many more bytes `buf` needs before the frame at its start is complete: 0 when it is.
///
/// While the header is incomplete this counts only the missing header bytes, so it is a
/// lower bound; once the header is present it is exact. Errors are those of
/// [`decode_frame`].
pub fn bytes_needed(buf: &[u8], limits: &FrameLimits) -> Result<usize, FrameError> {
    match FrameHeader::decode(buf, limits)? {
        None => Ok(HEADER_LEN - buf.len()),
        Some(header) => Ok(header.frame_len().saturating_sub(buf.len())),
    }
}

/// Frames a byte stream read in pieces, such as one QUIC stream.
///
/// Driving contract: the shell reads at most [`FrameDecoder::bytes_needed`] bytes from the
/// stream, hands them to [`FrameDecoder::extend_from_slice`], then calls
/// [`FrameDecoder::next_frame`] until it returns `Ok(None)`. Reading no more than is needed
/// keeps the buffer within one frame of the limits. After an error the stream's framing is
/// lost: answer on the connection if possible, close the stream and drop the decoder.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    limits: FrameLimits,
}

impl FrameDecoder {
    /// A decoder that accepts frames within `limits`.
    pub fn new(limits: FrameLimits) -> FrameDecoder {
        FrameDecoder {
            buf: BytesMut::new(),
            limits,
        }
    }

    /// Input: bytes read from the stream.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// How many bytes to read next, at least: 0 when a whole frame is buffered.
    pub fn bytes_needed(&self) -> Result<usize, FrameError> {
        bytes_needed(&self.buf, &self.limits)
    }

    /// Output: the next complete frame, if one is buffered. Its payload shares the buffer's
    /// memory rather than copying it.
    #[must_use = "a decoded frame or error must be handled"]
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some(header) = FrameHeader::decode(&self.buf, &self.limits)? else {
            return Ok(None);
        };
        if self.buf.len() < header.frame_len() {
            // No reservation for the declared payload: memory grows only with bytes that
            // actually arrived, so a peer cannot make us allocate by declaring.
            return Ok(None);
        }
        let mut frame = self.buf.split_to(header.frame_len());
        let payload = frame.split_off(HEADER_LEN).freeze();
        Ok(Some(Frame { header, payload }))
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}
