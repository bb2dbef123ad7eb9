//! The ledger as the oracle sees it: every event file of a run read into writers, readers,
//! recorders and the controller's record of processes, with each event's file and line kept
//! for the failure report.

use crate::event::{lines, Line};
use std::collections::{BTreeMap, HashMap};

/// Where an event came from: file index and line number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Src {
    pub file: u32,
    pub line: u32,
}

/// A stream as the controller declared it.
#[derive(Clone, Debug, Default)]
pub struct StreamDef {
    pub name: String,
    pub concurrent: bool,
    pub term: i64,
    pub mtu: i64,
    pub liveness_ms: i64,
    pub hostile: bool,
}

impl StreamDef {
    /// Log bytes a message of `len` bytes takes (frames of at most `mtu`, 32-byte aligned).
    pub fn framed(&self, len: i64) -> i64 {
        let payload = self.mtu - 32;
        let align = |n: i64| (n + 31) & !31;
        if len <= payload {
            return align(len + 32);
        }
        let (full, rest) = (len / payload, len % payload);
        full * self.mtu + if rest > 0 { align(rest + 32) } else { 0 }
    }
}

/// A process as the controller saw it.
#[derive(Clone, Debug, Default)]
pub struct Proc {
    pub name: String,
    pub role: String,
    pub streams: Vec<String>,
    pub tethered: bool,
    pub spawn_t: i64,
    pub exit_t: Option<i64>,
    /// `code:N` or `signal:N`.
    pub status: String,
    /// The controller SIGKILLed it.
    pub killed: bool,
    /// SIGSTOP..SIGCONT intervals (`i64::MAX` if never continued).
    pub stops: Vec<(i64, i64)>,
}

impl Proc {
    pub fn alive_at(&self, t: i64) -> bool {
        self.spawn_t <= t && self.exit_t.is_none_or(|e| t < e)
    }

