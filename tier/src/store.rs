//! [`TierStore`]: the object store the tier writes to, built from a URL, with every key below
//! one prefix. The operations Floe relies on — put-if-absent, ranged GET, list by prefix,
//! delete, multipart upload — and nothing else; no formats here.

use std::ops::Range;
use std::sync::{Arc, Once};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    BackoffConfig, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig, WriteMultipart,
};

use crate::TierError;
use crate::direct::DirectObject;
use crate::metrics::{RequestKind, RequestObserver, TierMetrics, bump};

/// Settings for an `s3://` URL beyond what the URL says. Unset fields fall back to the usual
/// `AWS_*` environment variables (`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, …). Its
/// `Debug` shows whether credentials are set, never their values.
#[derive(Clone, Default)]
pub struct S3Settings {
    /// e.g. `http://127.0.0.1:9000` for an S3-compatible server; implies path-style requests.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// Needed for an `http://` endpoint.
    pub allow_http: bool,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |value: &Option<String>| value.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &set(&self.access_key_id))
            .field("secret_access_key", &set(&self.secret_access_key))
            .field("session_token", &set(&self.session_token))
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// An object store and a prefix inside it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TierStore {
    inner: Arc<dyn ObjectStore>,
    /// The same store when it is a local directory: its objects can be streamed to their
    /// files directly ([`TierStore::put_streamed`]).
    local: Option<Arc<LocalFileSystem>>,
    /// Whether `inner` retries each failed request itself (an S3 store, per
    /// [`request_retry`]): its errors have been retried already.
    retries_requests: bool,
    /// Whether writes and deletes are refused before they reach the store (a read
    /// replica's store: [`TierStore::read_only`]).
    read_only: bool,
    prefix: String,
    metrics: Arc<TierMetrics>,
    observer: Option<RequestObserver>,
}

/// One object found by [`TierStore::list`]; `key` is relative to the store's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub key: String,
    pub size: u64,
    pub last_modified_ms: i64,
}

/// What a put-if-absent did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum CreateOutcome {
    Created,
    AlreadyExists,
}

/// Multipart part size: S3 needs at least 5 MiB for every part but the last.
pub(crate) const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts in flight per multipart upload.
const PARTS_IN_FLIGHT: usize = 2;

