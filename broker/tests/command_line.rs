//! The command line of the built binary: `--config FILE` (a file's mistake stops the process
//! before it starts, naming the file, the line and the key), `--version`, and `certs`.

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

#[test]
fn certs_writes_a_ca_with_its_key_and_peer_certificates_naming_brokers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = dir.path().join("tls");
    let certs = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_floe-broker"))
            .arg("certs")
            .arg("--dir")
            .arg(&tls)
            .args(args)
            .output()
            .expect("run floe-broker certs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    certs(&[]);
    let ca = std::fs::read(tls.join("ca.pem")).expect("ca.pem");
    let mode = |name: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(tls.join(name))
            .expect("the file")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("ca.key"), 0o600);
    assert!(!tls.join("broker-3.pem").exists());

    // A second run keeps the CA and signs with it.
    certs(&["--broker-id", "3", "--broker-id", "12"]);
    assert_eq!(std::fs::read(tls.join("ca.pem")).expect("ca.pem"), ca);
    assert_eq!(mode("broker-3.key"), 0o600);
    for (file, id) in [("broker-3.pem", 3), ("broker-12.pem", 12)] {
        let paths = floe_broker::tls::CertificatePaths {
            cert: tls.join(file),
            key: tls.join(file.replace(".pem", ".key")),
        };
        let (chain, _) = floe_broker::tls::load(&paths).expect("a certificate and key");
        assert_eq!(
            floe_broker::peer_identity::broker_in_certificate(&chain[0]),
            Ok(floe_wire::BrokerId::new(id))
        );
    }
    // The client-port certificate names no broker: it is no peer identity.
    let client_port = floe_broker::tls::CertificatePaths {
        cert: tls.join("broker.pem"),
        key: tls.join("broker.key"),
    };
    assert!(floe_broker::tls::peer_credentials(&client_port).is_err());
}
