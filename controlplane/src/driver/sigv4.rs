//! AWS Signature Version 4 for the autoscaling-group driver: pure functions of the request,
//! the credentials and the time (passed in). No I/O here.

use std::fmt::Write;

use ring::{digest, hmac};

/// Credentials of the caller (from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
/// `AWS_SESSION_TOKEN`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// From environment-like lookups; `None` without a key id and secret.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<Credentials> {
        let nonempty = |name: &str| lookup(name).filter(|value| !value.is_empty());
        Some(Credentials {
            access_key_id: nonempty("AWS_ACCESS_KEY_ID")?,
            secret_access_key: nonempty("AWS_SECRET_ACCESS_KEY")?,
            session_token: nonempty("AWS_SESSION_TOKEN"),
        })
    }
}

/// What to sign: the request's parts as sent.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Already URI-encoded.
    pub path: &'a str,
    /// Already canonical: `name=value` pairs sorted and encoded, joined with `&`.
    pub query: &'a str,
    /// Every header to sign (host and `x-amz-date` included), any case, any order.
    pub headers: &'a [(String, String)],
    pub payload: &'a [u8],
}

/// Where and when: region, service and `YYYYMMDDTHHMMSSZ`.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub region: &'a str,
    pub service: &'a str,
    pub amz_date: &'a str,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

/// The canonical request and the signed header names (`a;b;c`).
fn canonical_request(request: &Request<'_>) -> (String, String) {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    headers.sort();
    let signed: Vec<&str> = headers.iter().map(|(name, _)| name.as_str()).collect();
    let signed = signed.join(";");
    let mut canonical = format!("{}\n{}\n{}\n", request.method, request.path, request.query);
    for (name, value) in &headers {
        let _ = writeln!(canonical, "{name}:{value}");
    }
    let _ = write!(canonical, "\n{signed}\n{}", sha256_hex(request.payload));
    (canonical, signed)
}

/// The signing key of a day, region and service.
fn signing_key(secret: &str, scope: &Scope<'_>) -> Vec<u8> {
    let date = scope.amz_date.get(..8).unwrap_or(scope.amz_date);
    let key = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let key = hmac_sha256(&key, scope.region.as_bytes());
    let key = hmac_sha256(&key, scope.service.as_bytes());
    hmac_sha256(&key, b"aws4_request")
}

/// The `Authorization` header's value.
pub fn authorization(
    request: &Request<'_>,
    credentials: &Credentials,
    scope: &Scope<'_>,
) -> String {
    let (canonical, signed) = canonical_request(request);
    let date = scope.amz_date.get(..8).unwrap_or(scope.amz_date);
    let credential_scope = format!("{date}/{}/{}/aws4_request", scope.region, scope.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{credential_scope}\n{}",
        scope.amz_date,
        sha256_hex(canonical.as_bytes())
    );
    let key = signing_key(&credentials.secret_access_key, scope);
    let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{credential_scope}, SignedHeaders={signed}, \
         Signature={signature}",
        credentials.access_key_id
    )
}

/// `YYYYMMDDTHHMMSSZ` of a time in seconds since the Unix epoch (UTC).
pub fn amz_date(unix_seconds: u64) -> String {
    let days = i64::try_from(unix_seconds / 86_400).unwrap_or(0);
    let seconds = unix_seconds % 86_400;
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        seconds / 3_600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// Percent-encodes everything but RFC 3986's unreserved characters, as SigV4 and the
/// Query API's form bodies want.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_credentials() -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".to_owned(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned(),
            session_token: None,
        }
    }

    /// The worked example of AWS's Signature Version 4 documentation (IAM `ListUsers`).
    #[test]
    fn the_documented_example_signs_to_the_documented_signature() {
        let headers = vec![
            (
                "Content-Type".to_owned(),
                "application/x-www-form-urlencoded; charset=utf-8".to_owned(),
            ),
            ("Host".to_owned(), "iam.amazonaws.com".to_owned()),
            ("X-Amz-Date".to_owned(), "20150830T123600Z".to_owned()),
        ];
        let request = Request {
            method: "GET",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &headers,
            payload: b"",
        };
        let scope = Scope {
            region: "us-east-1",
            service: "iam",
            amz_date: "20150830T123600Z",
        };
        let (canonical, _) = canonical_request(&request);
        assert_eq!(
            sha256_hex(canonical.as_bytes()),
            "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
        );
        assert_eq!(
            hex(&signing_key(
                &example_credentials().secret_access_key,
                &scope
            )),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
        assert_eq!(
            authorization(&request, &example_credentials(), &scope),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(amz_date(4_102_444_799), "20991231T235959Z");
    }

    #[test]
    fn credentials_need_a_key_and_a_secret() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        assert_eq!(
            Credentials::from_lookup(env(&[("AWS_ACCESS_KEY_ID", "a")])),
            None
        );
        let full = Credentials::from_lookup(env(&[
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "SECRETVALUE"),
            ("AWS_SESSION_TOKEN", "t"),
        ]))
        .expect("complete");
        assert_eq!(full.session_token.as_deref(), Some("t"));
        assert!(
            !format!("{full:?}").contains("SECRETVALUE"),
            "no secret in Debug"
        );
        assert_eq!(encode("a b/c~"), "a%20b%2Fc~");
    }
}
