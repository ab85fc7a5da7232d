//! What `floe` prints under an error when the error says what to do next: a stream that
//! does not exist, a partition without a leader. Reads the error's typed causes only; no I/O.

use floe_client::rest::RestError;
use floe_wire::admin::ApiErrorCode;
use floe_wire::frame::ErrorCode;

/// The missing stream's way out, from the controlplane and from a broker alike.
const MISSING_STREAM: &str = "the stream does not exist: `floe stream list` shows the streams \
                              there are, and `floe stream create NAME` makes one";

/// A partition that no broker leads right now.
const NO_LEADER: &str = "no broker leads that partition right now: `floe stream describe NAME` \
                         says why (a dead or draining broker, an election under way); retry \
                         once it has a leader, or `floe broker undrain ID` if its brokers drain";

/// The next step for `error`, when one of its causes says what went wrong.
pub fn next_step(error: &anyhow::Error) -> Option<&'static str> {
    error.chain().find_map(|cause| {
        if let Some(client) = cause.downcast_ref::<floe_client::Error>() {
            return match client.code() {
                Some(ErrorCode::UnknownStream) => Some(MISSING_STREAM),
                Some(ErrorCode::NotLeader | ErrorCode::LeaderNotAvailable) => Some(NO_LEADER),
                _ => None,
            };
        }
        let rest = cause.downcast_ref::<RestError>()?;
        (rest.code() == Some(ApiErrorCode::StreamNotFound)).then_some(MISSING_STREAM)
    })
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::*;

    fn refused(code: ErrorCode, message: &str) -> floe_client::Error {
        floe_client::Error::Broker {
            code,
            retry_class: code.retry_class(),
            message: message.to_owned(),
            details: None,
        }
    }

    #[test]
    fn a_missing_stream_says_how_to_find_or_make_one() {
        let from_broker = Err::<(), _>(refused(ErrorCode::UnknownStream, "no stream absent"))
            .context("publishing to stream absent")
            .expect_err("an error");
        assert_eq!(next_step(&from_broker), Some(MISSING_STREAM));
        let from_controlplane = Err::<(), _>(RestError::Api {
            status: 404,
            code: ApiErrorCode::StreamNotFound,
            message: "no stream `absent`".to_owned(),
        })
        .context("describing stream absent")
        .expect_err("an error");
        assert_eq!(next_step(&from_controlplane), Some(MISSING_STREAM));
        let leaderless = anyhow::Error::new(refused(
            ErrorCode::NotLeader,
            "no broker names a leader of stream s1 partition 0",
        ));
        assert_eq!(next_step(&leaderless), Some(NO_LEADER));
        assert_eq!(next_step(&anyhow::anyhow!("something else")), None);
    }
}
