//! Descriptors an async runtime's reactor waits on for the stream's wake FIFO (feature `async`),
//! so that a write to the FIFO wakes the thread that runs the task, with no thread of ours in
//! between.
//!
//! The FIFO is never read (`sys::fanout`): it always holds bytes, so only an edge-triggered
//! watcher learns anything from it. Tokio registers descriptors edge-triggered ([`TokioFd`]).
//! Reactors that watch level-triggered (async-io's one-shot registrations, asyncio's
//! `add_reader`, `poll`) watch an [`EdgeFd`] instead: an epoll instance of our own holding the
//! FIFO edge-triggered, readable exactly while a write came that [`EdgeFd::clear`] has not taken.

#[cfg(any(feature = "tokio", feature = "async-io"))]
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
#[cfg(any(feature = "tokio", feature = "async-io"))]
use std::task::{Context, Poll};

/// An epoll instance watching descriptors on behalf of a level-triggered watcher of its own
/// descriptor: readable once one of them had an event (an edge-triggered one: a write) since the
/// last [`EdgeFd::clear`].
#[derive(Debug)]
pub(crate) struct EdgeFd(OwnedFd);

impl EdgeFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 has no memory arguments.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned by nothing else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for input: every write to it after this call is one event (`edge`), or it
    /// counts while it is readable (not `edge`). The watch ends when the last descriptor of
    /// `fd`'s open file is closed.
    pub(crate) fn watch(&self, fd: BorrowedFd<'_>, edge: bool) -> io::Result<()> {
        let events = libc::EPOLLIN | if edge { libc::EPOLLET } else { 0 };
        let mut event = libc::epoll_event { events: events as u32, u64: fd.as_raw_fd() as u64 };
        // SAFETY: valid descriptors and a valid event that outlives the call.
        let rc =
            unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes every event that came: the descriptor is then readable again only after a new
    /// write to an edge-triggered watch (or while a level-triggered one is readable).
    #[cfg_attr(not(any(test, feature = "async-io")), allow(dead_code))] // async-io's reactor path
    pub(crate) fn clear(&self) {
        self.clear_noting(None);
    }

    /// [`EdgeFd::clear`], and whether `watched` (a level-triggered watch) was among the events:
    /// it was readable then, so the caller knows whether it has something to read from it
    /// without a system call to find out.
    pub(crate) fn clear_noting(&self, watched: Option<BorrowedFd<'_>>) -> bool {
        let token = watched.map(|fd| fd.as_raw_fd() as u64);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let mut seen = false;
        loop {
            // SAFETY: a valid epoll descriptor and an out-buffer of the length given; no timeout.
            let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), out.as_mut_ptr(), out.len() as i32, 0) };
            let got = &out[..n.max(0) as usize];
            seen |= got.iter().any(|e| Some(e.u64) == token);
            if n < out.len() as i32 {
                return seen;
            }
        }
    }
}

impl AsFd for EdgeFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// `true` if `fd` is readable now: a level-triggered look, as asyncio's `add_reader` watches
/// (tests of the loop's wake descriptor).
#[cfg(test)]
pub(crate) fn readable_now(fd: BorrowedFd<'_>) -> bool {
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd that outlives the call; no timeout.
    unsafe { libc::poll(&mut poll, 1, 0) == 1 }
}

