//! The [`read_file`](super::read_file) tool's work: resolving a requested path inside the root
//! and reading a bounded UTF-8 prefix of the file.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ToolError;

/// What the read_file tool returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct FileContents {
    /// The file's path relative to the root, after resolving `.`, `..` and symlinks.
    pub(super) path: String,
    /// The file's size in bytes.
    pub(super) bytes: u64,
    /// Whether `content` stops before the end of the file.
    pub(super) truncated: bool,
    /// The text read (all of it, or a prefix cut at a character boundary).
    pub(super) content: String,
}

impl FileContents {
    /// The result as JSON, moving `content` rather than copying it (`serde_json::to_value`
    /// would copy it).
    pub(super) fn into_json(self) -> Value {
        let mut object = Map::with_capacity(4);
        object.insert("path".into(), Value::String(self.path));
        object.insert("bytes".into(), Value::from(self.bytes));
        object.insert("truncated".into(), Value::Bool(self.truncated));
        object.insert("content".into(), Value::String(self.content));
        Value::Object(object)
    }
}

/// Bytes one byte of `content` takes in the request to the model: escaped once when the result
/// object is rendered as JSON ([`render_result`](crate::render_result)), and again when that
/// text is sent as a JSON string ([`escaped_len`](crate::escaped_len)). A NUL becomes `\u0000`
/// then `\\u0000`.
fn wire_cost(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' => 4,
        b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 3,
        0x00..=0x1f => 7,
        _ => 1,
    }
}

/// Cuts `contents.content` so that the rendered result takes at most `cap` bytes in the request,
/// at a character boundary, and marks it truncated when anything was cut.
fn fit_to_cap(contents: &mut FileContents, cap: usize) {
    // Everything but the content, with the longer of the two flags (`false`).
    let skeleton = FileContents {
        path: contents.path.clone(),
        bytes: contents.bytes,
        truncated: false,
        content: String::new(),
    }
    .into_json()
    .to_string();
    let budget = cap.saturating_sub(crate::escaped_len(&skeleton));
    let content = &contents.content;
    let mut used = 0usize;
    let mut end = content.len();
    for (at, byte) in content.bytes().enumerate() {
        used += wire_cost(byte);
        if used > budget {
            end = at;
            break;
        }
    }
    if end == content.len() {
        return;
    }
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    contents.content.truncate(end);
    contents.content.shrink_to_fit();
    contents.truncated = true;
}

/// Reads `requested` under the canonical directory `root`, at most `limit` bytes, off the
/// runtime thread: every file system call goes to Tokio's blocking pool in one hop. With a
/// result cap, it reads at most the cap (plus one byte) and fits the content to it.
pub(super) async fn read(
    root: Arc<Path>,
    requested: String,
    limit: usize,
    result_cap: Option<usize>,
) -> Result<FileContents, ToolError> {
    let work = move || {
        // Every byte takes at least one byte in the request: past the cap nothing is kept.
        let limit = result_cap.map_or(limit, |cap| limit.min(cap));
        let mut contents = read_blocking(&root, &requested, limit)?;
        if let Some(cap) = result_cap {
            fit_to_cap(&mut contents, cap);
        }
        Ok(contents)
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => match runtime.spawn_blocking(work).await {
            Ok(result) => result,
            Err(error) if error.is_panic() => Err(ToolError::panicked("reading the file")),
            Err(_) => Err(ToolError::cancelled()),
        },
        // Outside a Tokio runtime there is no blocking pool; the read is short, do it here.
        Err(_) => work(),
    }
}

fn outside(shown: &str) -> ToolError {
    ToolError::respond_to_model(format!(
        "`{shown}` is outside the allowed directory; only files inside it can be read (give a path relative to it, such as `notes.txt`)"
    ))
}

fn not_found(shown: &str) -> ToolError {
    ToolError::respond_to_model(format!(
        "there is no file `{shown}` in the allowed directory"
    ))
}

fn unreadable(shown: &str, error: &std::io::Error) -> ToolError {
    // An io::Error from these calls carries the OS's description, never the path.
    ToolError::respond_to_model(format!("`{shown}` could not be read: {error}"))
}

/// `path` (relative to the root) as shown to the model; the root itself is `.`.
fn show(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        path.display().to_string()
    }
}

