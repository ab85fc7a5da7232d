//! A plain-HTTP GET for the tests' looks at `/metrics` (the broker's, and `dev`'s
//! controlplane's, which serve plain HTTP on loopback).

#![allow(dead_code)] // Each test binary uses its own share of these.

use std::io::{Read, Write};

/// The body of `GET path` from `address` (`host:port`, or a URL starting `http://`).
pub fn get(address: &str, path: &str) -> String {
    let address = address.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(address).expect("the server answers");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("a request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    match answer.split_once("\r\n\r\n") {
        Some((_, body)) => body.to_owned(),
        None => answer,
    }
}

/// The value of the series `name` (labels included, as exposed) in a metrics text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
}
