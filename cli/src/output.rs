//! What `floe` prints: aligned tables for people, JSON for scripts, both to stdout; a
//! closed stdout (`floe consume … | head`) ends the command quietly.

use std::io::{self, Write};

/// Renders rows under a header, each column as wide as its widest cell, two spaces apart.
/// Numeric-looking cells are right-aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..header.len())
        .map(|column| {
            !rows.is_empty()
                && rows.iter().all(|row| {
                    row.get(column)
                        .is_some_and(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
                })
        })
        .collect();
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((cell, width), numeric)| {
                if *numeric {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Writes text to stdout. A reader that went away is not an error for a command-line tool.
pub fn print(text: &str) -> io::Result<()> {
    write_stdout(text).map(|_| ())
}

/// Writes text to stdout; `Ok(false)` when the reader has gone away (a closed pipe).
pub fn write_stdout(text: &str) -> io::Result<bool> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes one JSON value and a newline to stdout.
pub fn print_json(value: &serde_json::Value) -> io::Result<()> {
    print(&format!("{value}\n"))
}

/// Base64 (standard alphabet, padded), for bytes that are not UTF-8 in JSON output.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_right_align_numbers() {
        let rows = vec![
            vec!["orders".to_string(), "3".to_string(), "leader".to_string()],
            vec![
                "clicks-eu".to_string(),
                "120".to_string(),
                "none".to_string(),
            ],
        ];
        let rendered = table(&["NAME", "PARTITIONS", "ACK MODE"], &rows);
        assert_eq!(
            rendered,
            "NAME       PARTITIONS  ACK MODE\n\
             orders              3  leader\n\
             clicks-eu         120  none\n"
        );
    }

    #[test]
    fn an_empty_table_is_its_header() {
        assert_eq!(table(&["NAME", "PARTITIONS"], &[]), "NAME  PARTITIONS\n");
    }

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in vectors {
            assert_eq!(base64(input.as_bytes()), expected);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }
}
