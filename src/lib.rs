//! Aeron-style log buffers in shared memory, for messaging between processes (and threads) on
//! one host, with no media driver.
//!
//! A [`Publication`] creates a log file (by default under `/dev/shm/shmlog-<uid>/`) and appends
//! messages to it; any number of [`Subscription`]s, in any processes, map the same file read-only
//! and read the messages in place. There is no broker, no extra hop and no lock on any path.
//!
//! ```no_run
//! use shmlog::{Header, Publication, Subscription};
//! # fn main() -> Result<(), shmlog::Error> {
//! // Process A
//! let mut publication = Publication::builder("orders").create()?;
//! // Process B (before or after A)
//! let mut subscription = Subscription::builder("orders").open()?;
//! # publication.wait_connected(std::time::Duration::from_secs(1))?;
//! publication.offer(b"buy 100").expect("a reader is connected");
//! subscription.poll(|msg: &[u8], header: &Header| println!("{msg:?} at {}", header.position()), 10);
//! # Ok(()) }
//! ```
//!
//! # The model
//! - **Log.** One file per publisher session: three term partitions of `T` bytes (a power of two,
//!   64 KiB to 1 GiB) and a 4096-byte metadata section, in Aeron's format: 32-byte frame headers
//!   at 32-byte alignment (see `docs/format.md`). A **position** is a byte count from the start of
//!   the stream; term `n` lives in partition `n % 3`.
//! - **Single writer.** The publication appends frames to the active term and rotates to the
//!   next partition at its end, padding the rest. Messages above `mtu - 32` bytes are fragmented
//!   (a [`FragmentAssembler`] reassembles them); the largest message is `min(T/8, 16 MiB)`.
//! - **Readers.** Each subscription owns a slot in the stream's `<name>.readers` file holding its
//!   position. The publisher starts a message only below the slowest live reader's position plus
//!   a window (default `T/2`), so it runs at most a window plus one message ahead
//!   ([`OfferError::BackPressured`] otherwise) and never overwrites unread data; it zeroes the
//!   partition it will enter next as it writes, two terms behind itself.
//! - **Liveness.** Kernel-held locks (Linux OFD byte-range locks) mark the publisher and every
//!   reader as alive; the kernel drops them when a process dies, even by SIGKILL. A dead reader
//!   stops holding the publisher back within the liveness interval (100 ms by default); a live
//!   reader is never evicted. Readers see a dead publisher as disconnected.
//! - **Sessions.** A new publisher on the same name creates a fresh log (new session id, the
//!   stream's next session number) and atomically replaces the old file name; subscriptions
//!   finish the old session (to its end-of-stream position, or to what was committed when its
//!   publisher died) and then read the new one from its first message
//!   ([`SubscriptionBuilder::later_sessions`]). A subscription reports the end of a session once
//!   ([`Subscription::is_closed`], [`Polled::Closed`], [`RecvError::Closed`]) before it delivers
//!   anything of the next, and a subscription that exists when a session begins is owed all of
//!   it: the session's publisher counts it at the session's start until it joins (which it does
//!   when it is polled or waits), so a tethered one loses nothing of it.
//! - **Loss is never silent.** Messages a subscription cannot read (a later session joined past
//!   its start, whole sessions it never saw, a session left at a fault) are reported, one
//!   [`Loss`] each, in order with the messages: [`Subscription::take_loss`],
//!   [`RecvError::Lost`].
//!
//! # Soundness and trust
//! - No reference into memory another process writes is ever created, except the payload slice
//!   of a frame whose length was acquire-loaded as committed, while flow control keeps the
//!   writer away from it (and a claim's buffer, which no reader reads before its commit). Control
//!   words are accessed only through atomics; payload is copied in before the release store of
//!   the frame length.
//! - Every number read from shared memory is validated before it becomes an offset. A corrupt or
//!   hostile file gives a typed [`Error`] on open, or stops a reader at the bad frame
//!   ([`Subscription::fault`]); never an out-of-bounds access. Reader positions that cannot be
//!   true (past the publisher's) are ignored, and each reader maps only its own slot writable.
//! - Trust model: peers are processes of the same user running this crate. A peer's bug can
//!   corrupt messages but cannot make this crate's code read out of bounds. What it can do is
//!   write into a frame while a handler holds the zero-copy slice of it, which safe Rust assumes
//!   never happens: a handler that checks a length and reads it again may then be fooled. For
//!   peers not trusted that far, [`SubscriptionBuilder::copy_payloads`] hands handlers private
//!   copies. Files of other users, and files others may write, are refused; symlinks are never
//!   followed. A peer that truncates a file another process has mapped makes that process's next
//!   access fault (SIGBUS), publisher or reader: nothing in POSIX prevents a file owner from
//!   doing that (see `docs/reliability.md`).
//! - `unsafe` lives in the region, sync and sys layers, each block with a `// SAFETY:` comment.
//!   Where soundness rests on the log protocol (lending a frame's bytes, writing bytes a reader
//!   might be lent), the operation is an `unsafe fn` and the protocol's proof is the `SAFETY`
//!   comment at its call in `log` and `stream`.
//! - A process that `fork`s without `exec` shares its liveness tokens with the child: create
//!   publications and subscriptions after forking (see `docs/reliability.md`).
//!
//! # Waiting without spinning
//! Polling loops are fastest and cost a core. Blocking calls sleep in the kernel instead, on
//! the stream's doorbell (a futex in the reader-slot file) that the publisher rings after a
//! commit only when someone sleeps: [`Subscription::poll_blocking`],
//! [`Subscription::wait_readable`], [`Subscription::wait_any`] for several streams,
//! [`Publication::offer_blocking`] for a back-pressured publisher, whole typed messages through
//! [`Sender`] and [`Receiver`] (`recv_timeout`, a blocking iterator) with a [`Codec`], and async
//! receive and send (feature `async`: `AsyncReceiver::recv`, `AsyncSender::send`). Every one of
//! them sleeps through the same steps of one protocol, which wakes every sleeper of a commit
//! with one wake-up from the publisher. See `docs/waiting.md`.
//!
//! # Recording and replay
//! The [`journal`] records a stream into segment files on disk (a [`journal::Recorder`] is a
//! reader of the live log; the publisher never writes to disk), replays a recording from any
//! message start with the same handler shapes ([`journal::Replay`]), and merges a replay into
//! the live stream with no gap and no duplicate ([`journal::ReplayMerge`]). See
//! `docs/journal.md`.
//!
//! # Many writers
//! [`PublicationBuilder::open_concurrent`] gives a [`ConcurrentPublication`]: any number of
//! threads and processes write one stream, in one total order every reader sees. Space is
//! reserved with a CAS on the log's tail; a writer killed between its reservation and its commit
//! is found dead by the kernel and its hole padded within the liveness interval, while a writer
//! that is only stopped is never passed over. See `docs/concurrent.md`. Both publications
//! implement [`Publish`], so a [`Sender`], an `AsyncSender` or generic code takes either.
//!
//! # Features
//! `serde`: the [`Codec`] `Postcard`, for any serde type. `async`: `AsyncReceiver` (`recv().await`,
//! and a `futures_core::Stream` of messages), `AsyncSender` (`send(..).await`, awaiting room), and
//! `journal::AsyncReplay`, a stream of a recording's messages. None is on by default.
//!
//! # The workspace around the core
//! This crate is the core: messaging on one host and its journal, on `libc`, `memmap2` and
//! `crc32c`. Beside
//! it, crates of their own that use only its public API: `shmlog-bridge` (`bridge/`: a stream
//! carried to other hosts over Aeron UDP, `docs/bridge.md`) and `shmlog-tools` (`tools/`: the
//! `shmlog` command, `docs/cli.md`). `docs/architecture.md` maps the floors.
//!
//! # Thread safety
//! [`Publication`] and [`Subscription`] are `Send` but not `Sync`: move one to the thread that
//! uses it; all their methods take `&mut self`. The single writer is enforced by the type (it is
//! not `Clone`) and by the kernel (a second live publisher on the same name gets
//! [`Error::AlreadyExists`]).
//!
//! # File lifecycle
//! Files are created `0600` in a `0700` directory, with space reserved up front
//! (`posix_fallocate`: a full tmpfs is [`Error::InsufficientSpace`] at creation, never a SIGBUS
//! later) and pages pre-faulted. A log becomes visible under its name only once fully
//! initialised. Closing (or dropping) the publication marks end of stream and removes its log
//! (unless `keep_files(true)`, or a live subscription still owes the session: then the stream's
//! last user removes it); files left by crashed processes are replaced by the next publisher.
//!
//! # Platform
//! Linux (OFD locks, `/dev/shm`), x86_64 and aarch64.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// `pub` means reachable by users: everything inside is `pub(crate)` or private, except what the
// fuzz door (`__fuzz`, below) re-exports, which must be `pub` for it and is marked
// `#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]` (the memory map types also
// `feature = "async"`, whose sealed waiting trait names them).
// The fuzz build re-exports internals (`__fuzz`), which are documented for this crate, not users.
#![cfg_attr(shmlog_fuzz, allow(missing_docs))]
// Atomics are named through `crate::sync`, so the loom build swaps every one (clippy.toml);
// unit tests may use std's for their own plumbing.
#![cfg_attr(not(test), warn(clippy::disallowed_types))]
#![cfg_attr(shmlog_loom, allow(dead_code, unused_imports))]

