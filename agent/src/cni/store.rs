//! The CNI attachments this node holds, one small JSON file each under
//! `<state dir>/attachments/`, written before a port is plugged and removed after it is
//! unplugged. A restarted agent reads them back to keep forwarding for its pods (and to clean up
//! after a DEL it missed); GC compares them with the runtime's list. Touches only that directory.

use std::{
    io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// One pod interface attached by the CNI server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    pub container_id: String,
    pub if_name: String,
    pub netns: String,
    pub logical_port: String,
    pub host_interface: String,
    /// When it was attached (ms since the epoch), to pick the newest of one port's records.
    #[serde(default)]
    pub created_ms: u64,
}

/// The attachment directory.
#[derive(Clone, Debug)]
pub struct AttachmentStore {
    dir: PathBuf,
}

impl AttachmentStore {
    /// Opens (creating) `<state_dir>/attachments`.
    pub fn open(state_dir: &Path) -> io::Result<Self> {
        let dir = state_dir.join("attachments");
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    fn path(&self, container_id: &str, if_name: &str) -> PathBuf {
        // Container IDs and interface names are single path components by the CNI spec; anything
        // else is replaced so a hostile ID cannot escape the directory.
        let clean = |s: &str| {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        };
        self.dir
            .join(format!("{}__{}.json", clean(container_id), clean(if_name)))
    }

    /// Records `record` (atomically replacing an older one of the same attachment).
    pub fn save(&self, record: &AttachmentRecord) -> io::Result<()> {
        let path = self.path(&record.container_id, &record.if_name);
        let temporary = path.with_extension("tmp");
        let text = serde_json::to_vec(record).map_err(io::Error::other)?;
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, &path)
    }

    /// Forgets an attachment; absent is fine.
    pub fn remove(&self, container_id: &str, if_name: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(container_id, if_name)) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }

    /// The record of one attachment.
    pub fn get(&self, container_id: &str, if_name: &str) -> Option<AttachmentRecord> {
        let text = std::fs::read(self.path(container_id, if_name)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The record each logical port is restored from after a restart: the newest of its records
    /// whose host interface `exists`. Older sandboxes of a pod are left to DEL or GC.
    pub fn restorable(&self, exists: impl Fn(&str) -> bool) -> Vec<AttachmentRecord> {
        let mut newest: std::collections::BTreeMap<String, AttachmentRecord> =
            std::collections::BTreeMap::new();
        for record in self.all() {
            if !exists(&record.host_interface) {
                tracing::warn!(
                    port = record.logical_port,
                    interface = record.host_interface,
                    "a recorded CNI attachment lost its interface; DEL or GC will clean it up"
                );
                continue;
            }
            match newest.get(&record.logical_port) {
                Some(kept) if kept.created_ms >= record.created_ms => {}
                _ => {
                    newest.insert(record.logical_port.clone(), record);
                }
            }
        }
        newest.into_values().collect()
    }

    /// Every record; unreadable files are skipped with a warning.
    pub fn all(&self) -> Vec<AttachmentRecord> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut records: Vec<AttachmentRecord> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .filter_map(|path| {
                let parsed = std::fs::read(&path)
                    .ok()
                    .and_then(|text| serde_json::from_slice(&text).ok());
                if parsed.is_none() {
                    tracing::warn!(path = %path.display(), "unreadable CNI attachment record skipped");
                }
                parsed
            })
            .collect();
        records.sort_by(|a, b| a.container_id.cmp(&b.container_id));
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_hostile_ids_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::open(dir.path()).unwrap();
        let record = AttachmentRecord {
            container_id: "../../etc/passwd".into(),
            if_name: "eth0".into(),
            netns: "/var/run/netns/x".into(),
            logical_port: "web.ns".into(),
            host_interface: "0123456789ab_h".into(),
            created_ms: 1,
        };
        store.save(&record).unwrap();
        assert_eq!(store.all(), vec![record.clone()]);
        assert_eq!(store.get("../../etc/passwd", "eth0"), Some(record.clone()));
        let files: Vec<_> = std::fs::read_dir(dir.path().join("attachments"))
            .unwrap()
            .collect();
        assert_eq!(files.len(), 1);
        std::fs::write(dir.path().join("attachments/bad.json"), b"{").unwrap();
        assert_eq!(store.all().len(), 1, "the unreadable file is skipped");
        let newer = AttachmentRecord {
            container_id: "second".into(),
            host_interface: "second_h".into(),
            created_ms: 2,
            ..record.clone()
        };
        store.save(&newer).unwrap();
        assert_eq!(store.restorable(|_| true), vec![newer.clone()]);
        assert_eq!(
            store.restorable(|interface| interface != "second_h"),
            vec![record.clone()],
            "the newest with an interface"
        );
        store.remove("second", "eth0").unwrap();
        store.remove("../../etc/passwd", "eth0").unwrap();
        store.remove("../../etc/passwd", "eth0").unwrap();
        assert_eq!(store.get("../../etc/passwd", "eth0"), None);
    }
}
