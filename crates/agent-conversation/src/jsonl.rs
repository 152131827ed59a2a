//! [`JsonlAppender`]: one conversation per file, one turn per line, synced per turn; and
//! [`load_jsonl`], which reads such a file back and tolerates a crash-torn last line.
//!
//! # File format
//!
//! Each line is the JSON form of a [`StoredTurn`] followed by `\n`. A turn counts as stored only
//! with its newline: the appender writes the whole line, flushes it and calls `sync_data` before
//! `append` returns `Ok`, so any line without a newline (or that is not even valid JSON) at the
//! end of the file is the remains of an append that never returned `Ok`, cut short by a crash.
//! That is the *torn tail*.
//!
//! # Failures
//!
//! When a write or sync fails (a full disk, say), the appender cuts the file back to the end of
//! the last complete turn before returning the error, so the failed turn leaves no half line
//! that would corrupt the next append. If even the cut fails, the appender remembers it and
//! retries the cut before its next write; until the cut succeeds, every append fails.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::value::RawValue;

use crate::appender::{AppendFuture, ConversationAppender};
use crate::blocking::run_blocking;
use crate::error::Error;
use crate::turn::{StoredTurn, Turn};

/// One line of the file: a [`StoredTurn`] whose message was serialized before the lock.
#[derive(Serialize)]
struct Line<'a> {
    seq: u64,
    at_unix_ms: u64,
    message: &'a RawValue,
}

/// A conversation read back from a JSONL file.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoadedConversation {
    /// Every complete turn, in file order (sequence numbers 0, 1, 2, …).
    pub turns: Vec<StoredTurn>,
    /// The incomplete last line a crash left behind, if any. Its turn was never acknowledged
    /// as stored.
    pub torn_tail: Option<TornTail>,
}

/// Where the torn last line of a JSONL file sits: bytes `offset..offset + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TornTail {
    /// Byte offset where the torn line starts (the end of the last complete turn).
    pub offset: u64,
    /// Length of the torn line in bytes, including its newline if it has one.
    pub len: u64,
}

/// Reads the conversation stored in the JSONL file at `path`.
///
/// A torn last line (no trailing newline, or not valid JSON) is not an error: the complete
/// turns come back with [`LoadedConversation::torn_tail`] saying where the torn bytes are. Any
/// other bad line is [`Error::CorruptLine`] with its line number: a line that is not the last,
/// a valid JSON line that is not a turn, or a sequence number out of order. The file is not
/// modified.
///
/// # Errors
///
/// [`Error::Io`] if the file cannot be read (it must exist), [`Error::CorruptLine`] as above.
pub async fn load_jsonl(path: impl Into<PathBuf>) -> Result<LoadedConversation, Error> {
    let path = path.into();
    run_blocking(move || {
        let bytes = std::fs::read(&path).map_err(|error| Error::io("read", &path, error))?;
        parse(&path, &bytes)
    })
    .await
}

/// Appends the turns of one conversation to a JSONL file, durably.
///
/// Every [`append`](ConversationAppender::append) writes one line, flushes it and calls
/// `sync_data` before it returns, on Tokio's blocking pool so the runtime's workers never wait
/// on the disk. Clones share the same file and serialize their appends.
///
/// One process, one appender per file: two appenders writing the same file would interleave
/// their sequence numbers (and [`load_jsonl`] would then reject the file).
///
/// # Example
///
/// ```
/// use agent_conversation::{ConversationAppender, JsonlAppender, Turn, load_jsonl};
/// use agent_types::AssistantMessage;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("conversation.jsonl");
///
/// let appender = JsonlAppender::open(&path).await?;
/// appender.append(&Turn::new(AssistantMessage::text("Hello!"))).await?;
///
/// // Reopening continues the numbering after the turns already in the file.
/// let reopened = JsonlAppender::open(&path).await?;
/// reopened.append(&Turn::new(AssistantMessage::text("Still here."))).await?;
///
/// let loaded = load_jsonl(&path).await?;
/// assert_eq!(loaded.turns.len(), 2);
/// assert_eq!(loaded.turns[1].seq, 1);
/// assert_eq!(loaded.torn_tail, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct JsonlAppender {
    log: Arc<Mutex<Log>>,
    path: Arc<Path>,
    repaired_tail: Option<TornTail>,
}

