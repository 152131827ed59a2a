//! Which files the user trusts to route an API key or widen tool access.
//!
//! A project's `agentry.toml` and a session's state file live in directories other people can
//! write to (a cloned repository, a shared folder). Their harmless settings apply as they are;
//! the ones that send a key somewhere (`base_url`, a `provider` that pairs a key with another
//! endpoint) or widen what a tool can reach (`read_file`, `root`, `[[mcp]]` servers) are
//! honoured only from a file whose canonical path and SHA-256 are in the user's trust store:
//!
//! - `agentry trust FILE` records a project configuration the user has read;
//! - every state file `agentry run --session` writes is recorded as it is written, so a state
//!   file agentry did not write here (or one changed since) is not trusted.
//!
//! The store is `trust.json` in the user's configuration directory
//! (`$XDG_CONFIG_HOME/agentry`, else `~/.config/agentry`; `%APPDATA%\agentry` on Windows),
//! replaced atomically and readable by the user alone. One entry per path: recording a file
//! again replaces its hash.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Error;

/// The trust store's format version.
const STORE_FORMAT: u32 = 1;

/// The store's file name in the user's configuration directory.
const STORE_FILE: &str = "trust.json";

/// The user's own configuration file in that directory.
pub(crate) const USER_CONFIG_FILE: &str = "config.toml";

/// The user's configuration directory for agentry, when the environment names one.
pub(crate) fn config_dir() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    if let Some(xdg) = absolute("XDG_CONFIG_HOME") {
        return Some(xdg.join("agentry"));
    }
    if cfg!(windows)
        && let Some(appdata) = absolute("APPDATA")
    {
        return Some(appdata.join("agentry"));
    }
    absolute("HOME").map(|home| home.join(".config").join("agentry"))
}

/// What a trusted file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A configuration file the user trusted with `agentry trust`.
    Config,
    /// A session state file agentry wrote (or the user trusted).
    State,
}

/// Whether a file's current bytes are trusted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its path and hash are recorded.
    Trusted,
    /// Its path is not recorded (or there is no store).
    #[default]
    Unknown,
    /// Its path is recorded with another hash: it changed since.
    Changed,
}

/// One recorded file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The canonical path.
    pub(crate) path: PathBuf,
    /// The SHA-256 of its bytes, lower-case hex.
    pub(crate) sha256: String,
    /// What it is.
    pub(crate) kind: Kind,
    /// When it was recorded, seconds since the Unix epoch.
    pub(crate) recorded_unix: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoreFile {
    agentry_trust: u32,
    #[serde(default)]
    files: Vec<Entry>,
}

/// The SHA-256 of `bytes` as lower-case hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            hex.push_str(&format!("{byte:02x}"));
            hex
        })
}

/// A trust store: `trust.json` in a configuration directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Store {
    path: PathBuf,
}

impl Store {
    /// The user's store, when the environment names a configuration directory.
    pub(crate) fn user() -> Option<Self> {
        config_dir().map(|dir| Self::in_dir(&dir))
    }

    /// The store in `dir`.
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join(STORE_FILE),
        }
    }
}

fn store_error(path: &Path, message: impl fmt::Display) -> Error {
    Error::Config {
        path: path.to_path_buf(),
        message: format!("trust store: {message}"),
    }
}

/// The recorded entries (none when there is no store yet).
fn read_store(path: &Path) -> Result<Vec<Entry>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(store_error(path, format!("cannot read it: {error}"))),
    };
    let store: StoreFile = serde_json::from_str(&text)
        .map_err(|error| store_error(path, format!("not a trust store: {error}")))?;
    if store.agentry_trust != STORE_FORMAT {
        return Err(store_error(
            path,
            format!(
                "format {} is not supported (this agentry reads format {STORE_FORMAT})",
                store.agentry_trust
            ),
        ));
    }
    Ok(store.files)
}

/// Whether `bytes`, read from `path`, are trusted as `kind`. Callers hash the bytes they
/// parse, so a file swapped between the check and the read cannot slip through.
pub(crate) fn check(
    store: Option<&Store>,
    path: &Path,
    bytes: &[u8],
    kind: Kind,
) -> Result<Verdict, Error> {
    let Some(store) = store.map(|store| &store.path) else {
        return Ok(Verdict::Unknown);
    };
    let Ok(canonical) = std::fs::canonicalize(path) else {
        return Ok(Verdict::Unknown);
    };
    let hash = sha256_hex(bytes);
    let entries = read_store(store)?;
    Ok(
        match entries
            .iter()
            .find(|entry| entry.path == canonical && entry.kind == kind)
        {
            Some(entry) if entry.sha256 == hash => Verdict::Trusted,
            Some(_) => Verdict::Changed,
            None => Verdict::Unknown,
        },
    )
}

