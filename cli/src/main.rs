//! `floe`: Floe's command-line client. Stream administration, publishing from stdin,
//! consuming to stdout, and benchmarks. Tables for people by default, `--json` for scripts.
//! With no connection flags it uses the client profile `floe-broker dev` wrote.

mod admin;
mod bench;
mod consume;
mod group;
mod next_step;
mod output;
mod position;
mod profile;
mod progress;
mod publish;
mod read_replica;
mod size;
mod stream;
mod token;
mod version;

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use floe_client::rest::Controlplane;
use floe_client::{Client, ClientConfig};
use floe_wire::ClientProfile;
use floe_wire::auth::Secret;

/// What `floe --version` prints after the name: the version and the commit
/// `FLOE_BUILD_COMMIT` named at build time (`scripts/package.sh` sets it), like the servers.
fn version_line() -> &'static str {
    static LINE: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| floe_wire::admin::Build::current().to_string());
    LINE.as_str()
}

#[derive(Parser, Debug)]
#[command(name = "floe", version = version_line(), about = "Floe command-line client")]
struct Cli {
    #[command(flatten)]
    connection: ConnectionArgs,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The heading of the connection flags in every command's `--help`, after its own flags.
const CONNECTION: &str = "Connection (override the profile)";

/// Where the cluster is. Flags override the profile's fields.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnectionArgs {
    /// Client profile, by name (`floe profile list`) or path [default: $FLOE_PROFILE, else
    /// the current profile (`floe profile use`), else `dev`, which `floe-broker dev` writes]
    #[arg(long, global = true, value_name = "NAME|PATH", help_heading = CONNECTION)]
    profile: Option<OsString>,
    /// Broker QUIC endpoint, host:port.
    #[arg(long, global = true, value_name = "HOST:PORT", help_heading = CONNECTION)]
    endpoint: Option<String>,
    /// PEM file of the CA that signed the broker's certificate.
    #[arg(long, global = true, value_name = "PATH", help_heading = CONNECTION)]
    ca_cert: Option<PathBuf>,
    /// Name the broker's certificate must carry [default: the profile's, else the
    /// endpoint's host].
    #[arg(long, global = true, value_name = "NAME", help_heading = CONNECTION)]
    server_name: Option<String>,
    /// The controlplane's REST API, e.g. http://127.0.0.1:7300 [default: the profile's]
    #[arg(
        long,
        global = true,
        env = "FLOE_CONTROLPLANE",
        value_name = "URL",
        help_heading = CONNECTION
    )]
    controlplane: Option<String>,
    /// The token that proves who you are, to the brokers and the controlplane [default:
    /// the profile's]. Prefer FLOE_TOKEN or the profile: other users of the machine can read
    /// a command line.
    #[arg(
        long,
        global = true,
        env = "FLOE_TOKEN",
        hide_env_values = true,
        help_heading = CONNECTION
    )]
    token: Option<String>,
    /// A PEM client certificate to sign in with instead of a token (brokers given
    /// `--client-ca`: its common name is your principal) [default: the profile's].
    #[arg(
        long,
        global = true,
        env = "FLOE_CLIENT_CERT",
        value_name = "PATH",
        requires = "client_key",
        help_heading = CONNECTION
    )]
    client_cert: Option<PathBuf>,
    /// The PEM private key of --client-cert.
    #[arg(
        long,
        global = true,
        env = "FLOE_CLIENT_KEY",
        value_name = "PATH",
        requires = "client_cert",
        help_heading = CONNECTION
    )]
    client_key: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(flatten)]
    Remote(Remote),
    /// Named client profiles: where each cluster is, and which one commands use.
    Profile {
        #[command(subcommand)]
        command: profile::ProfileCommand,
    },
    /// Print a shell completion script: `floe completions bash > /etc/bash_completion.d/floe`,
    /// `floe completions zsh > "${fpath[1]}/_floe"`, `floe completions fish >
    /// ~/.config/fish/completions/floe.fish`.
    Completions { shell: clap_complete::Shell },
    /// This client's version and, when reachable, the controlplane's and each broker's and
    /// read replica's.
    Version,
}

