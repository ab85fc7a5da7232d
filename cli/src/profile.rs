//! `floe profile`: the named client profiles in `~/.config/floe/profiles` and which one is
//! current. A profile says where the cluster is (a broker's QUIC endpoint, the CA, the
//! controlplane); `floe-broker dev` writes the one named `dev`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use floe_wire::ClientProfile;
use floe_wire::profile::{ProfileDir, check_name};

use crate::ConnectionArgs;
use crate::output::{print, print_json, table};

#[derive(Subcommand, Debug)]
pub enum ProfileCommand {
    /// List the named profiles; `*` marks the current one.
    List,
    /// Make NAME the profile every command uses unless told otherwise.
    Use { name: String },
    /// Print a profile (the current one without NAME).
    Show { name: Option<String> },
    /// Write the profile NAME from the connection flags (--endpoint, --ca-cert,
    /// --server-name, --controlplane, --token or FLOE_TOKEN) or from a profile file (--from).
    Create {
        name: String,
        /// Copy this profile file (e.g. the `client_profile` output of the Terraform
        /// example) instead of building one from the flags.
        #[arg(long, value_name = "PATH")]
        from: Option<PathBuf>,
        /// Replace a profile of that name.
        #[arg(long)]
        force: bool,
        /// Make it the current profile too.
        #[arg(long = "use")]
        make_current: bool,
    },
    /// Delete the profile NAME.
    Delete { name: String },
}

pub fn run(command: ProfileCommand, connection: &ConnectionArgs, json: bool) -> Result<()> {
    let dir = ProfileDir::from_env(|name| std::env::var_os(name))
        .context("no configuration directory for profiles: set HOME or XDG_CONFIG_HOME")?;
    match command {
        ProfileCommand::List => list(&dir, json),
        ProfileCommand::Use { name } => use_profile(&dir, &name, json),
        ProfileCommand::Show { name } => show(&dir, name, json),
        ProfileCommand::Create {
            name,
            from,
            force,
            make_current,
        } => {
            let profile = match from {
                Some(path) => floe_client::read_profile(&path)
                    .with_context(|| format!("reading the profile {}", path.display()))?,
                None => from_flags(connection)?,
            };
            create(&dir, &name, &profile, force)?;
            if make_current {
                set_current(&dir, &name)?;
            }
            print(&format!(
                "wrote profile {name} ({}){}\n",
                dir.named(&name).display(),
                if make_current {
                    "; it is now current"
                } else {
                    ""
                }
            ))?;
            Ok(())
        }
        ProfileCommand::Delete { name } => delete(&dir, &name),
    }
}

/// The names of the profiles in `dir`, sorted.
fn names(dir: &ProfileDir) -> Result<Vec<String>> {
    let profiles = dir.profiles();
    let entries = match std::fs::read_dir(&profiles) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", profiles.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", profiles.display()))?;
        let file = entry.file_name();
        if let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".json"))
            && check_name(name).is_ok()
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn list(dir: &ProfileDir, json: bool) -> Result<()> {
    let current = floe_client::current_profile(dir)?;
    let mut rows = Vec::new();
    let mut values = Vec::new();
    for name in names(dir)? {
        let is_current = current.as_deref() == Some(name.as_str());
        let (endpoint, controlplane) = match floe_client::read_profile(&dir.named(&name)) {
            Ok(p) => (p.endpoint, p.controlplane.unwrap_or_else(|| "-".into())),
            Err(e) => (format!("unreadable: {e}"), "-".into()),
        };
        values.push(serde_json::json!({
            "name": name, "current": is_current, "endpoint": endpoint,
            "controlplane": (controlplane != "-").then_some(&controlplane),
        }));
        let marker = if is_current { "*" } else { "" };
        rows.push(vec![marker.into(), name, endpoint, controlplane]);
    }
    if json {
        print_json(&serde_json::Value::Array(values))?;
    } else if rows.is_empty() {
        print(&format!(
            "no profiles in {}: `floe-broker dev` writes `dev`; `floe profile create NAME` \
             writes others\n",
            dir.profiles().display()
        ))?;
    } else {
        print(&table(&["", "NAME", "ENDPOINT", "CONTROLPLANE"], &rows))?;
    }
    Ok(())
}

fn use_profile(dir: &ProfileDir, name: &str, json: bool) -> Result<()> {
    check_name(name).map_err(anyhow::Error::msg)?;
    if !dir.named(name).exists() {
        let known = names(dir)?;
        bail!(
            "no profile named {name} in {}; {}",
            dir.profiles().display(),
            if known.is_empty() {
                "there are none: `floe-broker dev` writes `dev`, `floe profile create NAME` \
                 writes others"
                    .to_string()
            } else {
                format!("there are: {}", known.join(", "))
            }
        );
    }
    // A profile that does not parse is refused now rather than at the next command.
    floe_client::read_profile(&dir.named(name))?;
    set_current(dir, name)?;
    if json {
        print_json(&serde_json::json!({ "current": name }))?;
    } else {
        print(&format!("now using profile {name}\n"))?;
    }
    Ok(())
}

