//! The [`read_file`](super::read_file) tool's work: resolving a requested path inside the root
//! and reading a bounded UTF-8 prefix of the file.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

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

/// Reads `requested` under the canonical directory `root`, at most `limit` bytes, off the
/// runtime thread: every file system call goes to Tokio's blocking pool in one hop.
pub(super) async fn read(
    root: Arc<Path>,
    requested: String,
    limit: usize,
) -> Result<FileContents, ToolError> {
    let work = move || read_blocking(&root, &requested, limit);
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