/// The commands that talk to the cluster.
#[derive(Subcommand, Debug)]
enum Remote {
    /// Create, list, describe and delete streams (through the controlplane when there is
    /// one).
    Stream {
        #[command(subcommand)]
        command: stream::StreamCommand,
    },
    /// Create, list and revoke principals' tokens (controlplane, cluster-admin).
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// List and drain brokers (controlplane).
    Broker {
        #[command(subcommand)]
        command: admin::BrokerCommand,
    },
    /// List and drain read replicas (controlplane).
    // `replica`, the old name, stays as a hidden alias so that scripts keep working.
    #[command(name = "read-replica", alias = "replica")]
    ReadReplica {
        #[command(subcommand)]
        command: read_replica::ReadReplicaCommand,
    },
    /// List, describe, reset and delete consumer groups (controlplane).
    Group {
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    /// The cluster at a glance, and the read-replica scaling policy (controlplane).
    Cluster {
        #[command(subcommand)]
        command: admin::ClusterCommand,
    },
    /// Publish one record per line of stdin.
    Publish(publish::PublishArgs),
    /// Print records of a stream.
    ///
    /// Without --count, follows the tail until interrupted (Ctrl-C ends it cleanly). With
    /// --json, one object per line: stream, partition, offset, timestamp (ms since the Unix
    /// epoch), key, value, headers. Keys and values that are UTF-8 are JSON strings; other
    /// bytes are never altered: they appear base64-encoded in key_base64 / value_base64.
    Consume(consume::ConsumeArgs),
    /// Measure publish or consume throughput and latency.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
}

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(cli) {
        eprintln!("floe: error: {e:#}");
        if let Some(step) = next_step::next_step(&e) {
            eprintln!("floe: {step}");
        }
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    // Commands about the local machine need no profile and no cluster.
    let command = match cli.command {
        Command::Profile { command } => return profile::run(command, &cli.connection, cli.json),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "floe", &mut std::io::stdout());
            return Ok(());
        }
        Command::Version => None,
        Command::Remote(command) => Some(command),
    };
    // The library picks its provider explicitly; anything else in the process that uses
    // rustls finds this one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let Some(command) = command else {
            return version::run(&cli.connection, cli.json).await;
        };
        let profile = read_profile(&cli.connection)?;
        let controlplane = controlplane(&cli.connection, profile.as_ref())?;
        if let Some(controlplane) = &controlplane {
            match command {
                // A repair goes to the broker that holds the partition.
                Remote::Stream {
                    command: command @ stream::StreamCommand::Repair(_),
                } => {
                    return remote(
                        &cli.connection,
                        profile,
                        Remote::Stream { command },
                        cli.json,
                    )
                    .await;
                }
                Remote::Stream { command } => {
                    return admin::stream(controlplane, command, cli.json).await;
                }
                Remote::Broker { command } => {
                    return admin::broker(controlplane, command, cli.json).await;
                }
                Remote::Cluster { command } => {
                    return admin::cluster(controlplane, command, cli.json).await;
                }
                Remote::ReadReplica { command } => {
                    return read_replica::read_replica(controlplane, command, cli.json).await;
                }
                Remote::Token { command } => {
                    return token::run(controlplane, command, cli.json).await;
                }
                Remote::Group { command } => {
                    let config = client_config(&cli.connection, profile.as_ref());
                    return group::run(controlplane, config, command, cli.json).await;
                }
                command => return remote(&cli.connection, profile, command, cli.json).await,
            }
        }
        remote(&cli.connection, profile, command, cli.json).await
    })
}

/// A command over QUIC, or one that needs the controlplane when there is none.
async fn remote(
    connection: &ConnectionArgs,
    profile: Option<ClientProfile>,
    command: Remote,
    json: bool,
) -> Result<()> {
    let config = client_config(connection, profile.as_ref())?;
    match command {
        Remote::Broker { .. }
        | Remote::Cluster { .. }
        | Remote::ReadReplica { .. }
        | Remote::Group { .. }
        | Remote::Token { .. } => Err(anyhow::anyhow!(
            "no controlplane: pass --controlplane URL (or set FLOE_CONTROLPLANE), or use \
                 the profile `floe-broker dev` writes"
        )),
        Remote::Stream { command } => stream::run(config, command, json).await,
        Remote::Publish(args) => publish::run(config, args, json).await,
        Remote::Consume(args) => consume::run(config, args, json).await,
        Remote::Bench { command } => bench::run(config, command, json).await,
    }
}

/// The profile `--profile` names (a name or a path), else the current one, when there is one.
fn read_profile(args: &ConnectionArgs) -> Result<Option<ClientProfile>> {
    let Some(found) = floe_client::resolve_profile(args.profile.as_deref())? else {
        return Ok(None);
    };
    let profile = floe_client::read_profile(&found.path).with_context(|| match &found.name {
        Some(name) => format!(
            "reading the client profile {name} ({}); `floe profile list` shows the profiles",
            found.path.display()
        ),
        None => format!("reading the client profile {}", found.path.display()),
    })?;
    Ok(Some(profile))
}