impl JsonlAppender {
    /// Opens (creating if needed) the JSONL file at `path` for appending.
    ///
    /// An existing file is read first: new turns continue its sequence numbers. If a crash
    /// left a torn last line, it is cut off (the file is truncated to the end of the last
    /// complete turn and synced) and reported by [`repaired_tail`](Self::repaired_tail).
    /// Cutting it loses nothing that was acknowledged: a torn line is by definition an append
    /// that never returned `Ok`. Appending after it instead would glue the next turn onto the
    /// torn bytes and corrupt the file for good.
    ///
    /// A path that is not a regular file (a device, a pipe) is opened without reading it back
    /// and numbering starts at 0.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be opened, read or repaired; [`Error::CorruptLine`] if
    /// a line before the last is corrupt (the file is then left untouched).
    pub async fn open(path: impl Into<PathBuf>) -> Result<Self, Error> {
        let path: Arc<Path> = Arc::from(path.into());
        run_blocking(move || open_blocking(path)).await
    }

    /// The file this appender writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The torn last line [`open`](Self::open) found and cut away, if there was one. Offsets
    /// are those of the file before the cut.
    pub fn repaired_tail(&self) -> Option<TornTail> {
        self.repaired_tail
    }

    fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
        // Every failure path leaves `Log` consistent (a half-written line is tracked by
        // `dirty`), so a poisoned lock is safe to keep using.
        log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for JsonlAppender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlAppender")
            .field("path", &self.path)
            .field("repaired_tail", &self.repaired_tail)
            .finish_non_exhaustive()
    }
}

impl ConversationAppender for JsonlAppender {
    fn append<'a>(&'a self, turn: &'a Turn) -> AppendFuture<'a> {
        let log = Arc::clone(&self.log);
        let path = Arc::clone(&self.path);
        Box::pin(async move {
            // Serialize the borrowed message here, as the SQLite appender does, instead of
            // deep-copying it for the blocking thread; only the sequence number waits for the lock.
            let message =
                serde_json::value::to_raw_value(&turn.message).map_err(Error::Serialize)?;
            let at_unix_ms = turn.at_unix_ms;
            run_blocking(move || Self::lock(&log).append(&path, at_unix_ms, &message)).await
        })
    }
}

fn open_blocking(path: Arc<Path>) -> Result<JsonlAppender, Error> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&path)
        .map_err(|error| Error::io("open", &*path, error))?;
    let metadata = file
        .metadata()
        .map_err(|error| Error::io("inspect", &*path, error))?;

    let (end, next_seq, repaired_tail) = if metadata.is_file() {
        if metadata.len() == 0 {
            // The file may have just been created: make its directory entry durable too, or a
            // crash could lose the whole file along with turns we acknowledged.
            sync_parent_dir(&path)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|error| Error::io("read", &*path, error))?;
        let loaded = parse(&path, &bytes)?;
        let end = loaded
            .torn_tail
            .map_or(bytes.len() as u64, |tail| tail.offset);
        if loaded.torn_tail.is_some() {
            file.set_len(end)
                .and_then(|()| file.sync_data())
                .map_err(|error| Error::io("cut the torn last line from", &*path, error))?;
        }
        let next_seq = loaded.turns.last().map_or(0, |turn| turn.seq + 1);
        (end, next_seq, loaded.torn_tail)
    } else {
        // Reading a device such as /dev/full or /dev/zero would never end.
        (0, 0, None)
    };

    Ok(JsonlAppender {
        log: Arc::new(Mutex::new(Log {
            file: Box::new(file),
            end,
            next_seq,
            dirty: false,
        })),
        path,
        repaired_tail,
    })
}

#[cfg(unix)]
fn sync_parent_dir(path: &Path) -> Result<(), Error> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|error| Error::io("sync the directory of", path, error))
}

#[cfg(not(unix))]
fn sync_parent_dir(_path: &Path) -> Result<(), Error> {
    // Directories cannot be opened as files for syncing here; NTFS journals the entry itself.
    Ok(())
}

/// The file operations the appender needs; a trait so tests can make writes fail halfway.
trait LogFile: Write + Send {
    fn sync_data(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
}

impl LogFile for File {
    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

/// The open file and what the appender knows about it.
struct Log {
    /// Opened in append mode: every write lands at the current end of the file.
    file: Box<dyn LogFile>,
    /// The byte length of the complete turns (the end of the last `\n` written).
    end: u64,
    /// The sequence number the next turn gets.
    next_seq: u64,
    /// A failed append may have left bytes after `end` that could not be cut yet.
    dirty: bool,
}

impl Log {
    fn append(&mut self, path: &Path, at_unix_ms: u64, message: &RawValue) -> Result<(), Error> {
        if self.dirty {
            self.cut_to_end(path)?;
        }
        // Same fields, same order as `StoredTurn`, so `load_jsonl` reads the line back as one.
        let mut line = serde_json::to_vec(&Line {
            seq: self.next_seq,
            at_unix_ms,
            message,
        })
        .map_err(Error::Serialize)?;
        line.push(b'\n');

        let written = self
            .file
            .write_all(&line)
            .and_then(|()| self.file.flush())
            .and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            // Part of the line (or all of it, unsynced) may be in the file. Cut it now so the
            // file holds exactly the acknowledged turns; if the cut fails too, `dirty` makes
            // the next append retry it before writing anything.
            self.dirty = true;
            let _cut = self.cut_to_end(path);
            return Err(Error::io("append a turn to", path, error));
        }
        self.end += line.len() as u64;
        self.next_seq += 1;
        Ok(())
    }

