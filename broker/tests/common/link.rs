//! A TCP relay between one broker and the controlplane that a test can cut: the broker's
//! calls to the controlplane (registration, heartbeats, assignments) go through it, its
//! clients and peers do not. Cut, it forwards nothing in either direction and answers nothing,
//! as dropped packets look to the broker: calls hang until they time out. Healed, it closes
//! the connections it held (as a reset would) and forwards new ones again.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// One relay, stopped on drop.
pub struct Link {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    /// A relay on a free loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a relay");
        let addr = listener.local_addr().expect("the relay's address");
        let (cut, _) = watch::channel(false);
        let watching = cut.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(relay(inbound, upstream, watching.subscribe()));
            }
        });
        Link { addr, cut, task }
    }

    /// The URL the broker calls the controlplane at.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops forwarding: calls in flight and new ones hang.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Forwards again; the connections held while cut are closed.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut inbound: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    let held = *cut.borrow_and_update();
    if held {
        // Accepted, and never answered until the cut heals; then closed.
        let _ = cut.wait_for(|cut| !*cut).await;
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut healed = cut.clone();
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = async { cut.wait_for(|cut| *cut).await.is_ok() } => {
            // Held without forwarding a byte until the cut heals; then both sides close.
            let _ = healed.wait_for(|cut| !*cut).await;
        }
    }
}
