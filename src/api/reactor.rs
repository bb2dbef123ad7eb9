//! Where an async receiver or sender sleeps when not through the process's waiter thread: in the
//! reactor of the runtime it was made in (tokio's, async-io's), or in a caller's event loop that
//! watches a [`WakeFd`]. Each of them waits for the stream's wake FIFO; the sleep's steps are
//! `stream::doorbell`'s (`prepare_reactor_sleep`), the same whichever reactor waits.

use crate::error::Error;
use crate::region::MmapRegion;
use crate::stream::doorbell::Doorbell;
use crate::sys::reactor::{EdgeFd, EventFd};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

/// A descriptor for an event loop that watches descriptors itself (Python's asyncio
/// `add_reader`, `poll`, `select`, a level-triggered epoll) and polls an async receiver's or
/// sender's future when it is readable: the receiver made by [`crate::AsyncReceiver::with_wake_fd`]
/// (or sender, [`crate::AsyncSender::with_wake_fd`]) sleeps on the stream's wake FIFO through it,
/// so a commit reaches the loop's thread with one wake-up and no thread of ours in between.
///
/// The loop's turn: [`WakeFd::clear`], poll the future with [`WakeFd::waker`] as its waker, and
/// on `Pending` wait until [`WakeFd::fd`] is readable (level-triggered is fine: it is readable
/// only after a wake-up that came since the clear: the stream's FIFO was written, or the waker
/// was woken, e.g. by the liveness timer). One per receiver or sender (a wake-up of one would
/// otherwise poll the others for nothing).
#[derive(Debug)]
pub struct WakeFd {
    shared: Arc<LoopWake>,
}

/// The epoll instance the loop watches (the stream's FIFO edge-triggered, the eventfd level) and
/// the eventfd the waker signals.
#[derive(Debug)]
pub(crate) struct LoopWake {
    epoll: EdgeFd,
    event: EventFd,
}

impl Wake for LoopWake {
    fn wake(self: Arc<Self>) {
        self.event.signal();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.event.signal();
    }
}

impl LoopWake {
    /// Takes the FIFO's writes (the epoll's edge events), and reads the eventfd only if the
    /// epoll reported it readable: most wake-ups come through the FIFO, and a read of an empty
    /// eventfd was a system call a message. A signal after the epoll's look leaves the eventfd
    /// readable, so the loop's next turn reads it: none is lost, none is left behind.
    fn clear(&self) {
        if self.epoll.clear_noting(Some(self.event.as_fd())) {
            self.event.clear();
        }
    }
}

impl WakeFd {
    /// An epoll instance and an eventfd (two descriptors, closed on exec).
    pub fn new() -> Result<Self, Error> {
        let here = "an event loop's wake descriptor";
        let io = |e| Error::io("create", here, e);
        let epoll = EdgeFd::new().map_err(io)?;
        let event = EventFd::new().map_err(io)?;
        epoll.watch(event.as_fd(), false).map_err(io)?;
        Ok(Self { shared: Arc::new(LoopWake { epoll, event }) })
    }

    /// The descriptor to watch for input.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shared.epoll.as_fd()
    }

    /// The waker to poll the receiver's or sender's future with: it makes [`WakeFd::fd`]
    /// readable (from any thread, without a lock).
    pub fn waker(&self) -> Waker {
        Waker::from(Arc::clone(&self.shared))
    }

    /// Takes every wake-up so far: call it before polling the future (a wake-up after the clear
    /// leaves the descriptor readable, so none is lost).
    pub fn clear(&self) {
        self.shared.clear();
    }

    /// Another handle on the same descriptor, for a receiver that makes its sleeps again when
    /// its source moves to another live subscription.
    pub(crate) fn share(&self) -> WakeFd {
        WakeFd { shared: Arc::clone(&self.shared) }
    }
}

impl AsRawFd for WakeFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd().as_raw_fd()
    }
}

/// A sleeper's registration with the reactor that waits for the stream's wake FIFO for it.
#[derive(Debug)]
pub(crate) enum Reactor {
    #[cfg(feature = "tokio")]
    Tokio(crate::sys::reactor::TokioFd),
    #[cfg(feature = "async-io")]
    AsyncIo(crate::sys::reactor::AsyncIoFd),
    /// A caller's event loop, through its [`WakeFd`], whose epoll watches the FIFO while `_fifo`
    /// is open (`_wake` keeps that epoll alive as long as this sleeper).
    Loop { _wake: Arc<LoopWake>, _fifo: File },
}

