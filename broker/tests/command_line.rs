//! The command line of the built binary: `--config FILE` (a file's mistake stops the process
//! before it starts, naming the file, the line and the key) and `--version`.

use std::process::Command;

fn run(args: &[&str], config: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broker.toml");
    std::fs::write(&path, config).expect("write the file");
    let output = Command::new(env!("CARGO_BIN_EXE_floe-broker"))
        .args(args)
        .arg("--config")
        .arg(&path)
        .env_remove("FLOE_CONFIG")
        .output()
        .expect("run floe-broker");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (
        output.status.code(),
        stderr.replace(&path.display().to_string(), "FILE"),
    )
}

#[test]
fn an_unknown_key_or_a_bad_value_stops_the_broker_at_its_line() {
    let (code, stderr) = run(
        &["serve"],
        "data-dir = \"/tmp/x\"\ncert = \"c.pem\"\nkey = \"k.pem\"\ntier-cache-dsk = \"1GiB\"\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("error: FILE:4: `tier-cache-dsk` is not a setting of `floe-broker serve`"),
        "{stderr}"
    );

    let (code, stderr) = run(&["read-replica"], "listen = \"nowhere\"\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("error: FILE:1: `listen`: invalid value 'nowhere'"),
        "{stderr}"
    );
}

#[test]
fn version_names_the_build_commit() {
    let output = Command::new(env!("CARGO_BIN_EXE_floe-broker"))
        .arg("--version")
        .output()
        .expect("run floe-broker");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let expected = format!("floe-broker {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.starts_with(&expected), "{stdout}");
}
