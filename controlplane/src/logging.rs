//! How Floe's server processes (`floe-controlplane`, and `floe-broker` in all its roles)
//! write their logs: to stderr, as text for people or as JSON lines for a log shipper, with
//! levels from `FLOE_LOG`, else `RUST_LOG`, else `info`.

use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`, env `FLOE_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, without colour codes; current span fields ride along.
    Json,
}

/// Installs the process's log subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let floe_log = std::env::var("FLOE_LOG").ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(floe_log.as_deref(), rust_log.as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// The log filter: FLOE_LOG wins over RUST_LOG; `info` when neither is set or valid.
fn filter(floe_log: Option<&str>, rust_log: Option<&str>) -> EnvFilter {
    [floe_log, rust_log]
        .into_iter()
        .flatten()
        .find_map(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new("info"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floe_log_wins_over_rust_log_and_info_is_the_default() {
        assert_eq!(filter(Some("debug"), Some("warn")).to_string(), "debug");
        assert_eq!(filter(None, Some("warn")).to_string(), "warn");
        assert_eq!(filter(None, None).to_string(), "info");
        // An unreadable FLOE_LOG falls back to RUST_LOG rather than to nothing.
        assert_eq!(filter(Some("=!bad[["), Some("trace")).to_string(), "trace");
    }
}