    /// Truncates the file to the end of the last complete turn.
    fn cut_to_end(&mut self, path: &Path) -> Result<(), Error> {
        let len = self
            .file
            .len()
            .map_err(|error| Error::io("inspect", path, error))?;
        if len < self.end {
            return Err(Error::io(
                "append to",
                path,
                io::Error::other("the file is shorter than the turns already written to it"),
            ));
        }
        if len > self.end {
            self.file
                .set_len(self.end)
                .and_then(|()| self.file.sync_data())
                .map_err(|error| Error::io("cut a partially written turn from", path, error))?;
        }
        self.dirty = false;
        Ok(())
    }
}

/// Splits `bytes` into turns; see [`load_jsonl`] for the rules.
fn parse(path: &Path, bytes: &[u8]) -> Result<LoadedConversation, Error> {
    let mut turns: Vec<StoredTurn> = Vec::new();
    let mut offset = 0;
    let mut line_number = 0_u64;
    while offset < bytes.len() {
        line_number += 1;
        let rest = &bytes[offset..];
        let torn = TornTail {
            offset: offset as u64,
            len: rest.len() as u64,
        };
        let Some(newline) = rest.iter().position(|&byte| byte == b'\n') else {
            // No newline: the append that wrote this never finished.
            return Ok(LoadedConversation {
                turns,
                torn_tail: Some(torn),
            });
        };
        let is_last = newline + 1 == rest.len();
        let corrupt = |reason: String| Error::CorruptLine {
            path: path.to_path_buf(),
            line: line_number,
            reason,
        };
        let turn: StoredTurn = match serde_json::from_slice(&rest[..newline]) {
            Ok(turn) => turn,
            // Garbage or a cut-off object on the last line: what a crash mid-write leaves
            // (some filesystems leave zeroed or stale blocks after the last good byte).
            Err(error) if is_last && (error.is_syntax() || error.is_eof()) => {
                return Ok(LoadedConversation {
                    turns,
                    torn_tail: Some(torn),
                });
            }
            Err(error) => return Err(corrupt(error.to_string())),
        };
        let expected = turns.len() as u64;
        if turn.seq != expected {
            return Err(corrupt(format!(
                "expected sequence number {expected}, found {}",
                turn.seq
            )));
        }
        turns.push(turn);
        offset += newline + 1;
    }
    Ok(LoadedConversation {
        turns,
        torn_tail: None,
    })
}

#[cfg(test)]
mod tests {
    use agent_types::AssistantMessage;

    use super::*;

    fn line(seq: u64) -> String {
        let turn = StoredTurn::new(seq, Turn::at(AssistantMessage::text(format!("t{seq}")), 7));
        format!("{}\n", serde_json::to_string(&turn).unwrap())
    }

    fn parse_str(text: &str) -> Result<LoadedConversation, Error> {
        parse(Path::new("t.jsonl"), text.as_bytes())
    }

    #[test]
    fn parses_complete_lines() {
        let loaded = parse_str(&format!("{}{}", line(0), line(1))).unwrap();
        assert_eq!(loaded.turns.len(), 2);
        assert_eq!(loaded.turns[1].seq, 1);
        assert_eq!(loaded.torn_tail, None);
        assert_eq!(parse_str("").unwrap().turns, Vec::new());
    }

    #[test]
    fn a_last_line_without_newline_is_torn_even_if_it_parses() {
        let first = line(0);
        let second = line(1);
        let text = format!("{first}{}", second.trim_end());
        let loaded = parse_str(&text).unwrap();
        assert_eq!(loaded.turns.len(), 1);
        assert_eq!(
            loaded.torn_tail,
            Some(TornTail {
                offset: first.len() as u64,
                len: second.len() as u64 - 1,
            })
        );
    }

    #[test]
    fn an_invalid_last_line_with_newline_is_torn() {
        let first = line(0);
        let loaded = parse_str(&format!("{first}\0\0\0\n")).unwrap();
        assert_eq!(loaded.turns.len(), 1);
        assert_eq!(
            loaded.torn_tail,
            Some(TornTail {
                offset: first.len() as u64,
                len: 4,
            })
        );
    }

    #[test]
    fn a_corrupt_line_before_the_last_names_its_line_number() {
        let text = format!("{}{{\"seq\":1,\n{}", line(0), line(1));
        let error = parse_str(&text).unwrap_err();
        assert!(
            matches!(error, Error::CorruptLine { line: 2, .. }),
            "{error:?}"
        );
        assert!(error.is_corrupt());
        assert!(error.to_string().contains("line 2"), "{error}");
    }

