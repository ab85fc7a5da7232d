//! A small filesystem (tmpfs) for one broker's data directory, which the nemesis fills with
//! a ballast file and frees again. Mounting needs root.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

/// A tmpfs mounted on a temporary directory; unmounted on drop.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `mib` MiB, or says why it cannot.
    pub fn mount(mib: u64) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "floe-chaos"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let disk = SmallDisk { dir };
        std::fs::create_dir_all(disk.data_dir()).map_err(|e| e.to_string())?;
        Ok(disk)
    }

    /// The broker's data directory on it.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Fills the filesystem to its last byte with a ballast file, removed when the
    /// returned [`Ballast`] is dropped.
    pub fn fill(&self) -> Ballast {
        let path = self.dir.path().join("ballast");
        let mut file = std::fs::File::create(&path).expect("a ballast file");
        let mut bytes = 0u64;
        // Large writes first, then smaller ones for the last pages.
        for chunk in [1 << 20, 64 << 10, 4 << 10, 512] {
            let buffer = vec![0xba_u8; chunk];
            while file.write_all(&buffer).is_ok() {
                bytes += chunk as u64;
            }
        }
        Ballast { path, bytes }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // A process still holds a file there: detach it now, freed when it lets go.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// The file that fills a [`SmallDisk`]; removed on drop.
pub struct Ballast {
    path: PathBuf,
    pub bytes: u64,
}

impl Drop for Ballast {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
