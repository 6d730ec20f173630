//! The system calls this crate makes on descriptors it does not own: the F2FS atomic-write
//! ioctls and `fstat` on the unix VFS's descriptor of a database file.

use std::ffi::c_int;

/// `ioctl(fd, request, &mut u32)` for a request that writes one `u32` (F2FS_IOC_GET_FEATURES):
/// the value, or the OS error.
pub(crate) fn ioctl_read_u32(fd: c_int, request: libc::c_ulong) -> std::io::Result<u32> {
    let mut value: u32 = 0;
    // SAFETY: the request writes one u32 through the pointer, which points to a live u32;
    // a filesystem that does not know the request rejects it without writing.
    let rc = unsafe { libc::ioctl(fd, request, &mut value as *mut u32) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `ioctl(fd, request)` for a request without an argument (the F2FS atomic-write requests).
pub(crate) fn ioctl_none(fd: c_int, request: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: the request takes no argument; `fd` is only used, not owned or closed (the
    // caller checked it against its path when the file was opened).
    let rc = unsafe { libc::ioctl(fd, request) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The device and inode of the open descriptor `fd`, or `None` if it is not one.
pub(crate) fn fstat_dev_ino(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain data; fstat fills it or fails (EBADF for a wrong guess)
    // without touching anything else. The descriptor is only read, not owned or closed.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is a valid, writable `struct stat`.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}
