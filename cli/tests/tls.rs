//! The REST API over TLS as an operator runs it: `floe-controlplane --tls-cert`, a broker
//! that registers over https trusting the cluster CA (`--controlplane-ca`), and `floe`
//! calling it with the cluster CA — then what each mistake looks like from the CLI (no
//! certificate at start, the wrong CA, http:// to a TLS port, a certificate that does not
//! name the host) and a certificate rotated without a restart.
//!
//! The server binaries are found next to `floe` in the target directory (`cargo build
//! --workspace --bins`, see the README).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

fn program(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_floe")).with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (see the README)",
        path.display()
    );
    path
}

/// A child process killed and reaped on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The files of a test cluster: `floe-broker certs` output (a CA with its key and a
/// certificate for localhost and 127.0.0.1), the REST API's own copy of that certificate
/// (which the test rotates) and the tokens.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let made = Command::new(program("floe-broker"))
            .args(["certs", "--dir"])
            .arg(dir.path().join("tls"))
            .output()
            .expect("floe-broker certs runs");
        assert!(made.status.success(), "{}", text(&made.stderr));
        let files = Files { dir };
        std::fs::copy(files.tls("broker.pem"), files.path("rest.pem")).expect("copy");
        std::fs::copy(files.tls("broker.key"), files.path("rest.key")).expect("copy");
        std::fs::write(files.path("admin"), "admin-token-0123456789\n").expect("token");
        std::fs::write(files.path("broker"), "broker-token-0123456789\n").expect("token");
        files
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn tls(&self, name: &str) -> PathBuf {
        self.dir.path().join("tls").join(name)
    }

    /// Replaces the REST API's certificate with one for `names`, signed by the cluster CA,
    /// the way a rotation does: each file written aside and renamed into place.
    fn rotate_rest_certificate(&self, names: &[&str]) {
        let (cert, key) = self.sign(names, None);
        for (name, pem) in [("rest.key", key), ("rest.pem", cert)] {
            let aside = self.path(&format!("{name}.new"));
            std::fs::write(&aside, pem).expect("write");
            std::fs::rename(&aside, self.path(name)).expect("rename");
        }
    }

    /// A client certificate whose subject's common name is `principal`, signed by the
    /// cluster CA: its PEM files' paths.
    fn client_certificate(&self, principal: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = self.sign(&[], Some(principal));
        let paths = (
            self.path(&format!("{principal}.pem")),
            self.path(&format!("{principal}.key")),
        );
        std::fs::write(&paths.0, cert).expect("write");
        std::fs::write(&paths.1, key).expect("write");
        paths
    }

    /// A certificate and key (PEM) for `names` and the common name `common_name`, signed by
    /// the cluster CA.
    fn sign(&self, names: &[&str], common_name: Option<&str>) -> (String, String) {
        let ca_pem = std::fs::read_to_string(self.tls("ca.pem")).expect("CA");
        let ca_key =
            rcgen::KeyPair::from_pem(&std::fs::read_to_string(self.tls("ca.key")).expect("key"))
                .expect("the CA's key");
        let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).expect("the CA");
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("names");
        if let Some(common_name) = common_name {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, common_name);
        }
        let cert = params.signed_by(&key, &issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Starts `floe-controlplane` with `args` and returns it with the URL it printed.
fn controlplane(files: &Files, args: &[&str]) -> (Process, String) {
    let mut child = Command::new(program("floe-controlplane"))
        .arg("--data-dir")
        .arg(files.path("controlplane"))
        .args(["--listen", "127.0.0.1:0", "--lease", "3s"])
        .arg("--admin-token-file")
        .arg(files.path("admin"))
        .arg("--broker-token-file")
        .arg(files.path("broker"))
        .args(args)
        .env("FLOE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("floe-controlplane starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read");
    let url = line
        .trim()
        .strip_prefix("floe-controlplane listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (Process(child), url)
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
        .port()
}

/// `floe` as the administrator, with connection flags only (no profile: its home is a
/// fresh directory).
fn floe(files: &Files, connection: &[&str], args: &[&str]) -> Output {
    let mut with_token = vec!["--token", "admin-token-0123456789"];
    with_token.extend_from_slice(connection);
    floe_with(files, &with_token, args, None)
}

/// `floe` with `connection` flags only (no token unless they give one), `stdin` as input.
fn floe_with(files: &Files, connection: &[&str], args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(program("floe"))
        .args(connection)
        .args(args)
        .env("HOME", files.path("home"))
        .env("XDG_CONFIG_HOME", files.path("home"))
        .env_remove("FLOE_TOKEN")
        .env_remove("FLOE_PROFILE")
        .env_remove("FLOE_CLIENT_CERT")
        .env_remove("FLOE_CLIENT_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("floe runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        use std::io::Write;
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("floe ends")
}

/// Runs `attempt` until it returns `Some`, or fails naming `what` at the deadline.
fn eventually<T>(what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) if Instant::now() > deadline => panic!("{what}: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn the_rest_api_is_served_over_tls_and_trust_failures_say_what_to_do() {
    let files = Files::new();

    // Without a certificate the controlplane refuses to start, and says how to go on.
    let refused = Command::new(program("floe-controlplane"))
        .arg("--data-dir")
        .arg(files.path("refused"))
        .args(["--listen", "127.0.0.1:0"])
        .env("FLOE_ADMIN_TOKEN", "t")
        .env_remove("FLOE_TLS_CERT")
        .env_remove("FLOE_INSECURE_PLAIN_HTTP")
        .output()
        .expect("floe-controlplane runs");
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(
        said.contains("--tls-cert") && said.contains("--insecure-plain-http"),
        "{said}"
    );

    let rest_cert = files.path("rest.pem");
    let rest_key = files.path("rest.key");
    let (_controlplane, url) = controlplane(
        &files,
        &[
            "--tls-cert",
            rest_cert.to_str().expect("UTF-8"),
            "--tls-key",
            rest_key.to_str().expect("UTF-8"),
        ],
    );
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    // A cluster with no broker yet refuses a stream, and says what to do.
    let early = floe(
        &files,
        &[
            "--controlplane",
            &url,
            "--ca-cert",
            files.tls("ca.pem").to_str().expect("UTF-8"),
        ],
        &["stream", "create", "early"],
    );
    assert!(!early.status.success());
    let said = text(&early.stderr);
    assert!(
        said.contains("no broker is live") && said.contains("start brokers"),
        "{said}"
    );

    // A broker registers over https, trusting the cluster CA.
    let port = free_udp_port();
    let endpoint = format!("127.0.0.1:{port}");
    let _broker = Process(
        Command::new(program("floe-broker"))
            .arg("serve")
            .arg("--data-dir")
            .arg(files.path("broker-data"))
            .args(["--listen", &endpoint])
            .arg("--cert")
            .arg(files.tls("broker.pem"))
            .arg("--key")
            .arg(files.tls("broker.key"))
            .args(["--controlplane", &url])
            .arg("--controlplane-ca")
            .arg(files.tls("ca.pem"))
            .arg("--token-file")
            .arg(files.path("broker"))
            .arg("--client-ca")
            .arg(files.tls("ca.pem"))
            .arg("--object-store")
            .arg(format!("file://{}", files.path("objects").display()))
            .env("FLOE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("floe-broker starts"),
    );
    let ca = files.tls("ca.pem");
    let ca = ca.to_str().expect("UTF-8");
    let trusted = [
        "--controlplane",
        &url,
        "--endpoint",
        &endpoint,
        "--ca-cert",
        ca,
    ];
    eventually("the broker registers over https", || {
        let listed = floe(&files, &trusted, &["--json", "broker", "list"]);
        let out = text(&listed.stdout);
        (listed.status.success() && out.contains("live"))
            .then_some(())
            .ok_or_else(|| format!("{out}{}", text(&listed.stderr)))
    });

    // The whole path works: a stream created through the API, published to and read back.
    let created = floe(
        &files,
        &trusted,
        &["stream", "create", "tls", "--replication-factor", "1"],
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    eventually("a publish to the new stream", || {
        let mut connection = vec!["--token", "admin-token-0123456789"];
        connection.extend_from_slice(&trusted);
        let output = floe_with(&files, &connection, &["publish", "tls"], Some("over tls\n"));
        output
            .status
            .success()
            .then_some(())
            .ok_or_else(|| text(&output.stderr))
    });
    let consumed = floe(
        &files,
        &trusted,
        &[
            "consume", "tls", "--from", "earliest", "--count", "1", "--json",
        ],
    );
    assert!(
        text(&consumed.stdout).contains("over tls"),
        "{}",
        text(&consumed.stderr)
    );

    // Another cluster's CA: refused, and the error says which flag fixes it.
    let other = files.path("other-tls");
    let made = Command::new(program("floe-broker"))
        .args(["certs", "--dir"])
        .arg(&other)
        .output()
        .expect("floe-broker certs runs");
    assert!(made.status.success());
    let other_ca = other.join("ca.pem");
    let wrong_ca = floe(
        &files,
        &[
            "--controlplane",
            &url,
            "--endpoint",
            &endpoint,
            "--ca-cert",
            other_ca.to_str().expect("UTF-8"),
        ],
        &["broker", "list"],
    );
    assert!(!wrong_ca.status.success());
    let said = text(&wrong_ca.stderr);
    assert!(said.contains("not signed by a trusted CA"), "{said}");
    assert!(said.contains("--ca"), "{said}");

    // Plain HTTP to the TLS port: told to use https.
    let plain_url = url.replacen("https://", "http://", 1);
    let plain = floe(
        &files,
        &[
            "--controlplane",
            &plain_url,
            "--endpoint",
            &endpoint,
            "--ca-cert",
            ca,
        ],
        &["broker", "list"],
    );
    assert!(!plain.status.success());
    let said = text(&plain.stderr);
    assert!(said.contains("https://"), "{said}");

    // Mutual TLS on the client port: a certificate naming `shipper`, a principal that may
    // publish to `tls` and nothing else, signs in without any token.
    let made = floe(
        &files,
        &trusted,
        &["token", "create", "shipper", "--allow", "publish:tls"],
    );
    assert!(made.status.success(), "{}", text(&made.stderr));
    // The connection flags of a client signing in by the certificate naming `principal`.
    let as_certificate = |principal: &str| -> Vec<String> {
        let (cert, key) = files.client_certificate(principal);
        [
            "--endpoint",
            &endpoint,
            "--ca-cert",
            ca,
            "--client-cert",
            &cert.display().to_string(),
            "--client-key",
            &key.display().to_string(),
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let as_shipper = as_certificate("shipper");
    let as_shipper: Vec<&str> = as_shipper.iter().map(String::as_str).collect();
    let published = floe_with(&files, &as_shipper, &["publish", "tls"], Some("by cert\n"));
    assert!(published.status.success(), "{}", text(&published.stderr));
    let refused = floe_with(
        &files,
        &as_shipper,
        &["consume", "tls", "--from", "earliest", "--count", "1"],
        None,
    );
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(said.contains("consume:tls"), "{said}");
    // A certificate naming nobody this cluster knows is refused, and says whom it named.
    let as_nobody = as_certificate("nobody");
    let as_nobody: Vec<&str> = as_nobody.iter().map(String::as_str).collect();
    let refused = floe_with(&files, &as_nobody, &["publish", "tls"], Some("refused\n"));
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(said.contains("`nobody`"), "{said}");
    // What the certificate published is there, and only that.
    let consumed = floe(
        &files,
        &trusted,
        &[
            "consume", "tls", "--from", "earliest", "--count", "2", "--json",
        ],
    );
    let out = text(&consumed.stdout);
    assert!(
        out.contains("over tls") && out.contains("by cert") && !out.contains("refused"),
        "{out}{}",
        text(&consumed.stderr)
    );

    // A rotation to a certificate that does not name 127.0.0.1 is picked up without a
    // restart, and the CLI says the name is wrong; rotating back restores service.
    files.rotate_rest_certificate(&["elsewhere.invalid"]);
    let said = eventually("the rotated certificate is served", || {
        let listed = floe(&files, &trusted, &["broker", "list"]);
        let said = text(&listed.stderr);
        (!listed.status.success() && said.contains("does not name this host"))
            .then_some(said.clone())
            .ok_or(said)
    });
    assert!(said.contains("127.0.0.1"), "{said}");
    files.rotate_rest_certificate(&["localhost", "127.0.0.1"]);
    eventually("the certificate rotated back is served", || {
        let listed = floe(&files, &trusted, &["broker", "list"]);
        listed
            .status
            .success()
            .then_some(())
            .ok_or_else(|| text(&listed.stderr))
    });
}
