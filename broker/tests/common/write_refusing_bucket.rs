//! An S3 endpoint whose bucket refuses writes, as a bucket policy does for a read-only key: an
//! HTTP proxy in front of a real S3-compatible server that forwards `GET` and `HEAD` and
//! answers every other method (`PUT`, `POST`, `DELETE`, …) with `403 AccessDenied`, without
//! sending it on. It records every request it saw and the access key that signed it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of a request's or a response's head at most.
const HEAD_BYTES_MAX: usize = 64 * 1024;

/// What the proxy saw.
#[derive(Debug, Default)]
struct Seen {
    /// `METHOD target` of each request forwarded.
    forwarded: Vec<String>,
    /// `METHOD target` of each request refused.
    refused: Vec<String>,
    /// The access keys named in the requests' `Authorization` headers (`-` for none).
    access_keys: BTreeSet<String>,
}

/// The proxy, serving until dropped.
pub struct WriteRefusingBucket {
    /// `http://127.0.0.1:PORT`: give it as `--s3-endpoint`.
    pub endpoint: String,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl WriteRefusingBucket {
    /// Starts a proxy in front of the S3-compatible server at `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> WriteRefusingBucket {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Ok((socket, _)) = listener.accept().await {
                    let (seen, upstream) = (seen.clone(), upstream.clone());
                    tokio::spawn(async move {
                        if let Err(e) = serve(socket, &upstream, &seen).await {
                            eprintln!("write-refusing bucket: {e}");
                        }
                    });
                }
            })
        };
        WriteRefusingBucket {
            endpoint,
            seen,
            task,
        }
    }

    /// `METHOD target` of every request forwarded (reads).
    pub fn forwarded(&self) -> Vec<String> {
        self.lock().forwarded.clone()
    }

    /// `METHOD target` of every request refused (writes).
    pub fn refused(&self) -> Vec<String> {
        self.lock().refused.clone()
    }

    /// The access keys that signed the requests.
    pub fn access_keys(&self) -> BTreeSet<String> {
        self.lock().access_keys.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for WriteRefusingBucket {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request on `socket` (the connection is closed after it, and every answer says so).
async fn serve(socket: TcpStream, upstream: &str, seen: &Mutex<Seen>) -> std::io::Result<()> {
    let mut client = BufReader::new(socket);
    let head = read_head(&mut client).await?;
    let Some(request_line) = head.first() else {
        return Ok(());
    };
    let mut parts = request_line.split(' ');
    let (method, target) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let body = read_body(&mut client, &head).await?;
    let access_key = header(&head, "authorization")
        .and_then(|a| a.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next())
        .unwrap_or("-")
        .to_owned();
    let reads = method == "GET" || method == "HEAD";
    {
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.access_keys.insert(access_key);
        let list = if reads {
            &mut seen.forwarded
        } else {
            &mut seen.refused
        };
        list.push(format!("{method} {target}"));
    }
    let answer = if reads {
        forward(upstream, &head, &body).await?
    } else {
        access_denied()
    };
    let socket = client.get_mut();
    socket.write_all(&answer).await?;
    socket.shutdown().await
}

/// The head's lines, request or status line first, up to the empty line.
async fn read_head(reader: &mut (impl AsyncBufReadExt + Unpin)) -> std::io::Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await?;
        total += n;
        if n == 0 || total > HEAD_BYTES_MAX {
            return Err(std::io::Error::other("head cut short or too long"));
        }
        let line = line.trim_end_matches(['\r', '\n']).to_owned();
        if line.is_empty() {
            return Ok(lines);
        }
        lines.push(line);
    }
}

fn header<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
    head.iter().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// The request's body, by its `Content-Length` or its chunks, raw.
async fn read_body(
    reader: &mut (impl AsyncBufReadExt + Unpin),
    head: &[String],
) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if let Some(length) = header(head, "content-length") {
        let length: usize = length.parse().map_err(std::io::Error::other)?;
        body.resize(length, 0);
        reader.read_exact(&mut body).await?;
    } else if header(head, "transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line).await?;
            body.extend_from_slice(size_line.as_bytes());
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(std::io::Error::other)?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            body.extend_from_slice(&chunk);
            if size == 0 {
                return Ok(body);
            }
        }
    }
    Ok(body)
}

/// The upstream server's whole answer to the request, told to close the connection after.
async fn forward(upstream: &str, head: &[String], body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(&with_close(head)).await?;
    server.write_all(body).await?;
    let mut server = BufReader::new(server);
    let response_head = read_head(&mut server).await?;
    let mut answer = with_close(&response_head);
    server.read_to_end(&mut answer).await?;
    Ok(answer)
}

/// `head` as bytes, its `Connection` headers replaced by `Connection: close`.
fn with_close(head: &[String]) -> Vec<u8> {
    let mut out = String::new();
    for (i, line) in head.iter().enumerate() {
        let name = line.split(':').next().unwrap_or("").trim();
        let hop =
            name.eq_ignore_ascii_case("connection") || name.eq_ignore_ascii_case("keep-alive");
        if i == 0 || !hop {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

/// What S3 answers a key whose policy does not allow the request.
fn access_denied() -> Vec<u8> {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>\
                <Message>Access Denied</Message></Error>";
    format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