/// Records `bytes` as the trusted content of `path`, replacing what was recorded for it.
/// Returns the entry, or `None` when there is no configuration directory to keep it in.
pub(crate) fn record(
    store: Option<&Store>,
    path: &Path,
    bytes: &[u8],
    kind: Kind,
) -> Result<Option<Entry>, Error> {
    let Some(store) = store.map(|store| &store.path) else {
        return Ok(None);
    };
    let canonical = std::fs::canonicalize(path).map_err(|error| Error::Config {
        path: path.to_path_buf(),
        message: format!("cannot resolve it: {error}"),
    })?;
    let entry = Entry {
        path: canonical,
        sha256: sha256_hex(bytes),
        kind,
        recorded_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs()),
    };
    update(store, |entries| {
        entries.retain(|old| old.path != entry.path);
        // State files of deleted sessions are dropped, so the store does not grow forever.
        entries.retain(|old| old.kind == Kind::Config || old.path.exists());
        entries.push(entry.clone());
    })?;
    Ok(Some(entry))
}

/// Forgets `path`; whether it was recorded.
pub(crate) fn remove(store: &Store, path: &Path) -> Result<bool, Error> {
    // A file deleted since is still forgotten by the absolute path it had.
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |dir| dir.join(path))
    });
    let mut removed = false;
    update(&store.path, |entries| {
        let before = entries.len();
        entries.retain(|entry| entry.path != canonical);
        removed = entries.len() != before;
    })?;
    Ok(removed)
}

/// Every recorded entry.
pub(crate) fn list(store: &Store) -> Result<Vec<Entry>, Error> {
    read_store(&store.path)
}

/// Read, change and write the store under its lock.
fn update(store: &Path, change: impl FnOnce(&mut Vec<Entry>)) -> Result<(), Error> {
    let dir = store.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)
        .map_err(|error| store_error(store, format!("cannot create {}: {error}", dir.display())))?;
    let _lock = Lock::take(&dir.join("trust.lock"))
        .map_err(|error| store_error(store, format!("cannot lock it: {error}")))?;
    let mut entries = read_store(store)?;
    change(&mut entries);
    let mut json = serde_json::to_vec_pretty(&StoreFile {
        agentry_trust: STORE_FORMAT,
        files: entries,
    })
    .map_err(|error| store_error(store, error))?;
    json.push(b'\n');
    write_private_atomically(store, &json)
        .map_err(|error| store_error(store, format!("cannot write it: {error}")))
}

/// A directory only the user can enter (0700 on Unix), with its parents.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Opens a new file only the user can read and write (0600 on Unix); refuses one that exists
/// (a symlink planted at the name included).
pub(crate) fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Writes `bytes` to a new private temporary file next to `path`, syncs it and renames it
/// over `path`: a crash leaves the old file or the new one, and the result is 0600.
pub(crate) fn write_private_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    // A leftover from a killed write (or something planted there) is never written through.
    match std::fs::remove_file(&temporary) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = create_private(&temporary)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    // The rename itself is durable only once the directory is synced.
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// An exclusive lock held as a file created with `O_EXCL`; removed on drop. A lock older than
/// [`Lock::STALE`] was left by a killed process and is taken over.
struct Lock {
    path: PathBuf,
}

impl Lock {
    const STALE: Duration = Duration::from_secs(10);