    /// Microseconds it was stopped within `[a, b]`.
    pub fn stopped_within(&self, a: i64, b: i64) -> i64 {
        self.stops.iter().map(|&(s, c)| (c.min(b) - s.max(a)).max(0)).sum()
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Attempt {
    Ok { end: i64, len: i64, t: i64, src: Src },
    Refused { src: Src },
    Aborted { src: Src },
}

/// One writer process's file.
#[derive(Debug, Default)]
pub struct WriterLog {
    pub file: u32,
    pub proc: String,
    pub stream: String,
    pub w: u32,
    pub inc: u32,
    pub session: Option<i32>,
    pub creating_t: Option<i64>,
    pub start_t: Option<i64>,
    pub attempts: HashMap<u64, Attempt>,
    pub last_seq: Option<u64>,
    /// It logged its own graceful end: no attempt of it is unknown.
    pub graceful: bool,
    /// Back pressure and not-connected streaks: from, to, why.
    pub held: Vec<(i64, i64, String, Src)>,
    /// Commit times, in order.
    pub oks: Vec<(i64, u64, Src)>,
    /// Why it could not open its publication, if it could not.
    pub nostart: Option<(String, Src)>,
    /// Claims it held open on purpose: from, to (its next line, or its end).
    pub holds: Vec<(i64, i64)>,
    /// The last batch it announced (`batch from=A to=B`, a Python writer's `offer_many`):
    /// sequence numbers `A..B`, any of which may be committed before a line says so.
    pub batch: Option<(u64, u64)>,
}

impl WriterLog {
    /// `true` if attempt `seq` may have been committed without a line saying so: the one after
    /// the last line of a writer that did not end gracefully, or any after it in the batch it
    /// announced last.
    pub fn unknown(&self, seq: u64) -> bool {
        let next = self.last_seq.map_or(0, |q| q + 1);
        let in_batch = self.batch.is_some_and(|(a, b)| a <= seq && seq < b && seq >= next);
        !self.graceful && (seq == next || in_batch)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvKind {
    Opened,
    Joined {
        session: i32,
        at: Option<i64>,
    },
    Msg {
        w: u32,
        inc: u32,
        seq: u64,
        end: Option<i64>,
    },
    Loss {
        session: i32,
        from: i64,
        to: i64,
        cause: String,
        sessions: u32,
    },
    Closed {
        session: i32,
    },
    Fault {
        session: Option<i32>,
        why: String,
        /// Heap bytes gained since the reader opened, at the fault.
        grown: Option<i64>,
    },
    /// How many fault results a receive shape returned in a session (first one logged as Fault).
    Faults {
        session: i32,
        n: u64,
    },
    /// How many `Closed` results it returned in a session (first one logged as Closed).
    Closes {
        session: i32,
        n: u64,
    },
    Corrupt {
        why: String,
    },
    Bad {
        why: String,
    },
    Merged {
        at: i64,
    },
    /// It could not open what it reads.
    NoStart {
        why: String,
    },
    Recording {
        id: u32,
    },
    /// A persistent reader's stored position changed: recording and position.
    Pos {
        rec: u32,
        at: i64,
    },
}

#[derive(Clone, Debug)]
pub struct Ev {
    pub t: i64,
    pub src: Src,
    pub kind: EvKind,
}

/// What a reader said at its exit.
#[derive(Clone, Debug, Default)]
pub struct ExitInfo {
    pub t: i64,
    pub rss_kb: i64,
    pub fds: i64,
    pub heap_kb: i64,
    pub heap_open_kb: i64,
    pub max_msg: i64,
    pub forced: bool,
    pub lost_bytes: i64,
    pub src: Option<Src>,
}

/// A reading file: a reader process's (one per stream it reads), a recorder's, or a
/// recording's replay (made by the controller after the run).
#[derive(Debug, Default)]
pub struct ReaderLog {
    pub file: u32,
    pub proc: String,
    /// `reader`, `recorder` or `replay`.
    pub role: String,
    pub stream: String,
    pub shape: String,
    pub tethered: bool,
    pub join: String,
    pub later: String,
    pub start_t: i64,
    pub opened_t: Option<i64>,
    pub evs: Vec<Ev>,
    pub exit: Option<ExitInfo>,
    /// A replay's recording: id, start and stop positions.
    pub recording: Option<(u32, i64, i64)>,
    pub limit: i64,
    /// A persistent reader's durable name (its incarnations share it).
    pub name: String,
}

/// A recording as the catalog listed it after the run.
#[derive(Clone, Debug, Default)]
pub struct CatalogRec {
    pub id: u32,
    pub stream: String,
    pub session: i32,
    pub start: i64,
    pub stop: i64,
    pub reason: String,
    pub gap: i64,
    /// Where the recording began (`start` moves up when it is purged).
    pub origin: i64,
    pub src: Option<Src>,
}

/// A run's whole ledger.
#[derive(Debug, Default)]
pub struct Ledger {
    pub names: Vec<String>,
    pub texts: Vec<String>,
    pub streams: BTreeMap<String, StreamDef>,
    pub procs: BTreeMap<String, Proc>,
    pub writers: Vec<WriterLog>,
    pub readers: Vec<ReaderLog>,
    /// Sessions the controller corrupted (stream, session): their faults are expected.
    pub corrupted: Vec<(String, i32)>,
    /// Files left in the stream directory after the run and a final `clean`.
    pub leftovers: Vec<Src>,
    pub catalog: Vec<CatalogRec>,
    /// Every retention operation the controller made on a recording (purges too), in order.
    pub ops: Vec<Op>,
}

/// A retention operation on recordings (`shmlog journal ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Purge,
    Detach,
    Attach,
    DeleteDetached,
    Truncate,
}

/// What the controller did to one recording, as its line says.
#[derive(Clone, Debug)]
pub struct Op {
    pub kind: OpKind,
    pub stream: String,
    pub id: u32,
    pub session: i32,
    /// When it began (a reader may meet it before its line is written).
    pub t: i64,
    /// The start position before and after (a truncation: the stop position); `None` if the
    /// operation failed.
    pub moved: Option<(i64, i64)>,
    /// A truncation's first try, inside a message: where, and what it got
    /// (`PositionNotAvailable`).
    pub probe: Option<i64>,
    pub probe_got: Option<String>,
    pub src: Src,
}

fn num<T: std::str::FromStr>(l: &Line<'_>, key: &str) -> Option<T> {
    l.get(key).and_then(|v| v.parse().ok())
}

impl Ledger {
    /// Reads every file (`name`, text). Files whose first line is not a known `start` (or the
    /// controller's) are ignored.
    pub fn read(files: Vec<(String, String)>) -> Ledger {
        let mut g = Ledger::default();
        for (name, text) in files {
            g.names.push(name);
            g.texts.push(text);
        }
        for i in 0..g.texts.len() {
            let text = std::mem::take(&mut g.texts[i]);
            if g.names[i].ends_with("controller.log") {
                g.read_controller(i as u32, &text);
            } else if let Some((_, first)) = lines(&text).next() {
                match (first.kind, first.get("role")) {
                    ("creating" | "start", Some("writer")) => g.read_writer(i as u32, &text),
                    ("start", Some(_)) => g.read_reader(i as u32, &text),
                    _ => {}
                }
            }
            g.texts[i] = text;
        }
        g
    }

    /// `file:line: text` of an event, for a failure report.
    pub fn show(&self, src: Src) -> String {
        let text = self.texts[src.file as usize].lines().nth(src.line as usize - 1).unwrap_or("");
        format!("{}:{}: {}", self.names[src.file as usize], src.line, text)
    }

    fn read_controller(&mut self, file: u32, text: &str) {
        for (n, l) in lines(text) {
            let src = Src { file, line: n as u32 };
            let proc = l.get("proc").unwrap_or("").to_string();
            match l.kind {
                "stream" => {
                    let s = StreamDef {
                        name: l.get("name").unwrap_or("").into(),
                        concurrent: l.flag("concurrent"),
                        term: l.num("term").unwrap_or(0),
                        mtu: l.num("mtu").unwrap_or(0),
                        liveness_ms: l.num("liveness_ms").unwrap_or(100),
                        hostile: l.flag("hostile"),
                    };
                    self.streams.insert(s.name.clone(), s);
                }
                "spawn" => {
                    let streams =
                        ["stream", "stream2"].iter().filter_map(|k| l.get(k)).map(String::from).collect();
                    self.procs.insert(
                        proc.clone(),
                        Proc {
                            name: proc,
                            role: l.get("role").unwrap_or("").into(),
                            streams,
                            tethered: l.flag("tethered"),
                            spawn_t: l.t,
                            ..Proc::default()
                        },
                    );
                }
                "kill" | "stop" | "cont" | "exit" => {
                    let Some(p) = self.procs.get_mut(&proc) else { continue };
                    match l.kind {
                        "kill" => p.killed = true,
                        "stop" => p.stops.push((l.t, i64::MAX)),
                        "cont" => {
                            if let Some(s) = p.stops.last_mut().filter(|s| s.1 == i64::MAX) {
                                s.1 = l.t;
                            }
                        }
                        _ => {
                            p.exit_t = Some(l.t);
                            p.status = l.get("status").unwrap_or("").into();
                            if let Some(s) = p.stops.last_mut().filter(|s| s.1 == i64::MAX) {
                                s.1 = l.t;
                            }
                        }
                    }
                }
                "corrupt" => {
                    if let (Some(st), Some(s)) = (l.get("stream"), num(&l, "session")) {
                        self.corrupted.push((st.into(), s));
                    }
                }
                "leftover" => self.leftovers.push(src),
                "purge" | "detach" | "attach" | "delete-detached" | "truncate" => {
                    let kind = match l.kind {
                        "purge" => OpKind::Purge,
                        "detach" => OpKind::Detach,
                        "attach" => OpKind::Attach,
                        "delete-detached" => OpKind::DeleteDetached,
                        _ => OpKind::Truncate,
                    };
                    let (Some(id), Some(session)) = (num(&l, "id"), num(&l, "session")) else { continue };
                    let moved = match kind {
                        OpKind::DeleteDetached => l.num("start").map(|s| (s, s)),
                        _ => l.num("from").zip(l.num("to")),
                    };
                    let op = Op {
                        kind,
                        stream: l.get("stream").unwrap_or("").into(),
                        id,
                        session,
                        t: l.num("began").unwrap_or(l.t),
                        moved,
                        probe: l.num("probe"),
                        probe_got: l.get("probe_got").map(String::from),
                        src,
                    };
                    self.ops.push(op);
                }
                "recording" => self.catalog.push(CatalogRec {
                    id: num(&l, "id").unwrap_or(0),
                    stream: l.get("stream").unwrap_or("").into(),
                    session: num(&l, "session").unwrap_or(0),
                    start: l.num("start").unwrap_or(0),
                    stop: l.num("stop").unwrap_or(0),
                    reason: l.get("reason").unwrap_or("").into(),
                    gap: l.num("gap").unwrap_or(0),
                    origin: l.num("origin").or(l.num("start")).unwrap_or(0),
                    src: Some(src),
                }),
                _ => {}
            }
        }
    }

    fn read_writer(&mut self, file: u32, text: &str) {
        let mut w = WriterLog { file, ..WriterLog::default() };
        let seen = |w: &mut WriterLog, seq: u64| w.last_seq = Some(w.last_seq.map_or(seq, |q| q.max(seq)));
        let mut holding = None;
        for (n, l) in lines(text) {
            let src = Src { file, line: n as u32 };
            let seq = num::<u64>(&l, "seq");
            if let Some(from) = holding.take() {
                w.holds.push((from, l.t));
            }
            match l.kind {
                "hold" => holding = Some(l.t),
                "batch" => w.batch = num(&l, "from").zip(num(&l, "to")),
                "creating" => {
                    w.creating_t = Some(l.t);
                    w.proc = l.get("proc").unwrap_or("").into();
                    w.stream = l.get("stream").unwrap_or("").into();
                    w.w = num(&l, "w").unwrap_or(0);
                    w.inc = num(&l, "inc").unwrap_or(0);
                }
                "start" => {
                    w.start_t = Some(l.t);
                    w.session = num(&l, "session");
                }
                "ok" => {
                    let (Some(seq), Some(end)) = (seq, l.num("end")) else { continue };
                    w.attempts.insert(seq, Attempt::Ok { end, len: l.num("len").unwrap_or(0), t: l.t, src });
                    w.oks.push((l.t, seq, src));
                    seen(&mut w, seq);
                }
                "refused" | "aborted" => {
                    let Some(seq) = seq else { continue };
                    let a =
                        if l.kind == "refused" { Attempt::Refused { src } } else { Attempt::Aborted { src } };
                    w.attempts.insert(seq, a);
                    seen(&mut w, seq);
                }
                "held" => w.held.push((
                    l.num("from").unwrap_or(l.t),
                    l.num("to").unwrap_or(l.t),
                    l.get("why").unwrap_or("").into(),
                    src,
                )),
                "exit" => w.graceful = true,
                "nostart" => w.nostart = Some((l.get("why").unwrap_or("").into(), src)),
                _ => {}
            }
        }
        if let Some(from) = holding {
            w.holds.push((from, i64::MAX)); // to its end (the controller's exit line)
        }
        self.writers.push(w);
    }

    fn read_reader(&mut self, file: u32, text: &str) {
        let mut r = ReaderLog { file, ..ReaderLog::default() };
        for (n, l) in lines(text) {
            let src = Src { file, line: n as u32 };
            let session = num::<i32>(&l, "session");
            let kind = match l.kind {
                "start" => {
                    r.proc = l.get("proc").unwrap_or("").into();
                    r.role = l.get("role").unwrap_or("").into();
                    r.stream = l.get("stream").unwrap_or("").into();
                    r.shape = l.get("shape").unwrap_or("").into();
                    r.tethered = l.flag("tethered");
                    r.join = l.get("join").unwrap_or("earliest").into();
                    r.later = l.get("later").unwrap_or("earliest").into();
                    r.limit = l.num("limit").unwrap_or(64);
                    r.name = l.get("name").unwrap_or("").into();
                    r.start_t = l.t;
                    if let (Some(id), Some(a), Some(b)) = (num(&l, "recording"), l.num("from"), l.num("stop"))
                    {
                        r.recording = Some((id, a, b));
                    }
                    continue;
                }
                "opened" => {
                    r.opened_t = Some(l.t);
                    EvKind::Opened
                }
                "joined" => EvKind::Joined { session: session.unwrap_or(0), at: l.num("at") },
                "msg" => EvKind::Msg {
                    w: num(&l, "w").unwrap_or(0),
                    inc: num(&l, "inc").unwrap_or(0),
                    seq: num(&l, "seq").unwrap_or(0),
                    end: l.num("end"),
                },
                "loss" => {
                    let cause = l.get("cause").unwrap_or("");
                    let (cause, sessions) = match cause.split_once(':') {
                        Some((c, k)) => (c, k.parse().unwrap_or(1)),
                        None => (cause, 0),
                    };
                    EvKind::Loss {
                        session: session.unwrap_or(0),
                        from: l.num("from").unwrap_or(0),
                        to: l.num("to").unwrap_or(0),
                        cause: cause.into(),
                        sessions,
                    }
                }
                "closed" => EvKind::Closed { session: session.unwrap_or(0) },
                "fault" => EvKind::Fault {
                    session,
                    why: l.get("why").unwrap_or("").into(),
                    grown: l.num("heap_kb").zip(l.num("heap_open_kb")).map(|(h, o)| (h - o) * 1024),
                },
                "faults" => EvKind::Faults { session: session.unwrap_or(0), n: num(&l, "n").unwrap_or(0) },
                "closes" => EvKind::Closes { session: session.unwrap_or(0), n: num(&l, "n").unwrap_or(0) },
                "corrupt" => EvKind::Corrupt { why: l.get("why").unwrap_or("").into() },
                "bad" => EvKind::Bad { why: l.rest.into() },
                "merged" => EvKind::Merged { at: l.num("at").unwrap_or(0) },
                "nostart" => EvKind::NoStart { why: l.get("why").unwrap_or("").into() },
                "recording" => EvKind::Recording { id: num(&l, "id").unwrap_or(0) },
                "pos" => EvKind::Pos { rec: num(&l, "rec").unwrap_or(0), at: l.num("at").unwrap_or(0) },
                "exit" => {
                    r.exit = Some(ExitInfo {
                        t: l.t,
                        rss_kb: l.num("rss_kb").unwrap_or(0),
                        fds: l.num("fds").unwrap_or(0),
                        heap_kb: l.num("heap_kb").unwrap_or(0),
                        heap_open_kb: l.num("heap_open_kb").unwrap_or(0),
                        max_msg: l.num("max_msg").unwrap_or(0),
                        forced: l.flag("forced"),
                        lost_bytes: l.num("lost_bytes").unwrap_or(0),
                        src: Some(src),
                    });
                    continue;
                }
                _ => continue,
            };
            r.evs.push(Ev { t: l.t, src, kind });
        }
        self.readers.push(r);
    }
}
