//! Reading a request frame's payload out of QUIC's chunks into one buffer.

use anyhow::Result;
use bytes::Bytes;
use floe_wire::BufferPool;

/// Payload buffers, shared by every connection on the client and peer ports: at most 16
/// allocations of at most 2 MiB each are kept (32 MiB). A larger payload gets a buffer of
/// its own.
static BUFFERS: BufferPool = BufferPool::new(16, 2 << 20);

/// The next `len` bytes of `recv`: a frame's payload. Copied once out of QUIC's chunks into
/// a reused buffer (never zero-filled first, and free of page faults once the pool is warm),
/// or handed over as is when one chunk holds it all.
pub(crate) async fn read_payload(recv: &mut quinn::RecvStream, len: usize) -> Result<Bytes> {
    let mut payload = None;
    let mut filled = 0;
    while filled < len {
        let Some(chunk) = recv.read_chunk(len - filled, true).await? else {
            anyhow::bail!("the stream ended {filled} bytes into a {len}-byte payload");
        };
        if chunk.bytes.len() == len {
            return Ok(chunk.bytes);
        }
        let payload = payload.get_or_insert_with(|| BUFFERS.take(len));
        payload.extend_from_slice(&chunk.bytes);
        filled = payload.len();
    }
    Ok(payload.map(bytes::BytesMut::freeze).unwrap_or_default())
}
