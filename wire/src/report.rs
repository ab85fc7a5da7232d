//! Errors in logs: an error with the chain of its sources, `top: cause: root cause`, the
//! way `anyhow`'s `{:#}` prints one, for the typed errors of this library.

use std::fmt;

/// Displays an error followed by each of its sources.
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("opening the log")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_source_is_shown_after_the_error() {
        let error = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(
            ErrorChain(&error).to_string(),
            "opening the log: disk on fire"
        );
    }
}
