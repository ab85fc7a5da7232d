//! A private S3-compatible server (moto) for tests that pause or stop object storage
//! without disturbing the server the other tests share; killed on drop.

use std::time::{Duration, Instant};

/// A `moto_server` process of this test's own, with one bucket.
pub struct Moto {
    child: std::process::Child,
    /// `host:port`, plain HTTP.
    pub endpoint: String,
}

impl Moto {
    /// Starts `FLOE_TEST_MOTO_SERVER` (scripts/test.sh sets it) with a bucket, or `None`
    /// when the variable is unset.
    pub async fn start(bucket: &str) -> Option<Moto> {
        let binary = std::env::var_os("FLOE_TEST_MOTO_SERVER")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = std::process::Command::new(binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn moto_server");
        let moto = Moto {
            child,
            endpoint: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if tokio::net::TcpStream::connect(&moto.endpoint).await.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "moto did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let response = super::http_request(&moto.endpoint, "PUT", &format!("/{bucket}")).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        Some(moto)
    }

    /// Sends `signal` (as `kill` spells it: `-STOP`, `-CONT`) to the server.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
