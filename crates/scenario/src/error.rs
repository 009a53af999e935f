//! Errors that name the file, the line and the field at fault.

use std::fmt;
use std::path::{Path, PathBuf};

/// A problem with a scenario file or a trace file.
///
/// Every error names the file; where the position is known it also names the
/// 1-based line and the field (a dotted key path such as `link[1].up.rate`,
/// or a column name for trace files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The file at fault.
    pub file: PathBuf,
    /// 1-based line number, if known.
    pub line: Option<usize>,
    /// The field (key path or column) at fault, if known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl Error {
    /// Builds an error for `file` with no position yet.
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line: None,
            field: None,
            message: message.into(),
        }
    }

    /// Sets the 1-based line.
    pub fn at_line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    /// Sets the field name.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Error {}

/// Converts a byte offset in `src` to a 1-based line number.
pub(crate) fn line_of_offset(src: &str, offset: usize) -> usize {
    let end = offset.min(src.len());
    src.as_bytes()
        .get(..end)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() + 1)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_line_field() {
        let e = Error::new(Path::new("a.toml"), "bad rate")
            .at_line(7)
            .field("link[0].rate");
        assert_eq!(e.to_string(), "a.toml:7: field `link[0].rate`: bad rate");
        let e = Error::new(Path::new("t.csv"), "empty");
        assert_eq!(e.to_string(), "t.csv: empty");
    }

    #[test]
    fn offsets_to_lines() {
        let s = "a\nb\nc";
        assert_eq!(line_of_offset(s, 0), 1);
        assert_eq!(line_of_offset(s, 2), 2);
        assert_eq!(line_of_offset(s, 4), 3);
        assert_eq!(line_of_offset(s, 100), 3);
    }
}