    fn take(path: &Path) -> std::io::Result<Self> {
        let deadline = SystemTime::now() + Duration::from_secs(5);
        loop {
            match create_private(path) {
                Ok(_) => {
                    return Ok(Self {
                        path: path.to_path_buf(),
                    });
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(path)
                        .and_then(|metadata| metadata.modified())
                        .ok()
                        .and_then(|modified| modified.elapsed().ok())
                        .is_some_and(|age| age > Self::STALE);
                    if stale {
                        let _ = std::fs::remove_file(path);
                        continue;
                    }
                    if SystemTime::now() > deadline {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("{} is held by another agentry", path.display()),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => return Err(error),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `path` when the user trusts its current bytes as a configuration (for `agentry serve`,
/// whose `[server]` section says where every key goes); else the refusal.
pub(crate) fn require_trusted(path: &Path) -> Result<PathBuf, Error> {
    let bytes = std::fs::read(path).map_err(|error| Error::Config {
        path: path.to_path_buf(),
        message: format!("cannot read it: {error}; name the configuration with --config FILE"),
    })?;
    let why = match check(Store::user().as_ref(), path, &bytes, Kind::Config)? {
        Verdict::Trusted => return Ok(path.to_path_buf()),
        Verdict::Changed => "has changed since it was trusted",
        Verdict::Unknown => "is not trusted",
    };
    Err(Error::Untrusted(format!(
        "refused: {} was found in the directory agentry serve runs in and {why}; its [server] \
         section names the endpoints your keys go to. Name the file with --config FILE, or, if \
         you wrote it or have read it, run `agentry trust {}`.",
        path.display(),
        path.display()
    )))
}

/// `agentry trust [FILE]`, `--list`, `--remove FILE`.
pub(crate) fn command(
    file: Option<PathBuf>,
    list_them: bool,
    forget: Option<PathBuf>,
) -> Result<(), Error> {
    let no_dir = || {
        Error::Usage(
            "no configuration directory to keep the trust in: set HOME or XDG_CONFIG_HOME".into(),
        )
    };
    let store = Store::user().ok_or_else(no_dir)?;
    if list_them {
        let entries = list(&store)?;
        if entries.is_empty() {
            println!("nothing is trusted ({})", store.path.display());
        }
        for entry in entries {
            let status = match std::fs::read(&entry.path) {
                Ok(bytes) if sha256_hex(&bytes) == entry.sha256 => "trusted",
                Ok(_) => "changed since: untrusted",
                Err(_) => "missing",
            };
            let kind = match entry.kind {
                Kind::Config => "config",
                Kind::State => "state",
            };
            println!(
                "{kind:6}  {}  sha256 {}  {status}",
                entry.path.display(),
                entry.sha256.get(..16).unwrap_or_default()
            );
        }
        return Ok(());
    }
    if let Some(path) = forget {
        if remove(&store, &path)? {
            println!("{} is no longer trusted", path.display());
            return Ok(());
        }
        return Err(Error::Usage(format!(
            "{} was not trusted; `agentry trust --list` shows what is",
            path.display()
        )));
    }
    let path = file.unwrap_or_else(|| PathBuf::from("agentry.toml"));
    let is_state = path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.ends_with(".state.json"));
    let (kind, bytes, sets) = if is_state {
        let bytes = std::fs::read(&path).map_err(|error| Error::Config {
            path: path.clone(),
            message: format!("cannot read it: {error}"),
        })?;
        let state: crate::session_file::SessionState =
            serde_json::from_slice(&bytes).map_err(|error| Error::Config {
                path: path.clone(),
                message: format!("not a session state file: {error}"),
            })?;
        let sets = sensitive(
            Some(state.provider),
            state.base_url.as_deref(),
            Some(&state.tools),
            state.root.as_deref(),
        );
        (Kind::State, bytes, sets)
    } else {
        let (config, bytes) = crate::config::FileConfig::read(&path)?;
        let mut sets = sensitive(
            config.provider,
            config.base_url.as_deref(),
            config.tools.as_deref(),
            config.root.as_deref(),
        );
        // MCP servers start programs or connect with headers from the environment.
        for entry in config.mcp.iter().flatten() {
            sets.push(format!("[[mcp]] {}", entry.describe()));
        }
        (Kind::Config, bytes, sets)
    };
    let before = check(Some(&store), &path, &bytes, kind)?;
    let entry = record(Some(&store), &path, &bytes, kind)?.ok_or_else(no_dir)?;
    let again = match before {
        Verdict::Changed => " again (it had changed since you last trusted it)",
        Verdict::Trusted => " (it already was)",
        Verdict::Unknown => "",
    };
    println!(
        "trusted {}{again}: sha256 {}",
        entry.path.display(),
        entry.sha256
    );
    if sets.is_empty() {
        println!("it sets nothing that routes a key or widens tool access");
    } else {
        println!("it may now set: {}", sets.join(", "));
    }
    println!("if the file changes, these settings are refused again until you trust it again");
    Ok(())
}

/// The settings a file holds that only a trusted file may set, for people to read.
fn sensitive(
    provider: Option<agent_backends::Api>,
    base_url: Option<&str>,
    tools: Option<&[crate::args::BuiltinTool]>,
    root: Option<&Path>,
) -> Vec<String> {
    let mut sets = Vec::new();
    if let Some(url) = base_url {
        sets.push(format!("base_url = {}", crate::endpoint::display(url)));
        if let Some(provider) = provider {
            sets.push(format!("provider = {provider}"));
        }
    }
    if tools.is_some_and(|tools| tools.contains(&crate::args::BuiltinTool::ReadFile)) {
        sets.push("tools = read_file".into());
    }
    if let Some(root) = root {
        sets.push(format!("root = {}", root.display()));
    }
    sets
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_sha256_in_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_recorded_file_is_trusted_until_its_bytes_change() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::in_dir(&dir.path().join("config"));
        let file = dir.path().join("agentry.toml");
        std::fs::write(&file, "model = \"m\"\n").unwrap();
        let verdict = |bytes: &[u8]| check(Some(&store), &file, bytes, Kind::Config).unwrap();
        assert_eq!(verdict(b"model = \"m\"\n"), Verdict::Unknown);
        record(Some(&store), &file, b"model = \"m\"\n", Kind::Config).unwrap();
        assert_eq!(verdict(b"model = \"m\"\n"), Verdict::Trusted);
        assert_eq!(verdict(b"model = \"n\"\n"), Verdict::Changed);
        // Trusted as a configuration is not trusted as a state file.
        assert_eq!(
            check(Some(&store), &file, b"model = \"m\"\n", Kind::State).unwrap(),
            Verdict::Unknown
        );
        assert!(remove(&store, &file).unwrap());
        assert_eq!(verdict(b"model = \"m\"\n"), Verdict::Unknown);
        // No configuration directory: nothing is trusted and nothing is recorded.
        assert_eq!(
            check(None, &file, b"", Kind::Config).unwrap(),
            Verdict::Unknown
        );
        assert!(record(None, &file, b"", Kind::Config).unwrap().is_none());
    }

    #[cfg(unix)]
    #[test]
    fn private_files_are_0600_and_never_written_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_private_atomically(&path, b"one").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "untouched").unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("state.json.tmp")).unwrap();
        write_private_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
    }
}
