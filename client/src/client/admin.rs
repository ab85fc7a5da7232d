//! Stream administration and metadata over the client protocol: create, delete, describe.

use floe_wire::frame::{
    CreateStream, DeleteStream, ErrorCode, Message, MetadataRequest, RepairPartition,
    RepairPartitionResponse, StreamInfo, StreamMetadata, StreamSettings,
};
use floe_wire::{AckMode, Offset, PartitionId, StreamName};

use super::Client;
use super::exchange::type_name;
use crate::error::{Error, ProtocolViolation};

impl Client {
    /// Creates a stream of `partition_count` partitions. Fails with the broker's
    /// `StreamExists` if the name is taken.
    pub async fn create_stream(
        &self,
        name: &StreamName,
        partition_count: u32,
        ack_mode: AckMode,
        settings: StreamSettings,
    ) -> Result<(), Error> {
        let request = Message::from(CreateStream {
            name: name.clone(),
            partition_count,
            ack_mode,
            settings,
        });
        match self.request(request).await? {
            Message::CreateStreamResponse(_) => Ok(()),
            other => Err(unexpected("CreateStream", &other)),
        }
    }

    /// Deletes a stream and its data. Fails with the broker's `UnknownStream` if there is
    /// none.
    pub async fn delete_stream(&self, name: &StreamName) -> Result<(), Error> {
        let request = Message::DeleteStream(DeleteStream { name: name.clone() });
        match self.request(request).await? {
            Message::DeleteStreamResponse(_) => Ok(()),
            other => Err(unexpected("DeleteStream", &other)),
        }
    }

    /// Repairs a partition in the `corrupt` state, on the broker that holds it. Without
    /// `discard_from` nothing changes: the answer says what a repair discards (every record
    /// from its `discard_from` on). With it — which must be exactly that offset — the broker
    /// cuts the damaged log there and the partition serves again. A partition that is not
    /// corrupt, or has replicas, is refused (`InvalidRequest`).
    pub async fn repair_partition(
        &self,
        stream: &StreamName,
        partition: PartitionId,
        discard_from: Option<Offset>,
    ) -> Result<RepairPartitionResponse, Error> {
        let request = Message::RepairPartition(RepairPartition {
            stream: stream.clone(),
            partition,
            discard_from,
        });
        match self
            .for_partition(stream, partition)
            .await?
            .request(request)
            .await?
        {
            Message::RepairPartitionResponse(response) => Ok(response),
            other => Err(unexpected("RepairPartition", &other)),
        }
    }

    /// The metadata of the named streams, in the order asked, or of every stream (in name
    /// order) when `streams` is empty. A stream the broker does not know comes back with an
    /// error code in its entry rather than failing the call.
    pub async fn metadata(&self, streams: &[StreamName]) -> Result<Vec<StreamMetadata>, Error> {
        let request = Message::MetadataRequest(MetadataRequest {
            streams: streams.to_vec(),
        });
        match self.request(request).await? {
            Message::MetadataResponse(response) => Ok(response.streams),
            other => Err(unexpected("MetadataRequest", &other)),
        }
    }

    /// One stream's partitions, leaders and offsets; the broker's error (such as
    /// `UnknownStream`) when it has none.
    ///
    /// A broker of a cluster knows only the streams it holds replicas of: when this handle's
    /// broker does not know the stream, the other brokers this client knows are asked.
    pub async fn stream(&self, name: &StreamName) -> Result<StreamInfo, Error> {
        let first = self.stream_here(name).await;
        if !matches!(&first, Err(e) if e.code() == Some(ErrorCode::UnknownStream)) {
            return first;
        }
        for endpoint in self.routes.known() {
            if endpoint == self.config().endpoint {
                continue;
            }
            if let Ok(info) = self.on(&endpoint).stream_here(name).await {
                return Ok(info);
            }
        }
        first
    }

    /// [`Client::stream`], asked again while it fails with `UnknownStream`, for up to `wait`:
    /// a stream just created is known to the brokers only once its partitions are assigned.
    /// Any other error, and `UnknownStream` once `wait` is over, is returned as it is.
    pub async fn stream_when_known(
        &self,
        name: &StreamName,
        wait: std::time::Duration,
    ) -> Result<StreamInfo, Error> {
        let deadline = tokio::time::Instant::now() + wait;
        let backoff = floe_wire::Backoff {
            initial: std::time::Duration::from_millis(20),
            max: std::time::Duration::from_millis(500),
        };
        let mut jitter = floe_wire::Jitter::unpredictable();
        let mut retry = 0;
        loop {
            let result = self.stream(name).await;
            let unknown = matches!(&result, Err(e) if e.code() == Some(ErrorCode::UnknownStream));
            let now = tokio::time::Instant::now();
            if !unknown || now >= deadline {
                return result;
            }
            let delay = backoff.delay(retry, jitter.draw()).min(deadline - now);
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    async fn stream_here(&self, name: &StreamName) -> Result<StreamInfo, Error> {
        let entry = self
            .metadata(std::slice::from_ref(name))
            .await?
            .into_iter()
            .find(|entry| &entry.name == name)
            .ok_or_else(|| ProtocolViolation::MissingStream(name.to_string()))?;
        entry
            .result
            .map_err(|code| Error::from_code(code, format!("stream {name}")))
    }
}

fn unexpected(request: &'static str, answer: &Message) -> Error {
    ProtocolViolation::UnexpectedResponse {
        request,
        found: type_name(answer.message_type()),
    }
    .into()
}