    #[test]
    fn a_valid_json_last_line_that_is_not_a_turn_is_corrupt_not_torn() {
        let error = parse_str(&format!("{}{{\"hello\":1}}\n", line(0))).unwrap_err();
        assert!(
            matches!(error, Error::CorruptLine { line: 2, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn out_of_order_sequence_numbers_are_corrupt() {
        let error = parse_str(&format!("{}{}", line(0), line(2))).unwrap_err();
        let Error::CorruptLine {
            line: 2, reason, ..
        } = error
        else {
            panic!("{error:?}");
        };
        assert!(
            reason.contains("expected sequence number 1, found 2"),
            "{reason}"
        );
    }

    /// Passes `budget` bytes through to the real file, then fails like a full disk. `set_len`
    /// fails too while `refuse_cut` is set.
    struct FailingFile {
        inner: File,
        budget: usize,
        refuse_cut: bool,
    }

    impl Write for FailingFile {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.budget == 0 {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            let n = buf.len().min(self.budget);
            self.budget -= n;
            self.inner.write(&buf[..n])
        }

        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    impl LogFile for FailingFile {
        fn sync_data(&self) -> io::Result<()> {
            self.inner.sync_data()
        }

        fn len(&self) -> io::Result<u64> {
            LogFile::len(&self.inner)
        }

        fn set_len(&self, len: u64) -> io::Result<()> {
            if self.refuse_cut {
                return Err(io::Error::other("cut refused"));
            }
            self.inner.set_len(len)
        }
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// Opens an appender, appends one good turn, then swaps in a file that fails after
    /// `budget` bytes.
    fn appender_failing_after(
        dir: &Path,
        budget: usize,
        refuse_cut: bool,
    ) -> (JsonlAppender, File) {
        let path = dir.join("c.jsonl");
        let appender = block_on(JsonlAppender::open(&path)).unwrap();
        block_on(appender.append(&Turn::at(AssistantMessage::text("t0"), 7))).unwrap();
        let real = OpenOptions::new().append(true).open(&path).unwrap();
        let failing = FailingFile {
            inner: real.try_clone().unwrap(),
            budget,
            refuse_cut,
        };
        JsonlAppender::lock(&appender.log).file = Box::new(failing);
        (appender, real)
    }

    #[test]
    fn a_failed_append_cuts_its_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let (appender, _) = appender_failing_after(dir.path(), 10, false);
        let before = std::fs::read(appender.path()).unwrap();

        let error =
            block_on(appender.append(&Turn::at(AssistantMessage::text("t1"), 7))).unwrap_err();
        assert!(error.is_storage_full(), "{error:?}");
        assert_eq!(std::fs::read(appender.path()).unwrap(), before);
    }

    #[test]
    fn a_cut_that_failed_is_retried_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let (appender, real) = appender_failing_after(dir.path(), 10, true);
        let error =
            block_on(appender.append(&Turn::at(AssistantMessage::text("t1"), 7))).unwrap_err();
        assert!(error.is_storage_full(), "{error:?}");
        // The half line is still there: the cut was refused.
        let loaded = block_on(load_jsonl(appender.path())).unwrap();
        assert_eq!(loaded.torn_tail.map(|tail| tail.len), Some(10));

        // The disk has room again: the next append first cuts the half line, then writes.
        JsonlAppender::lock(&appender.log).file = Box::new(real);
        block_on(appender.append(&Turn::at(AssistantMessage::text("t1"), 7))).unwrap();
        let loaded = block_on(load_jsonl(appender.path())).unwrap();
        assert_eq!(loaded.torn_tail, None);
        let seqs: Vec<u64> = loaded.turns.iter().map(|turn| turn.seq).collect();
        assert_eq!(seqs, [0, 1]);
    }

    #[test]
    fn appends_fail_while_the_cut_keeps_failing() {
        let dir = tempfile::tempdir().unwrap();
        let (appender, _) = appender_failing_after(dir.path(), 10, true);
        let turn = Turn::at(AssistantMessage::text("t1"), 7);
        block_on(appender.append(&turn)).unwrap_err();
        JsonlAppender::lock(&appender.log).file = Box::new(FailingFile {
            inner: OpenOptions::new()
                .append(true)
                .open(appender.path())
                .unwrap(),
            budget: usize::MAX,
            refuse_cut: true,
        });
        let error = block_on(appender.append(&turn)).unwrap_err();
        assert!(
            matches!(
                error,
                Error::Io {
                    action: "cut a partially written turn from",
                    ..
                }
            ),
            "{error:?}"
        );
        // Nothing was glued onto the half line.
        assert_eq!(
            block_on(load_jsonl(appender.path())).unwrap().turns.len(),
            1
        );
    }
}