pub(crate) mod error;
pub(crate) mod layout;
pub(crate) mod log;
pub(crate) mod region;
pub(crate) mod sync;

// Under loom only the memory protocol is compiled (log, reader slots, flow control, assembler),
// so the model checker runs the same code as the real build; files and system calls are left out.
pub(crate) mod api;
pub mod journal;
pub(crate) mod stream;
#[cfg(not(shmlog_loom))]
pub(crate) mod sys;

/// Entry points of the cargo-fuzz targets (`fuzz/`): the crate's internals, re-exported only in
/// fuzz builds (`--cfg shmlog_fuzz`, which only `.ci/fuzz.sh` sets; not cargo-fuzz's global
/// `fuzzing`, which every crate in a downstream fuzzer's graph sees).
#[cfg(all(shmlog_fuzz, not(shmlog_loom)))]
#[doc(hidden)]
pub mod __fuzz;

/// Writer and readers on threads over one heap region (for ThreadSanitizer; see the module).
#[cfg(all(test, not(shmlog_loom)))]
mod concurrency_tests;

/// Heap logs, modelled liveness and temporary directories for unit tests and fuzz targets.
#[cfg(all(any(test, shmlog_fuzz), not(shmlog_loom)))]
pub(crate) mod testing;

pub use error::{Error, OfferError};
pub use log::header::Header;
pub use log::reader::Action;

