//! Fuzz target: arbitrary text as a grant (`floe token create --allow`, the REST API's
//! `grants`, the store's column), a principal name, and arbitrary bytes as a token presented
//! in `Hello` or a bearer header. Any input may be refused, none may panic; an accepted
//! grant prints back to itself; no token but the real ones authenticates.

#![no_main]

use floe_wire::auth::{
    Credential, CredentialTable, Credentials, Grant, Principal, PrincipalCredentials,
    PrincipalKind, check_principal_name, mint_token,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(grant) = text.parse::<Grant>() {
            assert_eq!(grant.to_string(), text);
        }
        let _ = check_principal_name(text);
    }
    let minted = mint_token([7; 40]);
    let credentials = Credentials::new(CredentialTable {
        version: 1,
        principals: vec![PrincipalCredentials {
            principal: Principal {
                name: "p".into(),
                kind: PrincipalKind::User,
                grants: vec![Grant::ClusterAdmin],
                broker_id: None,
            },
            keys: vec![minted.key.clone(), Credential::bootstrap("bootstrap-admin", "admin-secret")],
        }],
    });
    let accepted = credentials.authenticate(Some(data)).is_ok();
    let genuine = data == minted.token.as_bytes() || data == b"admin-secret";
    assert_eq!(accepted, genuine);
});