/// Whether a relative path stays below its starting directory when read lexically: no root,
/// no drive prefix, and no `..` that climbs above the start. Links are not followed here;
/// this only decides what to say about paths that do not exist.
fn stays_below(path: &Path) -> bool {
    let mut depth = 0usize;
    for component in path.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// `path` with `.` and `..` resolved by text alone.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

fn read_blocking(root: &Path, requested: &str, limit: usize) -> Result<FileContents, ToolError> {
    if requested.trim().is_empty() {
        return Err(ToolError::respond_to_model(
            "the path is empty; give the path of a file relative to the allowed directory",
        ));
    }
    let requested_path = Path::new(requested);
    let absolute = requested_path.is_absolute();
    // A relative path that climbs out by its text alone is refused before touching the disk,
    // so the answer does not tell whether something exists out there.
    if !absolute && !stays_below(requested_path) {
        return Err(outside(requested));
    }
    let joined = root.join(requested_path);

    // Canonicalizing resolves `.`, `..` and every symlink; the result is what would be read.
    let canonical = match std::fs::canonicalize(&joined) {
        Ok(canonical) => canonical,
        Err(error) if matches!(error.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Err(if absolute {
                match lexically_normal(requested_path).strip_prefix(root) {
                    Ok(relative) => not_found(&show(relative)),
                    Err(_) => outside(requested),
                }
            } else {
                not_found(requested)
            });
        }
        Err(error) => return Err(unreadable(requested, &error)),
    };
    let Ok(relative) = canonical.strip_prefix(root) else {
        // Echo what the model asked for, never where it leads (that would reveal the layout
        // outside the root).
        let shown = if absolute {
            requested.to_owned()
        } else {
            show(requested_path)
        };
        return Err(outside(&shown));
    };
    let shown = show(relative);

    // Check the kind before opening: opening a FIFO would block until a writer appears.
    let metadata = std::fs::metadata(&canonical).map_err(|e| unreadable(&shown, &e))?;
    if metadata.is_dir() {
        return Err(ToolError::respond_to_model(format!(
            "`{shown}` is a directory, not a file; this tool reads files and cannot list directories"
        )));
    }
    if !metadata.is_file() {
        return Err(ToolError::respond_to_model(format!(
            "`{shown}` is not a regular file (a device, socket or pipe) and cannot be read"
        )));
    }

    let file = File::open(&canonical).map_err(|e| unreadable(&shown, &e))?;
    // One byte past the limit tells whether there is more, whatever the size said.
    let wanted = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut buffer = Vec::with_capacity(usize::try_from(metadata.len().min(wanted)).unwrap_or(0));
    file.take(wanted)
        .read_to_end(&mut buffer)
        .map_err(|e| unreadable(&shown, &e))?;
    let truncated = buffer.len() > limit;
    buffer.truncate(limit);

    let binary = || {
        ToolError::respond_to_model(format!(
            "`{shown}` is not UTF-8 text (it looks like a binary file), so it cannot be shown"
        ))
    };
    let content = match String::from_utf8(buffer) {
        Ok(text) => text,
        // The cut fell inside a character: drop its first bytes. Only an incomplete sequence
        // at the very end (`error_len() == None`) is a cut; anything else is not UTF-8.
        Err(error) if truncated && error.utf8_error().error_len().is_none() => {
            let valid = error.utf8_error().valid_up_to();
            let mut bytes = error.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|_| binary())?
        }
        Err(_) => return Err(binary()),
    };
    Ok(FileContents {
        path: shown,
        bytes: metadata.len(),
        truncated,
        content,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_cost_is_two_rounds_of_serde_json_escaping() {
        for code in 0..=0x7f_u8 {
            let rendered = serde_json::to_string(&char::from(code).to_string()).unwrap();
            let once = &rendered[1..rendered.len() - 1];
            assert_eq!(
                wire_cost(code),
                crate::escaped_len(once),
                "byte {code:#04x}"
            );
        }
    }

    #[test]
    fn fitted_results_fit_the_cap_on_the_wire() {
        for content in ["a".repeat(5000), "\0".repeat(5000), "\"é\n".repeat(1000)] {
            for cap in [64, 100, 1000, 4096] {
                let mut contents = FileContents {
                    path: "dir/\"quoted\".txt".into(),
                    bytes: 5000,
                    truncated: false,
                    content: content.clone(),
                };
                fit_to_cap(&mut contents, cap);
                assert!(contents.truncated);
                assert!(content.starts_with(&contents.content));
                assert_eq!(contents.content.capacity(), contents.content.len());
                let wire = crate::escaped_len(&contents.clone().into_json().to_string());
                let skeleton = FileContents {
                    content: String::new(),
                    ..contents.clone()
                };
                let skeleton = crate::escaped_len(&skeleton.into_json().to_string());
                if skeleton <= cap {
                    assert!(wire <= cap, "{wire} > {cap}");
                } else {
                    // No room even for the path: the loop's truncation cuts the rest.
                    assert!(contents.content.is_empty());
                }
                // As long as the cap leaves room, it is used up to the last character.
                if cap >= 1000 {
                    assert!(cap - wire < 8, "{cap} - {wire}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn fitted_content_is_a_prefix_within_the_cap(
            content in "[a-z\"\\\\\n\u{0}\u{1f}é😀]{0,300}",
            cap in 64usize..800,
        ) {
            let mut contents = FileContents {
                path: "notes.txt".into(),
                bytes: 300,
                truncated: false,
                content: content.clone(),
            };
            fit_to_cap(&mut contents, cap);
            proptest::prop_assert!(content.starts_with(&contents.content));
            proptest::prop_assert_eq!(contents.truncated, contents.content.len() < content.len());
            let wire = crate::escaped_len(&contents.clone().into_json().to_string());
            let skeleton = FileContents { content: String::new(), ..contents.clone() };
            if crate::escaped_len(&skeleton.into_json().to_string()) <= cap {
                proptest::prop_assert!(wire <= cap, "{} > {}", wire, cap);
            } else {
                // No room even for the path: the loop's truncation cuts the rest.
                proptest::prop_assert!(contents.content.is_empty());
            }
        }
    }

    #[test]
    fn lexical_escapes() {
        assert!(stays_below(Path::new("a/b.txt")));
        assert!(stays_below(Path::new("./a/../b.txt")));
        assert!(stays_below(Path::new("")));
        assert!(!stays_below(Path::new("../b.txt")));
        assert!(!stays_below(Path::new("a/../../b.txt")));
        assert!(!stays_below(Path::new("/etc/passwd")));
    }

    #[test]
    fn lexical_normal_form() {
        assert_eq!(
            lexically_normal(Path::new("/r/a/./b/../c.txt")),
            PathBuf::from("/r/a/c.txt")
        );
        assert_eq!(
            lexically_normal(Path::new("/r/../../etc")),
            PathBuf::from("/etc")
        );
    }
}
