//! A keep-alive HTTP/1.1 client and a fixed-rate load generator for the benchmarks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

/// One keep-alive connection.
pub struct Connection {
    addr: SocketAddr,
    stream: BufReader<TcpStream>,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            addr,
            stream: BufReader::new(stream),
        })
    }

    /// GET `path`; returns the status and the body (read by its Content-Length).
    pub async fn get(&mut self, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
        self.request("GET", path, None).await
    }

    /// `method` on `path` with an optional JSON body; returns the status and the body.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if let Some(body) = body {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body.unwrap_or_default());
        self.stream.get_mut().write_all(&bytes).await?;
        let mut status = 0u16;
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            anyhow::ensure!(
                self.stream.read_line(&mut line).await? > 0,
                "connection closed"
            );
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if status == 0 {
                status = trimmed.split(' ').nth(1).unwrap_or("0").parse()?;
            } else if let Some((name, value)) = trimmed.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse()?;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok((status, body))
    }
}

/// What a fixed-rate run measured.
pub struct Reads {
    pub rate: u64,
    pub seconds: u64,
    pub sent: u64,
    pub failed: u64,
    pub latency: Histogram<u64>,
    /// Requests slower than [`SLOW_US`]: (scheduled time from the start in ms, latency in µs).
    pub slow: Vec<(u64, u64)>,
}

/// The latency above which a request is listed in [`Reads::slow`].
pub const SLOW_US: u64 = 5_000;

/// Sends GETs of `paths` (round robin) at `rate` per second for `duration` over 16
/// connections; latency counts from each request's scheduled time.
pub async fn fixed_rate(
    addr: SocketAddr,
    paths: &[&str],
    rate: u64,
    duration: Duration,
) -> anyhow::Result<Reads> {
    const CONNECTIONS: u64 = 16;
    let total = rate * duration.as_secs();
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now() + Duration::from_millis(50);
    let results = Arc::new(Mutex::new((
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?,
        0u64,
        Vec::<(u64, u64)>::new(),
    )));
    let mut tasks = Vec::new();
    for worker in 0..CONNECTIONS {
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        let results = results.clone();
        let mut connection = Connection::open(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut local = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut failed = 0u64;
            let mut slow = Vec::new();
            let mut index = worker;
            while index < total {
                let scheduled = start + interval * index as u32;
                tokio::time::sleep_until(scheduled.into()).await;
                let path = &paths[index as usize % paths.len()];
                match connection.get(path).await {
                    Ok((200, _)) => {}
                    _ => failed += 1,
                }
                let micros = scheduled.elapsed().as_micros().max(1) as u64;
                local.record(micros)?;
                if micros > SLOW_US {
                    slow.push(((scheduled - start).as_millis() as u64, micros));
                }
                index += CONNECTIONS;
            }
            let mut results = results.lock().await;
            results.0.add(&local)?;
            results.1 += failed;
            results.2.extend(slow);
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let (latency, failed, mut slow) = Arc::try_unwrap(results)
        .map_err(|_| anyhow::anyhow!("workers still hold the results"))?
        .into_inner();
    Ok(Reads {
        rate,
        seconds: duration.as_secs(),
        sent: total,
        failed,
        latency,
        slow: {
            slow.sort_unstable();
            slow
        },
    })
}
