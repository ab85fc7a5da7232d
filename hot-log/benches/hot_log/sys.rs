//! The few operating-system calls std has no wrapper for.
#![allow(unsafe_code)] // FFI to libc; each call's contract is stated where it is made

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Duration;

/// What kind of file system holds a path and how much of it is free.
pub struct FsInfo {
    pub kind: String,
    /// tmpfs or ramfs: `fdatasync` there costs nothing.
    pub is_memory: bool,
    pub free_bytes: u64,
}

#[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between platforms
pub fn fs_info(path: &Path) -> io::Result<FsInfo> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    let mut out = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `c_path` is NUL-terminated and `out` is a writable `statfs`.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), out.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `statfs` succeeded, so it filled `out` (which was zeroed anyway).
    let st = unsafe { out.assume_init() };
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let magic = st.f_type as i64;
    let kind = match magic {
        m if m == libc::TMPFS_MAGIC as i64 => "tmpfs".to_string(),
        RAMFS_MAGIC => "ramfs".to_string(),
        m if m == libc::EXT4_SUPER_MAGIC as i64 => "ext4".to_string(),
        m if m == libc::XFS_SUPER_MAGIC as i64 => "xfs".to_string(),
        m if m == libc::BTRFS_SUPER_MAGIC as i64 => "btrfs".to_string(),
        m => format!("file system 0x{m:x}"),
    };
    Ok(FsInfo {
        is_memory: kind == "tmpfs" || kind == "ramfs",
        kind,
        free_bytes: st.f_bavail.saturating_mul(st.f_bsize as u64),
    })
}

/// Drops the file's clean pages from the page cache, so the next read goes to the disk.
pub fn drop_cached_pages(file: &File) -> io::Result<()> {
    // SAFETY: the descriptor stays open for the call; the advice only affects caching.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// User plus system CPU time of this process so far.
pub fn cpu_time() -> Duration {
    let mut out = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `out` is a writable `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, out.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: `getrusage` succeeded, so it filled `out`.
    let usage = unsafe { out.assume_init() };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The 1, 5 and 15 minute load averages, as the kernel prints them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}
