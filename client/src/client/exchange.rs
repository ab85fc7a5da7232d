//! One request and its answer on one bidirectional QUIC stream: write the frame (batches as
//! their own chunks, never copied), finish the sending side, read exactly one frame back
//! with a bounded decoder, and check that it answers this request.

use floe_wire::frame::{
    FrameDecoder, FrameLimits, Message, MessageType, ProtocolVersion, RequestId,
};

use crate::error::{Error, ProtocolViolation};

/// Sends `request` as request `id` on `streams` and returns the broker's answer. An `Error`
/// frame becomes [`Error::Broker`].
pub(crate) async fn run(
    (mut send, mut recv): (quinn::SendStream, quinn::RecvStream),
    request: &Message,
    version: ProtocolVersion,
    id: RequestId,
    limits: &FrameLimits,
) -> Result<Message, Error> {
    let encoded = request.encode_chunks(version, id)?;
    let max = limits.frame_bytes();
    if encoded.frame_len() > max as usize {
        return Err(Error::RequestTooLarge {
            frame_len: encoded.frame_len(),
            max,
        });
    }
    let mut chunks = encoded.into_chunks();
    match send.write_all_chunks(&mut chunks).await {
        Ok(()) => {
            // Cannot fail: the stream was neither finished nor reset.
            let _ = send.finish();
        }
        // The broker stopped reading (it refused the frame's header); its answer says why.
        Err(quinn::WriteError::Stopped(_)) => {}
        Err(quinn::WriteError::ConnectionLost(e)) => return Err(Error::ConnectionLost(e)),
        Err(e) => return Err(ProtocolViolation::Read(e.to_string()).into()),
    }
    let message = read_answer(&mut recv, limits).await?;
    check_answer(request.message_type(), id, message)
}

/// Reads one frame, never more than the decoder says it needs, so memory stays within one
/// frame of the limits whatever the broker declares.
async fn read_answer(
    recv: &mut quinn::RecvStream,
    limits: &FrameLimits,
) -> Result<(RequestId, Message), Error> {
    let mut decoder = FrameDecoder::new(*limits);
    loop {
        if let Some(frame) = decoder.next_frame().map_err(ProtocolViolation::from)? {
            let message = frame.message(limits).map_err(ProtocolViolation::from)?;
            return Ok((frame.header.request_id, message));
        }
        let needed = decoder.bytes_needed().map_err(ProtocolViolation::from)?;
        match recv.read_chunk(needed.max(1), true).await {
            Ok(Some(chunk)) => decoder.extend_from_slice(&chunk.bytes),
            Ok(None) => {
                return Err(ProtocolViolation::Truncated {
                    received: decoder.buffered(),
                }
                .into());
            }
            Err(quinn::ReadError::ConnectionLost(e)) => return Err(Error::ConnectionLost(e)),
            Err(e) => return Err(ProtocolViolation::Read(e.to_string()).into()),
        }
    }
}

/// The answer must carry the request's id (or 0 for an error about the connection) and be
/// the response type of the request, or an `Error`.
pub(crate) fn check_answer(
    request: MessageType,
    id: RequestId,
    (answer_id, message): (RequestId, Message),
) -> Result<Message, Error> {
    if let Message::Error(error) = message {
        if answer_id != id && answer_id != RequestId::CONNECTION {
            return Err(ProtocolViolation::RequestId {
                expected: id.get(),
                found: answer_id.get(),
            }
            .into());
        }
        return Err(Error::from_response(
            error.code,
            error.message,
            error.details,
        ));
    }
    if answer_id != id {
        return Err(ProtocolViolation::RequestId {
            expected: id.get(),
            found: answer_id.get(),
        }
        .into());
    }
    if response_type(request) != Some(message.message_type()) {
        return Err(ProtocolViolation::UnexpectedResponse {
            request: type_name(request),
            found: type_name(message.message_type()),
        }
        .into());
    }
    Ok(message)
}