impl TierStore {
    /// Opens `file:///dir[/prefix]` (the directory is created) or `s3://bucket[/prefix]`.
    pub fn open(url: &str, s3: &S3Settings) -> Result<TierStore, TierError> {
        let parsed = url::Url::parse(url)
            .map_err(|e| TierError::Config(format!("tier URL {url:?}: {e}")))?;
        match parsed.scheme() {
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| TierError::Config(format!("tier URL {url:?} is not a path")))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| TierError::Config(format!("creating {}: {e}", dir.display())))?;
                let fs = LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| TierError::Config(format!("opening {}: {e}", dir.display())))?
                    .with_automatic_cleanup(true)
                    // Local copies are deleted once tiered: a tiered object must be durable
                    // when its PUT returns, like any other write Floe acknowledges.
                    .with_fsync(true);
                let fs = Arc::new(fs);
                let mut store = TierStore::new(fs.clone(), "");
                store.local = Some(fs);
                Ok(store)
            }
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| TierError::Config(format!("tier URL {url:?} has no bucket")))?;
                let store = s3_store(bucket, s3)?;
                let mut store = TierStore::new(store, parsed.path());
                store.retries_requests = true;
                Ok(store)
            }
            other => Err(TierError::Config(format!(
                "tier URL scheme {other:?} is not supported (file or s3)"
            ))),
        }
    }

    /// Wraps an existing store; `prefix` is trimmed of slashes.
    pub fn new(inner: Arc<dyn ObjectStore>, prefix: &str) -> TierStore {
        TierStore {
            inner,
            local: None,
            retries_requests: false,
            read_only: false,
            prefix: prefix.trim_matches('/').to_string(),
            metrics: Arc::new(TierMetrics::default()),
            observer: None,
        }
    }

    /// The same store, refusing every write and delete with [`TierError::ReadOnly`] before
    /// it reaches the bucket: what a read replica opens, so that a bug that would write
    /// fails in the replica, whatever its credentials allow.
    pub fn read_only(mut self) -> TierStore {
        self.read_only = true;
        self
    }

    /// Whether [`TierStore::read_only`] made this store refuse writes.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses `operation` of `key` on a read-only store.
    fn writable(&self, operation: &'static str, key: &str) -> Result<(), TierError> {
        if self.read_only {
            return Err(TierError::ReadOnly {
                operation,
                key: key.to_string(),
            });
        }
        Ok(())
    }

    /// Reports every request's duration to `observer`.
    pub fn with_observer(mut self, observer: RequestObserver) -> TierStore {
        self.observer = Some(observer);
        self
    }

    pub fn metrics(&self) -> &Arc<TierMetrics> {
        &self.metrics
    }

    /// Whether an operation on this store that failed with `error` deserves another try by
    /// the caller: the error is retryable, and it is not a request failure the store's client
    /// has already retried. An S3 store retries each request itself ([`request_retry`]): a
    /// second loop around it would multiply the tries and the waits. A local directory
    /// retries nothing, and a store passed to [`TierStore::new`] is taken to retry nothing:
    /// Floe's loop retries for them.
    pub fn worth_retrying(&self, error: &TierError) -> bool {
        let retried_below = self.retries_requests && matches!(error, TierError::Unavailable { .. });
        error.is_retryable() && !retried_below
    }

    /// Runs one request, reporting its duration to the observer.
    async fn timed<T>(&self, kind: RequestKind, request: impl Future<Output = T>) -> T {
        let started = std::time::Instant::now();
        let result = request.await;
        let took = started.elapsed();
        tracing::trace!(?kind, took_us = took.as_micros(), "object store request");
        if let Some(observer) = &self.observer {
            (observer.0)(kind, took);
        }
        result
    }

    fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    fn relative(&self, path: &Path) -> String {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            return full.to_string();
        }
        full.strip_prefix(&self.prefix)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(full)
            .to_string()
    }

    /// Creates `key` only if no object has that key; atomic on both backends.
    pub async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<CreateOutcome, TierError> {
        self.writable("put", key)?;
        let len = bytes.len() as u64;
        let options = PutOptions::from(PutMode::Create);
        bump(&self.metrics.puts, 1);
        let path = self.path(key);
        let put = self.inner.put_opts(&path, PutPayload::from(bytes), options);
        match self.timed(RequestKind::Put, put).await {
            Ok(_) => {
                bump(&self.metrics.put_bytes, len);
                Ok(CreateOutcome::Created)
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(CreateOutcome::AlreadyExists),
            Err(e) => Err(TierError::store("put", key, e)),
        }
    }

    /// Writes `key` with a single PUT (overwriting).
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), TierError> {
        self.writable("put", key)?;
        let len = bytes.len() as u64;
        bump(&self.metrics.puts, 1);
        let path = self.path(key);
        self.timed(
            RequestKind::Put,
            self.inner.put(&path, PutPayload::from(bytes)),
        )
        .await
        .map_err(|e| TierError::store("put", key, e))?;
        bump(&self.metrics.put_bytes, len);
        Ok(())
    }

    /// Whether objects can be streamed to a local file with [`TierStore::put_streamed`].
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }

    /// For a local-directory store: writes `key` (overwriting) with the bytes `fill` appends
    /// to a [`DirectObject`] of `buffer_bytes`, on a blocking thread, around the page cache.
    /// The object is durable and visible when this returns, and not at all if `fill` fails.
    /// Counts as one PUT. Fails with [`TierError::Config`] on any other store.
    pub async fn put_streamed<T: Send + 'static>(
        &self,
        key: &str,
        buffer_bytes: usize,
        fill: impl FnOnce(&mut DirectObject) -> Result<T, TierError> + Send + 'static,
    ) -> Result<T, TierError> {
        self.writable("put", key)?;
        let Some(local) = &self.local else {
            return Err(TierError::Config(format!(
                "streamed put of {key}: the store is not a local directory"
            )));
        };
        let file = local
            .path_to_filesystem(&self.path(key))
            .map_err(|e| TierError::store("put", key, e))?;
        bump(&self.metrics.puts, 1);
        let owned_key = key.to_string();
        let write = tokio::task::spawn_blocking(move || {
            let unavailable = |e| TierError::local_io("put", &owned_key, e);
            let mut object = DirectObject::create(&file, buffer_bytes).map_err(unavailable)?;
            let value = fill(&mut object)?;
            let len = object.finish().map_err(unavailable)?;
            Ok::<_, TierError>((value, len))
        });
        let (value, len) = self
            .timed(RequestKind::Put, write)
            .await
            .map_err(|e| TierError::local_io("put", key, std::io::Error::other(e)))??;
        bump(&self.metrics.put_bytes, len);
        Ok(value)
    }

    /// For a local-directory store: deletes the staging files (`{file}#{n}`, see
    /// [`DirectObject`]) under `dir`, at any depth, last modified before `before_ms`, which a
    /// writer killed mid-object left behind. Listing skips them, so nothing else ever would.
    /// Returns how many it deleted; on other stores there are none (an S3 bucket's lifecycle
    /// rule aborts incomplete multipart uploads).
    pub async fn delete_stale_staging(
        &self,
        dir: &str,
        before_ms: i64,
    ) -> Result<usize, TierError> {
        self.writable("delete", dir)?;
        let Some(local) = &self.local else {
            return Ok(0);
        };
        let path = local
            .path_to_filesystem(&self.path(dir))
            .map_err(|e| TierError::store("list", dir, e))?;
        let deleted = local_blocking("delete", dir, move || {
            crate::direct::sweep_staging(&path, before_ms)
        })
        .await?;
        bump(&self.metrics.deletes, deleted as u64);
        Ok(deleted)
    }

    /// Writes `key` with a single PUT of `pieces` joined, without copying them.
    pub async fn put_pieces(&self, key: &str, pieces: Vec<Bytes>) -> Result<(), TierError> {
        self.writable("put", key)?;
        let len: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        bump(&self.metrics.puts, 1);
        let path = self.path(key);
        let payload: PutPayload = pieces.into_iter().collect();
        self.timed(RequestKind::Put, self.inner.put(&path, payload))
            .await
            .map_err(|e| TierError::store("put", key, e))?;
        bump(&self.metrics.put_bytes, len);
        Ok(())
    }

    /// Starts a multipart upload of `key`; nothing is visible until [`MultipartWriter::finish`].
    pub async fn put_multipart(&self, key: &str) -> Result<MultipartWriter, TierError> {
        self.writable("multipart", key)?;
        let upload = self
            .inner
            .put_multipart(&self.path(key))
            .await
            .map_err(|e| TierError::store("multipart", key, e))?;
        Ok(MultipartWriter {
            key: key.to_string(),
            writer: WriteMultipart::new_with_chunk_size(upload, PART_BYTES),
            metrics: self.metrics.clone(),
            observer: self.observer.clone(),
            started: std::time::Instant::now(),
            bytes: 0,
        })
    }

    /// The whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes, TierError> {
        bump(&self.metrics.gets, 1);
        let path = self.path(key);
        let get = async {
            let result = self.inner.get(&path).await?;
            result.bytes().await
        };
        let bytes = self
            .timed(RequestKind::Get, get)
            .await
            .map_err(|e| TierError::store("get", key, e))?;
        bump(&self.metrics.get_bytes, bytes.len() as u64);
        Ok(bytes)
    }

    /// Bytes `range` of the object (shorter if the object ends first).
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, TierError> {
        bump(&self.metrics.gets, 1);
        let path = self.path(key);
        let get = async {
            if let Some(local) = &self.local
                && let Ok(file) = local.path_to_filesystem(&path)
            {
                // A local directory's chunk reads go around the page cache where they can.
                let range = range.clone();
                let read =
                    local_blocking("get", key, move || crate::direct::read_range(&file, range));
                if let Some(bytes) = read.await? {
                    return Ok(bytes);
                }
            }
            self.inner
                .get_range(&path, range)
                .await
                .map_err(|e| TierError::store("get", key, e))
        };
        let bytes = self.timed(RequestKind::Get, get).await?;
        bump(&self.metrics.get_bytes, bytes.len() as u64);
        Ok(bytes)
    }

    /// The last `len` bytes of the object (all of it if shorter) and the object's size.
    pub async fn get_tail(&self, key: &str, len: u64) -> Result<(Bytes, u64), TierError> {
        bump(&self.metrics.gets, 1);
        let options = GetOptions::default().with_range(Some(GetRange::Suffix(len)));
        let path = self.path(key);
        let get = async {
            let result = self.inner.get_opts(&path, options).await?;
            let size = result.meta.size;
            result.bytes().await.map(|bytes| (bytes, size))
        };
        let (bytes, size) = self
            .timed(RequestKind::Get, get)
            .await
            .map_err(|e| TierError::store("get", key, e))?;
        bump(&self.metrics.get_bytes, bytes.len() as u64);
        Ok((bytes, size))
    }

    /// Every object whose key starts with `dir/` (a whole path segment), in no set order.
    pub async fn list(&self, dir: &str) -> Result<Vec<ListedObject>, TierError> {
        bump(&self.metrics.lists, 1);
        let prefix = self.path(dir);
        let list = self.inner.list(Some(&prefix)).try_collect::<Vec<_>>();
        let objects = self
            .timed(RequestKind::List, list)
            .await
            .map_err(|e| TierError::store("list", dir, e))?;
        Ok(objects
            .into_iter()
            .map(|meta| ListedObject {
                key: self.relative(&meta.location),
                size: meta.size,
                last_modified_ms: meta.last_modified.timestamp_millis(),
            })
            .collect())
    }

    /// Deletes `key`; deleting a missing object succeeds.
    pub async fn delete(&self, key: &str) -> Result<(), TierError> {
        self.writable("delete", key)?;
        bump(&self.metrics.deletes, 1);
        let path = self.path(key);
        match self
            .timed(RequestKind::Delete, self.inner.delete(&path))
            .await
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(TierError::store("delete", key, e)),
        }
    }
}

