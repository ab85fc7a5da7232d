//! Reading partitions back, as a consumer does: from an offset up to the partition's high
//! watermark (or further, to the last acknowledged record), all partitions at once.

use std::time::{Duration, Instant};

use floe_client::{
    Client, Consumer, ConsumerConfig, FetchPosition, Offset, PartitionId, StreamName,
};

/// What one partition's read found.
#[derive(Debug, Default)]
pub struct PartitionRead {
    pub partition: u32,
    pub from: u64,
    /// The read was to reach this offset: the high watermark, or the last acknowledged
    /// record's end if that is further.
    pub to: u64,
    /// Where it stopped: `to`, unless it stalled.
    pub reached: u64,
    /// The records read, in offset order: (offset, value).
    pub records: Vec<(u64, Vec<u8>)>,
    /// Why it stopped short of `to`.
    pub stalled: Option<String>,
}

/// Reads each partition `p` from `ranges[p].0` to at least `ranges[p].1` and the high
/// watermark its leader reports, giving up on a partition after `deadline`.
pub async fn read_back(
    client: &Client,
    stream: &str,
    ranges: &[(u64, u64)],
    deadline: Duration,
) -> Vec<PartitionRead> {
    let name = StreamName::new(stream).expect("name");
    let high_watermarks = high_watermarks(client, &name).await;
    let tasks: Vec<_> = ranges
        .iter()
        .enumerate()
        .map(|(p, &(from, acked_end))| {
            let to = acked_end.max(high_watermarks.get(p).copied().unwrap_or(0));
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move { read(client, name, p as u32, from, to, deadline).await })
        })
        .collect();
    let mut reads = Vec::with_capacity(tasks.len());
    for task in tasks {
        reads.push(task.await.expect("a reading task"));
    }
    reads
}

/// Each partition's high watermark, as the brokers report it (0 where none answers).
async fn high_watermarks(client: &Client, name: &StreamName) -> Vec<u64> {
    match client.stream(name).await {
        Ok(info) => {
            let mut marks = vec![0; info.partition_count as usize];
            for p in info.partitions {
                if let Some(mark) = marks.get_mut(p.id.get() as usize) {
                    *mark = p.high_watermark.get();
                }
            }
            marks
        }
        Err(_) => Vec::new(),
    }
}

async fn read(
    client: Client,
    name: StreamName,
    partition: u32,
    from: u64,
    to: u64,
    deadline: Duration,
) -> PartitionRead {
    let config = ConsumerConfig {
        max_wait: Duration::from_millis(500),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(
        client,
        name,
        PartitionId::new(partition),
        FetchPosition::Offset(Offset::new(from)),
        config,
    );
    let started = Instant::now();
    let mut read = PartitionRead {
        partition,
        from,
        to,
        reached: from,
        ..PartitionRead::default()
    };
    let mut last_error = None;
    while read.reached < to {
        if started.elapsed() > deadline {
            read.stalled = Some(format!(
                "at offset {} after {deadline:?}; last error: {last_error:?}",
                read.reached
            ));
            break;
        }
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(Some(record)) => read
                .records
                .push((record.offset.get(), record.value.to_vec())),
            Ok(None) => {}
            // A fetch that failed after its retries (a leader moving): read on from the
            // same position.
            Err(e) => {
                last_error = Some(e.to_string());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        read.reached = consumer.position().map_or(read.reached, Offset::get);
    }
    read
}