impl Reactor {
    /// The stream's wake FIFO (made if need be) registered with `wake` if given, else with the
    /// tokio runtime the caller runs in (feature `tokio`), else with async-io's reactor (feature
    /// `async-io`). `None`: the sleeper goes through the waiter thread (no such reactor, a kernel
    /// that does not wake a watcher on every write, a FIFO that cannot be made, or
    /// `SHMLOG_ASYNC_WAITER=1` in the environment: to measure the two paths against each other).
    pub(crate) fn for_bell(bell: &Doorbell<MmapRegion>, wake: Option<&WakeFd>) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt;
        // The knob is read here, when a receiver or sender is made, never on a sleep.
        if !crate::sys::fanout::wakes_on_every_write()
            || std::env::var_os("SHMLOG_ASYNC_WAITER").is_some_and(|v| v == "1")
        {
            return None;
        }
        let fanout = bell.fanout()?;
        // The FIFO gets the stream's permissions: those of its slot file.
        let mode = std::fs::metadata(fanout.slot_file()).ok()?.permissions().mode() & 0o777;
        let fifo = || crate::sys::fanout::create_and_open(fanout.path(), mode).ok();
        if let Some(wake) = wake {
            let fifo = fifo()?;
            wake.shared.epoll.watch(fifo.as_fd(), true).ok()?;
            return Some(Reactor::Loop { _wake: Arc::clone(&wake.shared), _fifo: fifo });
        }
        #[cfg(feature = "tokio")]
        if crate::sys::reactor::TokioFd::in_a_runtime() {
            // A runtime without its IO driver refuses: async-io's reactor, if there is one.
            if let Some(Ok(fd)) = crate::sys::reactor::TokioFd::in_current_runtime(fifo()?) {
                return Some(Reactor::Tokio(fd));
            }
        }
        #[cfg(feature = "async-io")]
        if let Ok(fd) = crate::sys::reactor::AsyncIoFd::new(fifo()?) {
            return Some(Reactor::AsyncIo(fd));
        }
        let _ = fifo;
        None
    }

    /// Arranges that the next FIFO write wakes the task: a runtime's reactor forgets every write
    /// so far and takes `cx`'s waker; a loop watching a [`WakeFd`] forgot them at its own
    /// [`WakeFd::clear`] before this poll. An error means the reactor is gone (its
    /// runtime shut down): the caller sleeps through the waiter thread from then on.
    pub(crate) fn await_next_event(&self, cx: &mut Context<'_>) -> io::Result<()> {
        match self {
            #[cfg(feature = "tokio")]
            Reactor::Tokio(fd) => fd.await_next_event(cx),
            #[cfg(feature = "async-io")]
            Reactor::AsyncIo(fd) => fd.await_next_event(cx),
            // The loop cleared before this poll (the `WakeFd` turn): a write since then leaves
            // the descriptor readable, which costs one more poll and loses nothing. Clearing
            // again here cost two system calls a message.
            Reactor::Loop { .. } => {
                let _ = cx;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `true` if `wake`'s descriptor is readable now (a level-triggered look, as asyncio's).
    fn readable(wake: &WakeFd) -> bool {
        crate::sys::reactor::readable_now(wake.fd())
    }

    #[test]
    fn a_wake_leaves_the_descriptor_readable_until_the_next_clear() {
        let wake = WakeFd::new().unwrap();
        assert!(!readable(&wake), "readable before any wake-up");
        wake.waker().wake_by_ref();
        wake.waker().wake();
        assert!(readable(&wake), "a wake-up was lost");
        assert!(readable(&wake), "a look took the wake-up: a level-triggered loop would miss it");
        wake.clear();
        assert!(!readable(&wake), "still readable after the clear: a level-triggered loop would spin");
        wake.clear();
        assert!(!readable(&wake));
        wake.waker().wake_by_ref();
        assert!(readable(&wake), "a wake-up after a clear was lost");
    }
}
