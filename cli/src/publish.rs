//! `floe publish`: one record per line of stdin; prints how many were acknowledged.

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Args;
use floe_client::{ClientConfig, Delivery, PartitionId, Producer, ProducerConfig, ProducerRecord};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::output::{print, print_json};
use crate::stream::stream_name;

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// Stream to publish to.
    name: String,
    /// Key of every record (records with one key go to one partition).
    #[arg(long)]
    key: Option<String>,
    /// Publish to this partition [default: by key, else round-robin by batch].
    #[arg(long)]
    partition: Option<u32>,
}

/// Deliveries awaited at once; the producer's own buffer bounds the bytes behind them.
const DELIVERIES_PENDING: usize = 65_536;

/// What became of the records sent.
#[derive(Debug, Default)]
struct Tally {
    acknowledged: u64,
    failed: u64,
    first_error: Option<floe_client::Error>,
}

pub async fn run(config: ClientConfig, args: PublishArgs, json: bool) -> Result<()> {
    let stream = stream_name(&args.name)?;
    let client = crate::connect(config).await?;
    let producer = Producer::new(&client, stream.clone(), ProducerConfig::default())
        .await
        .with_context(|| format!("publishing to stream {stream}"))?;
    let (deliveries, pending) = mpsc::channel::<Delivery>(DELIVERIES_PENDING);
    let tally = tokio::spawn(count(pending));

    let sent = send_lines(&producer, &args, &deliveries).await;
    drop(deliveries);
    // Whatever stopped the input, the records already sent are flushed and counted.
    let flushed = producer.close().await;
    let tally = tally.await.context("counting acknowledgements")?;
    client.close().await;

    if json {
        print_json(&json!({
            "stream": stream.as_str(),
            "acknowledged": tally.acknowledged,
            "failed": tally.failed,
        }))?;
    } else {
        print(&format!(
            "published {} record{} to {stream}\n",
            tally.acknowledged,
            if tally.acknowledged == 1 { "" } else { "s" }
        ))?;
    }
    sent?;
    if let Some(error) = tally.first_error {
        anyhow::bail!("{} record(s) failed: {error}", tally.failed);
    }
    flushed.context("flushing")?;
    Ok(())
}

/// Sends one record per line of stdin until it ends.
async fn send_lines(
    producer: &Producer,
    args: &PublishArgs,
    deliveries: &mpsc::Sender<Delivery>,
) -> Result<()> {
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        let read = stdin
            .read_until(b'\n', &mut line)
            .await
            .context("reading stdin")?;
        if read == 0 {
            break;
        }
        let mut record = ProducerRecord::new(Bytes::copy_from_slice(strip_newline(&line)));
        if let Some(key) = &args.key {
            record = record.with_key(key.clone());
        }
        if let Some(partition) = args.partition {
            record = record.with_partition(PartitionId::new(partition));
        }
        let delivery = producer
            .send(record)
            .await
            .with_context(|| format!("publishing line {number}"))?;
        if deliveries.send(delivery).await.is_err() {
            break;
        }
    }
    Ok(())
}

async fn count(mut pending: mpsc::Receiver<Delivery>) -> Tally {
    let mut tally = Tally::default();
    while let Some(delivery) = pending.recv().await {
        match delivery.await {
            Ok(_) => tally.acknowledged += 1,
            Err(e) => {
                tally.failed += 1;
                tally.first_error.get_or_insert(e);
            }
        }
    }
    tally
}

/// A line without its `\n` (or `\r\n`) ending.
fn strip_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_endings_are_not_part_of_the_record() {
        assert_eq!(strip_newline(b"hello\n"), b"hello");
        assert_eq!(strip_newline(b"hello\r\n"), b"hello");
        assert_eq!(strip_newline(b"last line"), b"last line");
        assert_eq!(strip_newline(b"\n"), b"");
        assert_eq!(strip_newline(b"a\rb\n"), b"a\rb");
    }
}