/// A non-blocking eventfd: a word that a waker bumps and the event loop watching it clears.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned by nothing else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the descriptor readable (until [`EventFd::clear`]).
    pub(crate) fn signal(&self) {
        let one = 1u64;
        // SAFETY: a valid descriptor and an 8-byte buffer that outlives the call. It fails only
        // when the counter would overflow: it is readable then anyway.
        unsafe { libc::write(self.0.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }

    pub(crate) fn clear(&self) {
        let mut count = 0u64;
        // SAFETY: a valid descriptor and an 8-byte buffer that outlives the call; EAGAIN when
        // it was clear already.
        unsafe { libc::read(self.0.as_raw_fd(), &mut count as *mut u64 as *mut libc::c_void, 8) };
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A file registered with a tokio runtime's reactor, for read readiness (edge-triggered).
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub(crate) struct TokioFd(tokio::io::unix::AsyncFd<File>);

#[cfg(feature = "tokio")]
impl TokioFd {
    /// `true` if the calling thread runs in a tokio runtime.
    pub(crate) fn in_a_runtime() -> bool {
        tokio::runtime::Handle::try_current().is_ok()
    }

    /// Registers `file` with the reactor of the tokio runtime the calling thread runs in; `None`
    /// outside one, or in one built without its IO driver (tokio has no way to ask, and panics
    /// when a descriptor is registered there: the panic is caught; the panic hook still prints it).
    pub(crate) fn in_current_runtime(file: File) -> Option<io::Result<Self>> {
        use tokio::io::{unix::AsyncFd, Interest};
        if !Self::in_a_runtime() {
            return None;
        }
        let register = std::panic::AssertUnwindSafe(move || {
            // SAFETY: the `AsyncFd` owns `file`, whose descriptor therefore stays open and refers
            // to the same open file description until the `AsyncFd` is dropped; `File::as_raw_fd`
            // always returns that descriptor.
            unsafe { AsyncFd::register_with_interest(file, Interest::READABLE) }
        });
        let fd = std::panic::catch_unwind(register).ok()?;
        Some(fd.map(TokioFd).map_err(|e| e.into_parts().1))
    }

    /// Forgets every event reported so far and stores `cx`'s waker for the next one: after
    /// `Ok`, any write to the file wakes the task. An error means the reactor is gone (its
    /// runtime shut down): the caller sleeps another way.
    pub(crate) fn await_next_event(&self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            match self.0.poll_read_ready(cx) {
                Poll::Ready(Ok(mut seen)) => seen.clear_ready(),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
    }
}

/// The FIFO in async-io's reactor (the one smol runs on), through an [`EdgeFd`]: async-io
/// re-arms its registrations one-shot and level-triggered, which a FIFO that always holds bytes
/// would fire at once.
#[cfg(feature = "async-io")]
#[derive(Debug)]
pub(crate) struct AsyncIoFd {
    edge: async_io::Async<EdgeFd>,
    /// Open while watched (the watch ends with the last descriptor of the FIFO).
    _fifo: File,
}

#[cfg(feature = "async-io")]
impl AsyncIoFd {
    pub(crate) fn new(fifo: File) -> io::Result<Self> {
        let edge = EdgeFd::new()?;
        edge.watch(fifo.as_fd(), true)?;
        Ok(Self { edge: async_io::Async::new(edge)?, _fifo: fifo })
    }

    /// As [`TokioFd::await_next_event`]: after `Ok`, a write to the FIFO wakes the task.
    pub(crate) fn await_next_event(&self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            // Take the writes so far first: the epoll is then readable only after a new one.
            self.edge.get_ref().clear();
            match self.edge.poll_readable(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; no timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    /// What a level-triggered watcher (asyncio, async-io) sees of a pipe that always holds
    /// bytes: readable after each write until cleared, not before.
    #[test]
    fn an_edge_fd_is_readable_once_per_write_of_a_pipe_that_stays_full() {
        if !crate::sys::fanout::wakes_on_every_write() {
            return; // Linux 5.5-5.13: the reactor path is off there
        }
        let mut fds = [0i32; 2];
        // SAFETY: a valid out-pointer to two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
        // SAFETY: both were just opened and are owned by nothing else.
        let (rx, tx) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        let edge = EdgeFd::new().unwrap();
        edge.watch(rx.as_fd(), true).unwrap();
        let event = EventFd::new().unwrap();
        edge.watch(event.as_fd(), false).unwrap();
        assert!(!readable(edge.as_fd()));
        for _ in 0..3 {
            std::io::Write::write_all(&mut &tx, b"x").unwrap();
            assert!(readable(edge.as_fd()), "a write is an event");
            edge.clear();
            assert!(!readable(edge.as_fd()), "cleared, though the pipe still holds bytes");
        }
        event.signal();
        assert!(readable(edge.as_fd()), "the eventfd's signal is an event");
        event.clear();
        edge.clear();
        assert!(!readable(edge.as_fd()));
    }
}
