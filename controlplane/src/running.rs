//! Starting and stopping a controlplane: open the store, bind the HTTP listener, start the
//! election and the reconciler, and hand back a [`Running`] handle.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::serve::ListenerExt;
use floe_wire::admin::Role;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::config::{Config, Database};
use crate::driver::{DriverError, ReadReplicaDriverConfig};
use crate::store::{SqlStore, StoreError};
use crate::{api, autoscale_loop, election, reconcile};

/// Why a controlplane did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("could not open the metadata store")]
    Store(#[from] StoreError),
    #[error("could not create the data directory {path}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not start the read replica driver")]
    Driver(#[from] DriverError),
    #[error("cannot serve the REST API over TLS")]
    Tls(#[from] crate::tls::TlsError),
    #[error("could not listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// Entry point of the library.
#[derive(Debug)]
pub struct Controlplane;

impl Controlplane {
    /// Starts a controlplane in the current tokio runtime and returns once it listens. On
    /// SQLite it leads at once; on PostgreSQL it stands by until it wins the election
    /// ([`Running::wait_for_role`]).
    pub async fn start(config: Config) -> Result<Running, StartError> {
        // Certificate problems first: nothing is opened for a start that cannot serve.
        let tls = config.tls.as_ref().map(crate::tls::acceptor).transpose()?;
        let store = open_store(&config.database).await?;
        let (listener, local_addr) = listen(config.listen).await?;
        let database = config.database.clone();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let cluster = Arc::new(Cluster::new(store.clone(), config, shutdown_rx.clone()));
        let mut tasks = Vec::new();
        // First: a driver that cannot start fails the start before anything runs.
        if let Some(task) = spawn_autoscaler(&cluster, &shutdown_rx, local_addr).await? {
            tasks.push(task);
        }
        match database {
            Database::Sqlite { .. } => cluster.take_over().await?,
            Database::Postgres { url } => tasks.push(tokio::spawn(election::run(
                cluster.clone(),
                url,
                shutdown_rx.clone(),
            ))),
        }
        tasks.push(tokio::spawn(reconcile::run(
            cluster.clone(),
            shutdown_rx.clone(),
        )));
        tasks.push(tokio::spawn(crate::api::expire_group_members(
            cluster.clone(),
        )));
        if let Some(queue) = cluster.take_commit_queue() {
            tasks.push(tokio::spawn(crate::api::commit_offsets_loop(
                cluster.clone(),
                queue,
                shutdown_rx.clone(),
            )));
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        tasks.push(spawn_http(
            listener,
            local_addr,
            tls,
            &cluster,
            shutdown_rx.clone(),
        )?);
        tracing::info!(%local_addr, scheme, backend = ?store.backend(), "controlplane listening");
        Ok(Running {
            local_addr,
            scheme,
            role: cluster.watch_role(),
            shutdown,
            tasks,
            store,
        })
    }
}

/// Opens the metadata store; on SQLite, creates the database file's directory first.
async fn open_store(database: &Database) -> Result<SqlStore, StartError> {
    Ok(match database {
        Database::Sqlite { path } => {
            if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| StartError::DataDir {
                    path: dir.to_owned(),
                    source,
                })?;
            }
            SqlStore::open_sqlite(path).await?
        }
        Database::Postgres { url } => SqlStore::connect(url).await?,
    })
}

/// Binds the HTTP listener; returns it with the address it got (`addr` may ask for port 0).
async fn listen(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| StartError::Listen { addr, source })?;
    Ok((listener, local_addr))
}

/// Serves the API on `listener` (over TLS when `tls` is given) until `shutdown` turns true,
/// then stops gracefully.
fn spawn_http(
    listener: TcpListener,
    addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    cluster: &Arc<Cluster<SqlStore>>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, StartError> {
    let router = api::router(cluster.clone());
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let logged = |result: io::Result<()>| {
        if let Err(error) = result {
            tracing::error!(%error, "the HTTP server stopped");
        }
    };
    Ok(match tls {
        Some(acceptor) => {
            let listener = crate::tls::TlsListener::new(listener, acceptor)
                .map_err(|source| StartError::Listen { addr, source })?;
            tokio::spawn(async move {
                logged(
                    axum::serve(listener, router)
                        .with_graceful_shutdown(stopped)
                        .await,
                )
            })
        }
        None => {
            // Small JSON answers: send them now rather than wait for the client's ACK
            // (Nagle). The TLS listener does the same for its connections.
            let listener = listener.tap_io(|tcp| {
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(%error, "could not set TCP_NODELAY");
                }
            });
            tokio::spawn(async move {
                logged(
                    axum::serve(listener, router)
                        .with_graceful_shutdown(stopped)
                        .await,
                )
            })
        }
    })
}

/// Starts the autoscaler with the configured driver, if one is. A cloud driver checks its
/// credentials and target here, so that a start without them fails.
async fn spawn_autoscaler(
    cluster: &Arc<Cluster<SqlStore>>,
    shutdown: &watch::Receiver<bool>,
    api: SocketAddr,
) -> Result<Option<JoinHandle<()>>, DriverError> {
    let (cluster, shutdown) = (cluster.clone(), shutdown.clone());
    Ok(Some(match cluster.config.read_replicas.clone() {
        ReadReplicaDriverConfig::None => return Ok(None),
        ReadReplicaDriverConfig::Local { program, args, env } => {
            // Children learn where to register from FLOE_CONTROLPLANE (a `--controlplane`
            // among `args` still wins): this API, bound by now, even on port 0.
            let host = match api.ip() {
                ip if ip.is_unspecified() && ip.is_ipv4() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                ip if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                ip => ip,
            };
            // Over TLS the children trust the API's certificate by their own
            // FLOE_CONTROLPLANE_CA (inherited, or among `env`), and the certificate must name
            // this address.
            let scheme = if cluster.config.tls.is_some() {
                "https"
            } else {
                "http"
            };
            let url = format!("{scheme}://{}", SocketAddr::new(host, api.port()));
            let mut driver =
                crate::driver::local::LocalDriver::new(program, args).env("FLOE_CONTROLPLANE", url);
            for (key, value) in env {
                driver = driver.env(key, value);
            }
            tokio::spawn(autoscale_loop::run(cluster, driver, shutdown))
        }
        #[cfg(feature = "kubernetes")]
        ReadReplicaDriverConfig::Kubernetes(config) => {
            let driver = crate::driver::kubernetes::KubernetesDriver::new(config)?;
            tokio::spawn(autoscale_loop::run(cluster, driver, shutdown))
        }
        #[cfg(feature = "aws-asg")]
        ReadReplicaDriverConfig::AwsAutoScalingGroup(config) => {
            let driver = crate::driver::aws_asg::AsgDriver::connect(config).await?;
            tokio::spawn(autoscale_loop::run(cluster, driver, shutdown))
        }
        #[cfg(not(feature = "kubernetes"))]
        ReadReplicaDriverConfig::Kubernetes(_) => {
            return Err(DriverError::NotBuilt {
                driver: "Kubernetes",
                feature: "kubernetes",
            });
        }
        #[cfg(not(feature = "aws-asg"))]
        ReadReplicaDriverConfig::AwsAutoScalingGroup(_) => {
            return Err(DriverError::NotBuilt {
                driver: "AWS autoscaling group",
                feature: "aws-asg",
            });
        }
    }))
}

/// A started controlplane. Dropping it does not stop it; call [`Running::shutdown`].
#[derive(Debug)]
pub struct Running {
    local_addr: SocketAddr,
    scheme: &'static str,
    role: watch::Receiver<Role>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    store: SqlStore,
}

impl Running {
    /// The address the REST API listens on (the real port when configured with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The API's base URL: `https://ADDR` with a certificate, else `http://ADDR`.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.local_addr)
    }

    /// Whether this controlplane leads now.
    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    /// Waits until this controlplane has `role`.
    pub async fn wait_for_role(&mut self, role: Role) {
        // The sender lives as long as the cluster, which outlives this handle's tasks.
        let _ = self.role.wait_for(|current| *current == role).await;
    }

    /// Stops serving (in-flight requests finish; long-polls are cut), releases the
    /// leadership and closes the store.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        for task in self.tasks {
            if let Err(error) = task.await {
                tracing::warn!(%error, "a controlplane task failed");
            }
        }
        self.store.close().await;
    }
}
