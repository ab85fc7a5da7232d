//! Cuts a port on this host with nftables: a table of drop rules for one UDP port, removed
//! on drop. Root only; tests that use it skip without `FLOE_TEST_NFT` (scripts/test.sh sets
//! it where nft works).

use std::process::Command;

/// An nftables table dropping UDP to (and perhaps from) one port on this host; removed on
/// drop.
pub struct PortBlock {
    table: String,
}

/// Whether the tests may cut ports (`FLOE_TEST_NFT` is set: root, and nft works).
pub fn enabled() -> bool {
    std::env::var_os("FLOE_TEST_NFT").is_some()
}

fn nft(args: &[&str]) {
    let output = Command::new("nft").args(args).output().expect("run nft");
    assert!(
        output.status.success(),
        "nft {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PortBlock {
    /// Drops UDP to and from `port`.
    pub fn udp(port: u16) -> PortBlock {
        PortBlock::rules(port, &["sport", "dport"])
    }

    /// Drops UDP to `port` only: a broker's peers still hear it, and it hears nothing.
    pub fn udp_to(port: u16) -> PortBlock {
        PortBlock::rules(port, &["dport"])
    }

    fn rules(port: u16, directions: &[&str]) -> PortBlock {
        let table = format!("floe_test_{}_{port}", std::process::id());
        let port = port.to_string();
        nft(&["add", "table", "inet", &table]);
        nft(&[
            "add",
            "chain",
            "inet",
            &table,
            "out",
            "{ type filter hook output priority 0 ; policy accept ; }",
        ]);
        for direction in directions {
            nft(&[
                "add", "rule", "inet", &table, "out", "udp", direction, &port, "drop",
            ]);
        }
        PortBlock { table }
    }
}

impl Drop for PortBlock {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}
