//! What `floe` prints: aligned tables for people, JSON for scripts, both to stdout; a
//! closed stdout (`floe consume … | head`) ends the command quietly.

use std::io::{self, Write};

use base64::Engine;
use comfy_table::{CellAlignment, ContentArrangement, ContentLineStyle, Table, TableStyle};
use unicode_width::UnicodeWidthStr;

/// No borders and no rules: cells, and between columns the junction blank after each cell's
/// one blank of right padding, two blanks in all.
const PLAIN: TableStyle = TableStyle::new()
    .header_lines(ContentLineStyle::none().junction(' '))
    .content_lines(ContentLineStyle::none().junction(' '));

/// Renders rows under a header, each column as wide as its widest cell on a terminal (wide
/// characters such as CJK and emoji count two columns), two blanks apart, lines never
/// wrapped. A column whose cells are all digits is right-aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    table
        .load_style(PLAIN)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.to_vec())
        .add_rows(rows.iter().cloned());
    for (index, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, 1));
        if is_numeric(rows, index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = table.trim_fmt();
    out.push('\n');
    out
}

/// `text` followed by blanks up to `width` terminal columns (wide characters count two);
/// text that is wider is left as it is. For lines printed one at a time, like a table's.
pub fn pad_to_width(text: &str, width: usize) -> String {
    let blanks = width.saturating_sub(text.width());
    format!("{text}{:blanks$}", "")
}

/// Whether every row has a cell of only ASCII digits in `column` (and there is a row).
fn is_numeric(rows: &[Vec<String>], column: usize) -> bool {
    !rows.is_empty()
        && rows.iter().all(|row| {
            row.get(column)
                .is_some_and(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
        })
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

/// Base64 (RFC 4648's standard alphabet, padded), for bytes that are not UTF-8 in JSON output.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
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
    fn wide_characters_are_aligned_by_their_width_on_a_terminal() {
        let rows = vec![
            vec![
                "東京".to_string(),
                "7".to_string(),
                "日本語のキー".to_string(),
            ],
            vec![
                "🚀-launch".to_string(),
                "12".to_string(),
                "plain".to_string(),
            ],
            vec!["orders".to_string(), "300".to_string(), "é".to_string()],
        ];
        let rendered = table(&["NAME", "PARTITIONS", "NOTE"], &rows);
        // 東京 is 4 columns wide, 🚀 2, é 1: every line's cells start in the same columns.
        assert_eq!(
            rendered,
            "NAME       PARTITIONS  NOTE\n\
             東京                7  日本語のキー\n\
             🚀-launch          12  plain\n\
             orders            300  é\n"
        );
    }

    #[test]
    fn padding_counts_terminal_columns() {
        assert_eq!(pad_to_width("東京", 6), "東京  ");
        assert_eq!(pad_to_width("key", 6), "key   ");
        assert_eq!(pad_to_width("日本語のキー", 6), "日本語のキー");
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