fn show(dir: &ProfileDir, name: Option<String>, json: bool) -> Result<()> {
    let (path, name) = match name {
        Some(name) => {
            check_name(&name).map_err(anyhow::Error::msg)?;
            (dir.named(&name), Some(name))
        }
        None => {
            let found = floe_client::resolve_profile(None)?.context(
                "no current profile: `floe profile use NAME`, or start `floe-broker dev`",
            )?;
            (found.path, found.name)
        }
    };
    let profile = floe_client::read_profile(&path)?;
    if json {
        let mut value = serde_json::to_value(&profile)?;
        // The secret stays in the file.
        if profile.token.is_some() {
            value["token"] = serde_json::json!("<set>");
        }
        print_json(&value)?;
    } else {
        let mut text = format!(
            "profile {} ({})\n",
            name.as_deref().unwrap_or("-"),
            path.display()
        );
        text.push_str(&format!("endpoint: {}\n", profile.endpoint));
        text.push_str(&format!("server name: {}\n", profile.server_name));
        text.push_str(&format!("CA certificate: {}\n", profile.ca_cert.display()));
        if let Some(controlplane) = &profile.controlplane {
            text.push_str(&format!("controlplane: {controlplane}\n"));
        }
        if let Some(metrics) = &profile.metrics {
            text.push_str(&format!("metrics: {metrics}\n"));
        }
        if profile.token.is_some() {
            text.push_str("token: set (not shown)\n");
        }
        if let Some(cert) = &profile.client_cert {
            text.push_str(&format!("client certificate: {}\n", cert.display()));
        }
        print(&text)?;
    }
    Ok(())
}

/// A profile from the connection flags, which must name at least the endpoint and the CA.
fn from_flags(args: &ConnectionArgs) -> Result<ClientProfile> {
    let endpoint = args
        .endpoint
        .clone()
        .context("a profile needs --endpoint HOST:PORT (or --from FILE)")?;
    let ca_cert = args
        .ca_cert
        .clone()
        .context("a profile needs --ca-cert PATH (or --from FILE)")?;
    // A relative CA path would mean something else from another directory.
    let ca_cert = std::path::absolute(&ca_cert)
        .with_context(|| format!("the CA certificate path {}", ca_cert.display()))?;
    if !ca_cert.exists() {
        bail!("the CA certificate {} does not exist", ca_cert.display());
    }
    let server_name = args
        .server_name
        .clone()
        .unwrap_or_else(|| crate::host_of(&endpoint).to_string());
    Ok(ClientProfile {
        endpoint,
        server_name,
        ca_cert,
        metrics: None,
        controlplane: args.controlplane.clone(),
        token: args.token.clone().map(floe_wire::auth::Secret::new),
        client_cert: args.client_cert.clone(),
        client_key: args.client_key.clone(),
    })
}

fn create(dir: &ProfileDir, name: &str, profile: &ClientProfile, force: bool) -> Result<()> {
    check_name(name).map_err(anyhow::Error::msg)?;
    let path = dir.named(name);
    if path.exists() && !force {
        bail!(
            "a profile named {name} exists ({}); pass --force to replace it",
            path.display()
        );
    }
    let bytes = serde_json::to_vec_pretty(profile)?;
    write_atomically(&path, &bytes)
}

fn delete(dir: &ProfileDir, name: &str) -> Result<()> {
    check_name(name).map_err(anyhow::Error::msg)?;
    let path = dir.named(name);
    std::fs::remove_file(&path).with_context(|| format!("deleting {}", path.display()))?;
    if floe_client::current_profile(dir)?.as_deref() == Some(name) {
        let current = dir.current_file();
        std::fs::remove_file(&current)
            .with_context(|| format!("deleting {}", current.display()))?;
    }
    print(&format!("deleted profile {name}\n"))?;
    Ok(())
}

/// Makes `name` the current profile.
pub fn set_current(dir: &ProfileDir, name: &str) -> Result<()> {
    write_atomically(&dir.current_file(), format!("{name}\n").as_bytes())
}

/// Writes `path` whole or not at all: a temporary file beside it, then a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let temporary = path.with_extension("tmp");
    let _ = std::fs::remove_file(&temporary);
    // A profile may hold a token: readable by its owner only, from its first byte on.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("creating {}", temporary.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))
}
