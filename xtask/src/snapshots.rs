//! The snapshot check: every committed snapshot is used by a test, and none is pending.
//!
//! insta records each snapshot file a test touches in the file named by
//! `INSTA_SNAPSHOT_REFERENCES_FILE`; after the tests, any `.snap` on disk that is not in that
//! log is stale. This is what `cargo insta test --check --unreferenced=reject` does, without
//! installing cargo-insta on every CI machine.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::step::workspace_root;

pub(crate) struct ReferenceLog {
    path: PathBuf,
}

impl ReferenceLog {
    pub(crate) fn new() -> Result<Self, String> {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace_root().join("target"), PathBuf::from);
        let dir = target.join("xtask");
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("snapshot-references.txt");
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot reset {}: {e}", path.display())),
        }
        Ok(Self { path })
    }

    /// Makes `command`'s tests compare against committed snapshots (never write them) and log
    /// the ones they use.
    pub(crate) fn configure(&self, command: &mut Command) {
        command
            .env("INSTA_UPDATE", "no")
            .env("INSTA_FORCE_PASS", "0")
            .env("INSTA_SNAPSHOT_REFERENCES_FILE", &self.path);
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        println!("\n==> snapshots");
        let log = match fs::read_to_string(&self.path) {
            Ok(log) => log,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", self.path.display())),
        };
        let referenced: BTreeSet<PathBuf> = log
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| canonical(Path::new(line)))
            .collect();

        let mut on_disk = Vec::new();
        collect_snapshot_files(&workspace_root(), &mut on_disk)?;
        let problems = problems(&on_disk, &referenced);
        if problems.is_empty() {
            println!(
                "==> snapshots: ok ({} committed, all referenced)",
                on_disk.len()
            );
            Ok(())
        } else {
            Err(format!(
                "snapshot check failed:\n  {}",
                problems.join("\n  ")
            ))
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// What is wrong with the snapshot files on disk, given the ones the tests used.
fn problems(on_disk: &[PathBuf], referenced: &BTreeSet<PathBuf>) -> Vec<String> {
    on_disk
        .iter()
        .filter_map(|path| {
            let name = path.to_string_lossy();
            if name.ends_with(".snap.new") || name.ends_with(".pending-snap") {
                Some(format!(
                    "pending snapshot (review and commit or delete): {name}"
                ))
            } else if !referenced.contains(&canonical(path)) {
                Some(format!("unreferenced snapshot (no test uses it): {name}"))
            } else {
                None
            }
        })
        .collect()
}

fn collect_snapshot_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let file_type = entry
            .file_type()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
        if file_type.is_dir() {
            if name != "target" && !name.starts_with('.') {
                collect_snapshot_files(&path, out)?;
            }
        } else if name.ends_with(".snap")
            || name.ends_with(".snap.new")
            || name.ends_with(".pending-snap")
        {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_unreferenced_and_pending_snapshots() {
        let used = PathBuf::from("/nonexistent/a.snap");
        let referenced = BTreeSet::from([used.clone()]);
        let on_disk = vec![
            used,
            PathBuf::from("/nonexistent/stale.snap"),
            PathBuf::from("/nonexistent/a.snap.new"),
        ];
        let problems = problems(&on_disk, &referenced);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("unreferenced") && problems[0].contains("stale.snap"));
        assert!(problems[1].contains("pending") && problems[1].contains("a.snap.new"));
    }
}
