//! Persistent readers in a drawn scenario, with a generator of their own (so the rest of a seed's
//! run stays what it was, and the fixed CI seeds keep their scenarios: `cli::draw` leaves them
//! out): on some streams, a durable name read by `persistent` processes that are killed and
//! started again under it, stopped and closed, the stream's recorder made tethered and left
//! alone from the start (it is what they fall back to), and the stream's recordings purged
//! under them from time to time; and the other operations an operator runs on recordings while
//! they are recorded and read (detach, attach, delete detached, truncate), drawn by a generator
//! of their own, so seeds run before they were drawn keep the rest of their scenarios.

use crate::plan::{Action, Scenario};
use crate::prng::{mix, Rng};

/// Adds persistent readers and purges to `sc`.
pub fn add(sc: &mut Scenario) {
    let mut rng = Rng::new(mix(sc.seed ^ 0x0050_4552_5349_5354));
    // Which `poll` incarnations steer with actions: a generator of its own, so the rest of the
    // draw stays what it was for seeds run before `controlled` was drawn.
    let mut steer = Rng::new(mix(sc.seed ^ 0x0043_5452_4c44));
    // When retention operations other than purges happen: a generator of its own too.
    let mut ops = Rng::new(mix(sc.seed ^ 0x0000_5245_5441_494e));
    let end = (sc.seconds * 1000.0) as u64;
    let streams: Vec<String> = sc.streams.iter().filter(|s| !s.hostile).map(|s| s.name.clone()).collect();
    let mut chosen: Vec<String> = streams.iter().filter(|_| rng.chance(0.5)).cloned().collect();
    if chosen.is_empty() && !streams.is_empty() {
        chosen.push(rng.pick(&streams).clone());
    }
    for stream in chosen {
        let si = stream.trim_start_matches('s');
        let recorder = format!("c{si}");
        // One recorder per stream and journal (two would record it twice): this stream's is
        // tethered and never faulted, from the start.
        sc.timeline.retain(|(_, a)| !names(a, &recorder));
        let settings = format!("stream={stream},tethered=1");
        sc.timeline
            .push((0, Action::Spawn { proc: format!("{recorder}.1"), role: "recorder".into(), settings }));
        for k in 0..rng.range(1, 3) {
            let speed = *rng.weighted(&[(2, "fast"), (1, "work"), (2, "slow")]);
            let limit = *rng.pick(&[4u32, 16, 64]);
            let name = format!("p{si}{k}");
            let settings = format!("stream={stream},name={name},speed={speed},limit={limit}");
            let first = rng.range(0, 1500);
            lifecycle(&mut rng, &mut steer, &name, &settings, first, end, &mut sc.timeline);
        }
        let mut t = rng.range(1000, 3000);
        while t < end {
            sc.timeline.push((t, Action::Purge(stream.clone())));
            t += rng.range(1500, 5000);
        }
        retention(&mut ops, &stream, end, &mut sc.timeline);
    }
    sc.timeline.sort_by_key(|(t, _)| *t);
}

/// Detaches, attaches, deletions of detached files and truncations of `stream`'s recordings,
/// every 0.7-3 s. Most detaches are followed by an attach within 0.1-1.5 s (with a purge
/// between, rarely, the files are gone), some by a deletion of the detached files first (the
/// attach then brings nothing back); the final replay shows what each left.
fn retention(rng: &mut Rng, stream: &str, end: u64, out: &mut Vec<(u64, Action)>) {
    let mut t = rng.range(800, 2500);
    let s = || stream.to_string();
    while t < end {
        match *rng.weighted(&[
            (4, "detach-attach"),
            (1, "detach-delete-attach"),
            (2, "detach"),
            (2, "truncate"),
        ]) {
            "truncate" => out.push((t, Action::Truncate(s()))),
            kind => {
                out.push((t, Action::Detach(s())));
                if kind == "detach-delete-attach" {
                    t += rng.range(50, 700);
                    out.push((t, Action::DeleteDetached(s())));
                }
                if kind != "detach" {
                    t += rng.range(100, 1500);
                    out.push((t, Action::Attach(s())));
                }
            }
        }
        t += rng.range(700, 3000);
    }
}

/// Whether action `a` is about an incarnation of `actor` (`actor.N`).
fn names(a: &Action, actor: &str) -> bool {
    let proc = match a {
        Action::Spawn { proc, .. } | Action::Kill(proc) | Action::Stop(proc) | Action::Cont(proc) => proc,
        Action::Close(proc) => proc,
        _ => return false,
    };
    proc.split('.').next() == Some(actor)
}

/// Incarnations of durable reader `name`: each killed, closed or left running, and started again
/// under the same name soon after (each with a receive shape of its own, drawn like a live
/// reader's: half of the `poll` ones `controlled`, by `steer`); some stopped long enough to be
/// lapped.
fn lifecycle(
    rng: &mut Rng,
    steer: &mut Rng,
    name: &str,
    settings: &str,
    start: u64,
    end: u64,
    out: &mut Vec<(u64, Action)>,
) {
    let (mut t, mut inc) = (start, 1);
    while t < end {
        let proc = format!("{name}.{inc}");
        let shape = *rng.weighted(&[
            (3, "poll"),
            (2, "blocking"),
            (2, "recv"),
            (1, "iter"),
            (1, "async"),
            (1, "stream"),
        ]);
        let shape = if shape == "poll" && steer.chance(0.5) { "controlled" } else { shape };
        let settings = format!("{settings},shape={shape}");
        out.push((t, Action::Spawn { proc: proc.clone(), role: "persistent".into(), settings }));
        inc += 1;
        loop {
            t += rng.range(300, 3000);
            if t >= end {
                return;
            }
            match *rng.weighted(&[(5, "kill"), (3, "stop"), (2, "close"), (2, "none")]) {
                "none" => continue,
                "stop" => {
                    let d = rng.range(20, 800);
                    out.push((t, Action::Stop(proc.clone())));
                    out.push((t + d, Action::Cont(proc.clone())));
                    t += d;
                    continue;
                }
                "kill" => {
                    out.push((t, Action::Kill(proc.clone())));
                    t += rng.range(0, 700);
                }
                _ => {
                    // A closed incarnation stuck in a blocking receive (an idle iterator: a
                    // persistent one never ends) is ended by force 700 ms later (the roles'
                    // grace); until then it holds the name, and a next one opening it fails.
                    out.push((t, Action::Close(proc.clone())));
                    t += rng.range(800, 1500);
                }
            }
            break;
        }
    }
}