/// The type that answers a request type.
fn response_type(request: MessageType) -> Option<MessageType> {
    Some(match request {
        MessageType::Hello => MessageType::HelloAck,
        MessageType::MetadataRequest => MessageType::MetadataResponse,
        MessageType::CreateStream => MessageType::CreateStreamResponse,
        MessageType::DeleteStream => MessageType::DeleteStreamResponse,
        MessageType::Produce => MessageType::ProduceAck,
        MessageType::Fetch => MessageType::FetchResponse,
        MessageType::RepairPartition => MessageType::RepairPartitionResponse,
        MessageType::Error
        | MessageType::ReplicaAppend
        | MessageType::ReplicaAck
        | MessageType::ReplicaMismatch
        | MessageType::ReplicaStale
        | MessageType::HelloAck
        | MessageType::MetadataResponse
        | MessageType::CreateStreamResponse
        | MessageType::DeleteStreamResponse
        | MessageType::ProduceAck
        | MessageType::FetchResponse
        | MessageType::RepairPartitionResponse => return None,
    })
}

/// A message type's name, for errors.
pub(crate) fn type_name(message_type: MessageType) -> &'static str {
    match message_type {
        MessageType::Hello => "Hello",
        MessageType::HelloAck => "HelloAck",
        MessageType::MetadataRequest => "MetadataRequest",
        MessageType::MetadataResponse => "MetadataResponse",
        MessageType::CreateStream => "CreateStream",
        MessageType::CreateStreamResponse => "CreateStreamResponse",
        MessageType::DeleteStream => "DeleteStream",
        MessageType::DeleteStreamResponse => "DeleteStreamResponse",
        MessageType::Produce => "Produce",
        MessageType::ProduceAck => "ProduceAck",
        MessageType::Fetch => "Fetch",
        MessageType::FetchResponse => "FetchResponse",
        MessageType::RepairPartition => "RepairPartition",
        MessageType::RepairPartitionResponse => "RepairPartitionResponse",
        MessageType::Error => "Error",
        MessageType::ReplicaAppend => "ReplicaAppend",
        MessageType::ReplicaAck => "ReplicaAck",
        MessageType::ReplicaMismatch => "ReplicaMismatch",
        MessageType::ReplicaStale => "ReplicaStale",
    }
}

#[cfg(test)]
mod tests {
    use floe_wire::StreamName;
    use floe_wire::frame::{
        DeleteStream, DeleteStreamResponse, ErrorCode, ErrorResponse, MetadataResponse,
    };

    use super::*;

    fn deleted() -> Result<Message, Box<dyn std::error::Error>> {
        Ok(Message::DeleteStreamResponse(DeleteStreamResponse {
            name: StreamName::new("orders")?,
        }))
    }

    #[test]
    fn the_matching_response_is_accepted() -> Result<(), Box<dyn std::error::Error>> {
        let id = RequestId::new(7);
        let answer = check_answer(MessageType::DeleteStream, id, (id, deleted()?))?;
        assert_eq!(answer, deleted()?);
        let _ = DeleteStream {
            name: StreamName::new("orders")?,
        };
        Ok(())
    }

    #[test]
    fn an_answer_to_another_request_is_a_violation() -> Result<(), Box<dyn std::error::Error>> {
        let result = check_answer(
            MessageType::DeleteStream,
            RequestId::new(7),
            (RequestId::new(8), deleted()?),
        );
        assert!(matches!(
            result,
            Err(Error::Protocol(ProtocolViolation::RequestId {
                expected: 7,
                found: 8
            }))
        ));
        Ok(())
    }

    #[test]
    fn the_wrong_response_type_is_a_violation() {
        let result = check_answer(
            MessageType::DeleteStream,
            RequestId::new(7),
            (
                RequestId::new(7),
                Message::MetadataResponse(MetadataResponse::default()),
            ),
        );
        assert!(matches!(
            result,
            Err(Error::Protocol(ProtocolViolation::UnexpectedResponse {
                request: "DeleteStream",
                found: "MetadataResponse"
            }))
        ));
    }

    #[test]
    fn an_error_frame_becomes_a_broker_error_even_on_the_connection_id() {
        let error = |id| {
            check_answer(
                MessageType::Produce,
                RequestId::new(3),
                (
                    RequestId::new(id),
                    Message::Error(ErrorResponse {
                        code: ErrorCode::Throttled,
                        message: "busy".into(),
                        details: None,
                    }),
                ),
            )
        };
        for id in [3, 0] {
            match error(id) {
                Err(Error::Broker { code, message, .. }) => {
                    assert_eq!(code, ErrorCode::Throttled);
                    assert_eq!(message, "busy");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(error(9), Err(Error::Protocol(_))));
    }
}
