//! Asymmetric memory barriers (`membarrier(2)`): the side that goes to sleep pays for the full
//! barrier a Dekker-style wake-up needs, so the side that runs hot (a writer after every commit)
//! only needs a compiler barrier.
//!
//! A process that publishes registers once with `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`. If
//! that works, its hot paths use a compiler barrier ([`light`]), and a sleeper in any process
//! calls `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, which runs a full barrier on every CPU running a
//! registered process ([`heavy`]). Subscriber processes do not register: their hot side (a ring
//! check once per poll that moved) keeps a full fence, so that a sleeping reader's barrier only
//! interrupts CPUs running a publisher, never its fellow readers (measured: with 8 sleeping
//! subscribers at 1 000 msg/s, registering them all added 10-30 % to the p50 wake-up and half
//! again to their CPU). Where the kernel or a seccomp filter refuses, the hot path uses a full
//! fence instead (a few ns per message) and stays correct; `SHMLOG_NO_MEMBARRIER=1` forces that,
//! to measure it.

use std::sync::atomic::{fence, AtomicU8, Ordering};

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// 0: not decided yet; 1: registered (hot paths use a compiler barrier); 2: fences.
#[allow(clippy::disallowed_types)] // process-wide state of the OS layer, not protocol memory
static MODE: AtomicU8 = AtomicU8::new(0);

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes plain integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0u32, 0i32) }
}

/// Registers this process (once): `true` if its hot paths may use a compiler barrier.
pub(crate) fn asymmetric() -> bool {
    match MODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let wanted = std::env::var_os("SHMLOG_NO_MEMBARRIER").is_none_or(|v| v != "1");
            let offered = wanted
                && membarrier(MEMBARRIER_CMD_QUERY) & MEMBARRIER_CMD_GLOBAL_EXPEDITED as libc::c_long != 0;
            let ok = offered && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
            MODE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

/// `true` if this process registered, so its hot side's barrier between its store and its load
/// of the other side's word may be a compiler barrier (a sleeper's [`heavy`] supplies the rest);
/// a full fence otherwise.
#[inline(always)]
pub(crate) fn registered() -> bool {
    MODE.load(Ordering::Relaxed) == 1
}

/// The sleeping side's barrier: a full fence here, and a full barrier on every CPU that runs a
/// registered process. `false` if the kernel refused the second part: the caller then cannot
/// rely on a registered hot side seeing its announcement, and bounds its sleep.
pub(crate) fn heavy() -> bool {
    fence(Ordering::SeqCst);
    membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0
}