/// The controlplane from the flag, else the profile; `None` when neither names one.
fn controlplane(
    args: &ConnectionArgs,
    profile: Option<&ClientProfile>,
) -> Result<Option<Controlplane>> {
    let url = args
        .controlplane
        .clone()
        .or_else(|| profile.and_then(|p| p.controlplane.clone()));
    // The cluster's CA, the one the brokers' certificates chain to, is trusted for an https
    // controlplane too.
    let ca = args
        .ca_cert
        .clone()
        .or_else(|| profile.map(|p| p.ca_cert.clone()));
    url.map(|url| {
        Controlplane::with_ca(
            &url,
            token(args, profile).map(|t| t.expose().to_owned()),
            ca.as_deref(),
        )
    })
    .transpose()
    .context("the controlplane")
}

/// The client configuration from the profile and the flags that override it.
fn client_config(args: &ConnectionArgs, profile: Option<&ClientProfile>) -> Result<ClientConfig> {
    let hint = "start a broker with `floe-broker dev` (it writes the client profile), or pass \
                --endpoint and --ca-cert";
    let endpoint = args
        .endpoint
        .clone()
        .or_else(|| profile.map(|p| p.endpoint.clone()))
        .with_context(|| format!("no broker endpoint: {hint}"))?;
    let ca_cert = args
        .ca_cert
        .clone()
        .or_else(|| profile.map(|p| p.ca_cert.clone()))
        .with_context(|| format!("no CA certificate: {hint}"))?;
    let server_name = args
        .server_name
        .clone()
        .or_else(|| profile.map(|p| p.server_name.clone()))
        .unwrap_or_else(|| host_of(&endpoint).to_string());
    let mut config = ClientConfig::new(endpoint, server_name, ca_cert);
    config.token = token(args, profile);
    config.client_certificate = match (&args.client_cert, &args.client_key) {
        (Some(cert), Some(key)) => Some(floe_client::ClientCertificate {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => profile.and_then(|p| ClientConfig::from_profile(p).client_certificate),
    };
    // With the controlplane known, consumers read history through the read replicas.
    config.controlplane = args
        .controlplane
        .clone()
        .or_else(|| profile.and_then(|p| p.controlplane.clone()));
    Ok(config)
}

/// The token from the flag (or FLOE_TOKEN), else the profile's.
fn token(args: &ConnectionArgs, profile: Option<&ClientProfile>) -> Option<Secret> {
    args.token
        .clone()
        .map(Secret::new)
        .or_else(|| profile.and_then(|p| p.token.clone()))
}

/// The host part of `host:port` (without the brackets of an IPv6 address); of the first
/// entry when `endpoint` lists several brokers (`host1:7100,host2:7100`), the one the client
/// tries first, since one server name is checked on every broker of a cluster.
pub(crate) fn host_of(endpoint: &str) -> &str {
    let first = endpoint
        .split(',')
        .map(str::trim)
        .find(|e| !e.is_empty())
        .unwrap_or("");
    let host = first.rsplit_once(':').map_or(first, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Connects, naming the endpoint in the error and, when the failure says what is wrong,
/// what to do about it.
async fn connect(config: ClientConfig) -> Result<Client> {
    let endpoint = config.endpoint.clone();
    let (ca_cert, server_name) = (config.ca_cert.clone(), config.server_name.clone());
    Client::connect(config).await.map_err(|e| {
        let detail = floe_wire::ErrorChain(&e).to_string();
        let context = match connect_hint(&detail, &endpoint, &ca_cert, &server_name) {
            Some(hint) => format!("connecting to the broker at {endpoint}: {hint}"),
            None => format!("connecting to the broker at {endpoint}"),
        };
        anyhow::Error::new(e).context(context)
    })
}

/// What to do about a failed connection, when its error says what went wrong.
fn connect_hint(
    detail: &str,
    endpoint: &str,
    ca_cert: &std::path::Path,
    server_name: &str,
) -> Option<String> {
    use floe_client::rest::CertificateRefusal;
    match CertificateRefusal::in_error(detail) {
        Some(CertificateRefusal::UntrustedIssuer) => Some(format!(
            "its certificate is not signed by the CA in {} (pass the cluster's CA with \
             --ca-cert, or fix the profile's ca_cert)",
            ca_cert.display()
        )),
        Some(CertificateRefusal::WrongName) => Some(format!(
            "its certificate does not name `{server_name}` (pass --server-name with a name the \
             certificate carries, or fix the profile's server_name)"
        )),
        None if detail.contains("timed out") => Some(format!(
            "nothing answered at {endpoint} (is a broker running there, and does UDP reach it? \
             `floe broker list` shows the brokers the controlplane knows)"
        )),
        None => None,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_say_what_to_do() {
        let ca = std::path::Path::new("/etc/floe/ca.pem");
        let hint = |detail: &str| connect_hint(detail, "b1:7100", ca, "brokers.internal");
        let wrong_ca = hint("handshake: invalid peer certificate: UnknownIssuer").expect("a hint");
        assert!(wrong_ca.contains("/etc/floe/ca.pem") && wrong_ca.contains("--ca-cert"));
        assert_eq!(
            hint("invalid peer certificate: BadSignature"),
            Some(wrong_ca)
        );
        let name = hint("invalid peer certificate: NotValidForName").expect("a hint");
        assert!(name.contains("`brokers.internal`") && name.contains("--server-name"));
        let silent = hint("timed out after 10s").expect("a hint");
        assert!(silent.contains("b1:7100"), "{silent}");
        assert_eq!(hint("Hello refused: Unauthorized (16): no token"), None);
    }

    #[test]
    fn flags_override_the_profile() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("profile.json");
        std::fs::write(
            &path,
            br#"{"endpoint":"127.0.0.1:7100","server_name":"localhost","ca_cert":"/ca.pem",
                "controlplane":"http://127.0.0.1:7300"}"#,
        )?;
        let args = ConnectionArgs {
            profile: Some(path.clone().into_os_string()),
            ..ConnectionArgs::default()
        };
        let profile = read_profile(&args)?;
        let from_profile = client_config(&args, profile.as_ref())?;
        assert_eq!(from_profile.endpoint, "127.0.0.1:7100");
        assert_eq!(from_profile.server_name, "localhost");
        assert_eq!(from_profile.ca_cert, PathBuf::from("/ca.pem"));
        // Consumers learn the read replicas from the profile's controlplane.
        assert_eq!(
            from_profile.controlplane.as_deref(),
            Some("http://127.0.0.1:7300")
        );
        let overridden = client_config(
            &ConnectionArgs {
                profile: Some(path.into_os_string()),
                endpoint: Some("broker.example:7100".into()),
                ca_cert: Some("/other.pem".into()),
                controlplane: Some("http://controlplane.example:7300".into()),
                ..ConnectionArgs::default()
            },
            profile.as_ref(),
        )?;
        assert_eq!(overridden.endpoint, "broker.example:7100");
        assert_eq!(overridden.ca_cert, PathBuf::from("/other.pem"));
        assert_eq!(overridden.server_name, "localhost");
        assert_eq!(
            overridden.controlplane.as_deref(),
            Some("http://controlplane.example:7300")
        );
        Ok(())
    }

    #[test]
    fn read_replica_commands_answer_to_their_old_name_too() -> Result<()> {
        for name in ["read-replica", "replica"] {
            let cli = Cli::try_parse_from(["floe", name, "drain", "r-1"])?;
            let Command::Remote(Remote::ReadReplica { command }) = cli.command else {
                anyhow::bail!("`floe {name} drain` parsed as {:?}", cli.command);
            };
            assert!(
                matches!(&command, read_replica::ReadReplicaCommand::Drain { id } if id == "r-1"),
                "{command:?}"
            );
        }
        let help = <Cli as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        assert!(help.contains("read-replica"), "{help}");
        assert!(
            !help.lines().any(|l| l.trim_start().starts_with("replica")),
            "the old name is hidden: {help}"
        );
        Ok(())
    }

    #[test]
    fn without_a_profile_the_server_name_is_the_endpoints_host() -> Result<()> {
        let profile = read_profile(&ConnectionArgs {
            profile: Some("/nonexistent/profile.json".into()),
            ..ConnectionArgs::default()
        });
        assert!(profile.is_err(), "a named profile must exist");
        assert_eq!(host_of("broker.example:7100"), "broker.example");
        assert_eq!(host_of("[::1]:7100"), "::1");
        assert_eq!(host_of("10.0.0.1:7100, 10.0.0.2:7100"), "10.0.0.1");
        assert_eq!(host_of(" ,b1.example:7100,b2.example:7100"), "b1.example");
        Ok(())
    }
}