/// A multipart upload in progress: memory is bounded by the part size times the parts in
/// flight.
#[derive(Debug)]
pub struct MultipartWriter {
    key: String,
    writer: WriteMultipart,
    metrics: Arc<TierMetrics>,
    observer: Option<RequestObserver>,
    started: std::time::Instant,
    bytes: u64,
}

impl MultipartWriter {
    /// Buffers `data`, waiting first while too many parts are in flight.
    pub async fn write(&mut self, data: &[u8]) -> Result<(), TierError> {
        self.writer
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| TierError::store("multipart", &self.key, e))?;
        self.writer.write(data);
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// Uploads the rest and makes the object visible. Counts as the PUT-class requests it
    /// makes: one to create the upload, one per part, one to complete it.
    pub async fn finish(self) -> Result<(), TierError> {
        let parts = self.bytes.div_ceil(PART_BYTES as u64).max(1);
        bump(&self.metrics.puts, parts + 2);
        let result = self.writer.finish().await;
        if let Some(observer) = &self.observer {
            (observer.0)(RequestKind::Put, self.started.elapsed());
        }
        result.map_err(|e| TierError::store("multipart", &self.key, e))?;
        bump(&self.metrics.put_bytes, self.bytes);
        Ok(())
    }

    /// Gives up; the store discards the parts.
    pub async fn abort(self) -> Result<(), TierError> {
        let key = self.key;
        self.writer
            .abort()
            .await
            .map_err(|e| TierError::store("multipart", &key, e))
    }
}