#[cfg(all(feature = "async", not(shmlog_loom)))]
pub use api::async_rx::{AsyncReceiver, AsyncSender};
#[cfg(not(shmlog_loom))]
pub use api::codec;
pub use api::idle;
#[cfg(not(shmlog_loom))]
pub use api::inspect;
#[cfg(all(feature = "async", not(shmlog_loom)))]
pub use api::reactor::WakeFd;
pub use api::{
    assembler::FragmentAssembler,
    handler::{ControlledFragmentHandler, FragmentHandler},
};
// The idle strategies and the codecs by their paths before they were grouped in `idle` and
// `codec`: code written then still compiles; the docs show them in their modules.
#[cfg(all(feature = "serde", not(shmlog_loom)))]
#[doc(hidden)]
pub use api::codec::Postcard;
#[cfg(not(shmlog_loom))]
#[doc(hidden)]
pub use api::codec::{Bytes, Codec, PodCodec, WrongSize};
#[doc(hidden)]
pub use api::idle::{Backoff, BusySpin, IdleStrategy, NoOp, Sleeping, Yielding};
#[cfg(not(shmlog_loom))]
pub use api::{
    channel::{Receiver, RecvError, SendError, Sender},
    claim::{ClaimGuard, ClaimSource},
    concurrent::{ConcurrentClaim, ConcurrentPublication},
    defaults::{DEFAULT_LIVENESS_INTERVAL, DEFAULT_MAX_READERS, DEFAULT_TERM_LENGTH},
    publication::{Claim, Publication, PublicationBuilder},
    publish::Publish,
    source::MessageSource,
    subscription::{Polled, Subscription, SubscriptionBuilder, MAX_LOSSES},
};
#[cfg(not(shmlog_loom))]
pub use region::pod::Pod;
#[cfg(not(shmlog_loom))]
pub use stream::dir::{default_dir, ensure_dir};
pub use stream::join::JoinAt;
pub use stream::loss::{Loss, LossCause};
#[cfg(not(shmlog_loom))]
pub use stream::name::{validate as validate_name, MAX_NAME_LEN};
pub use stream::reader::Resume;
