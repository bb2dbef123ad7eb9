//! A stream's wake FIFO: the descriptor an async runtime's reactor waits on. One `write` of a
//! byte wakes every process whose reactor watches the FIFO (the kernel wakes each epoll that
//! registered it), so whoever rings the readers wakes every reactor sleeper with one system call.
//!
//! Nobody reads the bytes: a reactor's registration is edge-triggered (each write is an event),
//! and a pipe that a waker emptied could drop the event the reactor is about to deliver (epoll
//! re-polls the pipe when it reports, and an empty pipe reports nothing). So the FIFO only fills;
//! a writer that finds it full (after 64 Ki rings) reads a page out, which leaves it far from
//! empty, and writes again.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

/// Creates the FIFO at `path` with permission bits `mode` if there is none yet (another process
/// may create it at the same time: either one's is the one), then opens it.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) fn create_and_open(path: &Path, mode: u32) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated path; mkfifo has no other memory arguments.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) };
    let created = rc == 0;
    if !created && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
        return Err(io::Error::last_os_error());
    }
    let file = open(path)?;
    if created {
        // The umask narrowed `mode`: every participant of the stream must be able to open it.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(file)
}

/// Opens the FIFO at `path` to ring it and to watch it: read-write (a FIFO opened so never
/// blocks and never reports a hang-up), non-blocking, without following a link. Refuses anything
/// but a FIFO (a peer that put a regular file there must not make writers fill it).
pub(crate) fn open(path: &Path) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let flags = libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: `c` is a valid NUL-terminated path; open has no other memory arguments.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    if !file.metadata()?.file_type().is_fifo() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a FIFO"));
    }
    Ok(file)
}

/// Writes one byte to the FIFO: every reactor watching it wakes. `false` if it could not
/// (the caller's sleepers then wait for their timeouts).
pub(crate) fn ring(fifo: &File) -> bool {
    for _ in 0..2 {
        let byte = 1u8;
        // SAFETY: a valid descriptor and a one-byte buffer that outlives the call.
        let n = unsafe { libc::write(fifo.as_raw_fd(), &byte as *const u8 as *const libc::c_void, 1) };
        if n == 1 {
            return true;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            return false;
        }
        // Full: take a page out (a 64 KiB pipe stays far from empty) and write again.
        let mut page = [0u8; 4096];
        // SAFETY: a valid descriptor and a buffer of the length given, which outlives the call.
        unsafe { libc::read(fifo.as_raw_fd(), page.as_mut_ptr() as *mut libc::c_void, page.len()) };
    }
    false
}

/// `true` if this kernel wakes an edge-triggered epoll watcher of a pipe on every write, also
/// when the pipe already holds bytes (Linux up to 5.4 and from 5.14, and the stable kernels the
/// fix went back to; 5.5–5.13 woke only a reader of an empty pipe). Tried once on a private pipe.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) fn wakes_on_every_write() -> bool {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| try_wakes_on_every_write().unwrap_or(false))
}

#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
fn try_wakes_on_every_write() -> io::Result<bool> {
    let mut fds = [0i32; 2];
    // SAFETY: a valid out-pointer to two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nothing else.
    let (rx, tx) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: epoll_create1 has no memory arguments.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    let ep = unsafe { File::from_raw_fd(ep) };
    let mut event = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLET) as u32, u64: 0 };
    // SAFETY: valid descriptors and a valid event.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, rx.as_raw_fd(), &mut event) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut events_after_each_write = 0;
    for _ in 0..2 {
        let byte = 1u8;
        // SAFETY: a valid descriptor and a one-byte buffer.
        unsafe { libc::write(tx.as_raw_fd(), &byte as *const u8 as *const libc::c_void, 1) };
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: a valid epoll descriptor and an out-buffer of one event; no timeout.
        if unsafe { libc::epoll_wait(ep.as_raw_fd(), out.as_mut_ptr(), 1, 0) } == 1 {
            events_after_each_write += 1;
        }
    }
    Ok(events_after_each_write == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_rings_without_ever_filling_up_and_refuses_a_regular_file() {
        let dir = std::env::temp_dir().join(format!("shmlog-fanout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.wake");
        let fifo = create_and_open(&path, 0o600).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let again = create_and_open(&path, 0o600).unwrap();
        for _ in 0..70_000 {
            assert!(ring(&fifo), "a full FIFO is drained a page and written again");
        }
        assert!(ring(&again));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"x").unwrap();
        assert_eq!(open(&path).unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_kernel_wakes_a_watcher_on_every_write() {
        // Linux 6.x here; the answer only decides whether async receivers use the FIFO.
        println!("wakes on every write: {}", wakes_on_every_write());
    }
}