fn s3_store(bucket: &str, s3: &S3Settings) -> Result<Arc<dyn ObjectStore>, TierError> {
    install_crypto_provider();
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = &s3.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &s3.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &s3.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(token) = &s3.session_token {
        builder = builder.with_token(token);
    }
    if s3.allow_http {
        builder = builder.with_allow_http(true);
    }
    let store = builder
        .with_retry(request_retry())
        .build()
        .map_err(|e| TierError::Config(format!("s3 bucket {bucket}: {e}")))?;
    Ok(Arc::new(store))
}

/// How an S3 store retries one request, set here rather than left to object_store's
/// defaults (10 retries over up to 3 minutes). object_store retries what it knows is safe to
/// send again: a connection that failed before the request went out, a 5xx, a 429 or a
/// `SlowDown`, a timeout of an idempotent request. It waits with jitter of its own between
/// `initial` and twice the previous wait. Floe's [`RetryPolicy`](crate::RetryPolicy) does not
/// retry these failures again ([`TierStore::worth_retrying`]): a request that keeps failing
/// fails within about half a minute, and the caller's own loop (tiering's next run, a
/// consumer's next fetch) takes over.
pub fn request_retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 5,
        retry_timeout: Duration::from_secs(30),
    }
}

/// The workspace's TLS runs on ring alone; the HTTP client needs it installed as rustls'
/// process default before its first connection. Installing is idempotent: a provider the
/// program installed first is kept.
fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Runs `work` on local files on a blocking thread; its failure, or the thread's, is
/// [`TierError::local_io`] of `operation` on `key`.
async fn local_blocking<T: Send + 'static>(
    operation: &'static str,
    key: &str,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, TierError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(std::io::Error::other)
        .and_then(|done| done)
        .map_err(|e| TierError::local_io(operation, key, e))
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    #[tokio::test]
    async fn a_read_only_store_refuses_every_write_before_it_reaches_the_bucket() {
        let bucket = Arc::new(InMemory::new());
        let writer = TierStore::new(bucket.clone(), "p");
        writer
            .put("s/0/kept", Bytes::from_static(b"history"))
            .await
            .expect("a writable store writes");
        let reader = TierStore::new(bucket.clone(), "p").read_only();
        assert!(reader.is_read_only() && !writer.is_read_only());

        let refused = |result: Result<(), TierError>, what: &str| match result {
            Err(TierError::ReadOnly { .. }) => {}
            other => panic!("{what} on a read-only store: {other:?}"),
        };
        let bytes = || Bytes::from_static(b"x");
        refused(reader.put("s/0/new", bytes()).await, "put");
        refused(
            reader.put_if_absent("s/0/new", bytes()).await.map(|_| ()),
            "put-if-absent",
        );
        refused(reader.put_pieces("s/0/new", vec![bytes()]).await, "put");
        refused(
            reader.put_multipart("s/0/new").await.map(|_| ()),
            "multipart",
        );
        refused(reader.delete("s/0/kept").await, "delete");
        refused(
            reader.delete_stale_staging("s", i64::MAX).await.map(|_| ()),
            "staging sweep",
        );

        // Reads work; the bucket holds exactly what the writer put, and the reader counted
        // no write.
        assert_eq!(
            reader.get("s/0/kept").await.expect("get"),
            Bytes::from_static(b"history")
        );
        let listed = reader.list("s").await.expect("list");
        assert_eq!(listed.len(), 1, "{listed:?}");
        let counted = reader.metrics().snapshot();
        assert_eq!((counted.puts, counted.deletes), (0, 0), "{counted:?}");
    }
}
