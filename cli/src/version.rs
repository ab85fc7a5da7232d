//! `floe version`: this client's build and, when the controlplane answers, its own and each
//! broker's and read replica's, as they registered. A cluster mid-upgrade shows which
//! processes still run the old build.

use anyhow::Result;
use floe_client::rest::Controlplane;
use floe_wire::admin::Build;

use crate::output::{print, print_json, table};
use crate::{ConnectionArgs, controlplane, read_profile};

/// One row of the answer: a process and its build, or why it is not known.
struct Row {
    component: &'static str,
    id: String,
    address: String,
    build: Result<Option<Build>, String>,
}

pub async fn run(connection: &ConnectionArgs, json: bool) -> Result<()> {
    let mut rows = vec![Row {
        component: "client",
        id: "floe".into(),
        address: "-".into(),
        build: Ok(Some(Build::current())),
    }];
    let found = read_profile(connection).and_then(|p| controlplane(connection, p.as_ref()));
    let note = match found {
        Ok(Some(controlplane)) => {
            servers(&controlplane, &mut rows).await;
            None
        }
        Ok(None) => {
            Some("no controlplane in the profile or flags: the servers' builds are not known")
        }
        Err(e) => {
            rows.push(Row {
                component: "controlplane",
                id: "-".into(),
                address: "-".into(),
                build: Err(format!("{e:#}")),
            });
            None
        }
    };
    if json {
        print_json(&serde_json::Value::Array(
            rows.iter().map(row_json).collect(),
        ))?;
        return Ok(());
    }
    let cells: Vec<Vec<String>> = rows.iter().map(row_cells).collect();
    let mut text = table(&["COMPONENT", "ID", "ADDRESS", "VERSION", "COMMIT"], &cells);
    if let Some(note) = note {
        text.push_str(note);
        text.push('\n');
    }
    let builds: Vec<&Build> = rows
        .iter()
        .filter_map(|r| r.build.as_ref().ok().and_then(Option::as_ref))
        .collect();
    if builds.windows(2).any(|pair| pair[0] != pair[1]) {
        text.push_str("note: not every process runs the same build\n");
    }
    print(&text)?;
    Ok(())
}

/// The controlplane's build from its health, then the brokers' and read replicas'.
async fn servers(controlplane: &Controlplane, rows: &mut Vec<Row>) {
    let url = controlplane.url().to_string();
    match controlplane.health().await {
        Ok(health) => rows.push(Row {
            component: "controlplane",
            id: "-".into(),
            address: url,
            build: Ok(health.build),
        }),
        Err(e) => {
            rows.push(Row {
                component: "controlplane",
                id: "-".into(),
                address: url,
                build: Err(format!("unreachable: {e}")),
            });
            return;
        }
    }
    match controlplane.brokers().await {
        Ok(list) => rows.extend(list.brokers.into_iter().map(|b| Row {
            component: "broker",
            id: b.broker_id.to_string(),
            address: b.client_endpoint.to_string(),
            build: Ok(b.build),
        })),
        Err(e) => rows.push(failed("broker", e)),
    }
    match controlplane.read_replicas().await {
        Ok(list) => rows.extend(list.replicas.into_iter().map(|r| Row {
            component: "read replica",
            id: r.replica_id,
            address: r.endpoint.to_string(),
            build: Ok(r.build),
        })),
        Err(e) => rows.push(failed("read replica", e)),
    }
}

fn failed(component: &'static str, error: impl std::fmt::Display) -> Row {
    Row {
        component,
        id: "-".into(),
        address: "-".into(),
        build: Err(format!("cannot list: {error}")),
    }
}

fn row_cells(row: &Row) -> Vec<String> {
    let (version, commit) = match &row.build {
        Ok(Some(build)) => (build.version.clone(), build.commit.clone()),
        // Registered by a build from before processes reported theirs.
        Ok(None) => ("unknown".into(), "-".into()),
        Err(e) => (e.clone(), "-".into()),
    };
    vec![
        row.component.into(),
        row.id.clone(),
        row.address.clone(),
        version,
        commit,
    ]
}

fn row_json(row: &Row) -> serde_json::Value {
    let mut value = serde_json::json!({
        "component": row.component,
        "id": row.id,
        "address": row.address,
    });
    match &row.build {
        Ok(build) => value["build"] = serde_json::to_value(build).unwrap_or_default(),
        Err(e) => value["error"] = serde_json::Value::String(e.clone()),
    }
    value
}
