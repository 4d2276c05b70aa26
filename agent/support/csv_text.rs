//! CSV as jpower reads and writes it (profiles and truth files, `train --csv`, the
//! roofline's tables), through the `csv` crate: fields quoted where they need it on the way
//! out; on the way in, `#` comments and blank lines skipped, fields trimmed, rows of any
//! length (the reader checks its own columns), and a malformed record reported with its
//! file and line.

use super::file_error::FileError;
use std::path::Path;

/// `header` and `rows` as CSV text. Every row has the header's length (a caller that
/// breaks this has a bug: it panics).
pub fn write<R, F>(header: &[&str], rows: R) -> String
where
    R: IntoIterator<Item = F>,
    F: IntoIterator,
    F::Item: AsRef<[u8]>,
{
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header)
        .and_then(|()| rows.into_iter().try_for_each(|r| w.write_record(r)))
        .expect("a CSV row of the header's length, written to memory");
    let bytes = w.into_inner().expect("flushing CSV into memory");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

/// A CSV writer that streams to `out` (`watch --csv`).
pub fn writer<W: std::io::Write>(out: W) -> csv::Writer<W> {
    csv::Writer::from_writer(out)
}

/// The records of CSV `text` read from `path`, each with its 1-based line (where it
/// starts: a quoted field may span lines), the header first.
pub fn records(text: &str, path: &Path) -> Result<Vec<(usize, csv::StringRecord)>, FileError> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(text.as_bytes());
    r.records()
        .map(|rec| {
            let rec = rec.map_err(|e| FileError::Invalid {
                path: path.to_path_buf(),
                line: e.position().map_or(1, |p| p.line() as usize),
                message: format!("malformed CSV: {e}"),
            })?;
            let line = rec.position().map_or(1, |p| start_line(text, p));
            Ok((line, rec))
        })
        .collect()
}

/// The line a record starts on: the `csv` crate gives the position before the blank and
/// comment lines it skipped to reach the record.
fn start_line(text: &str, p: &csv::Position) -> usize {
    let skipped = text
        .get(p.byte() as usize..)
        .unwrap_or("")
        .split_inclusive('\n')
        .take_while(|l| matches!(*l, "\n" | "\r\n") || l.starts_with('#'))
        .count();
    p.line() as usize + skipped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_that_need_quotes_get_them_and_read_back_whole() {
        let text = write(&["mode", "w"], [["MAXN, boosted", "1.5"], ["15W", "2"]]);
        assert_eq!(text, "mode,w\n\"MAXN, boosted\",1.5\n15W,2\n");
        let recs = records(&text, Path::new("t.csv")).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!((recs[1].0, &recs[1].1[0]), (2, "MAXN, boosted"));
        assert_eq!(recs[2].0, 3);
    }

    #[test]
    fn comments_blank_lines_and_quoted_newlines_keep_the_line_numbers_right() {
        let text = "# made by hand\na, b\n\n# more\n1 ,2,3\n\"two\nlines\",x\n4,5\n";
        let recs = records(text, Path::new("t.csv")).unwrap();
        let lines: Vec<usize> = recs.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [2, 5, 6, 8]);
        assert_eq!(&recs[0].1[1], "b");
        assert_eq!(recs[1].1.len(), 3);
        assert_eq!(&recs[2].1[0], "two\nlines");
    }
}
