//! Resources and permissions (issue 6): a full file system, too many readers, bad names, a
//! missing directory, files of another user or writable by anyone, symlinks.

use crate::support;

use shmlog::{Error, Publication, Subscription};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::peer::{Cfg, Peer};
use support::spawns::spawning;
use support::{raw, ShmDir};

const TERM: usize = 64 << 10;
const T10: Duration = Duration::from_secs(10);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn create(dir: &Path, name: &str) -> Result<Publication, Error> {
    Publication::builder(name).dir(dir).term_length(TERM).create()
}

fn open(dir: &Path, name: &str) -> Result<Subscription, Error> {
    Subscription::builder(name).dir(dir).open()
}

/// A small tmpfs mounted for one test, unmounted on drop.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(at: &'a Path, size: &str) -> Option<Self> {
        if !is_root() {
            println!("[tmpfs] skipped: mounting needs root");
            return None;
        }
        let out = {
            let _spawn = spawning();
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
                .arg(at)
                .output()
        };
        match out {
            Ok(o) if o.status.success() => Some(Self(at)),
            Ok(o) => {
                println!("[tmpfs] skipped: mount failed: {}", String::from_utf8_lossy(&o.stderr).trim());
                None
            }
            Err(e) => {
                println!("[tmpfs] skipped: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _spawn = spawning();
        let ok = Command::new("umount").arg(self.0).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A file system too small for the log: `InsufficientSpace { needed, available }` at creation,
/// and nothing left behind (no log, no temporary, no reader-slot file). Same for a reader that
/// cannot even create the slot file.
#[test]
fn full_file_system_gives_insufficient_space_and_leaves_nothing() {
    let dir = ShmDir::new("tmpfs");
    let Some(_mount) = Tmpfs::mount(dir.path(), "1m") else { return };
    let at = dir.path();
    // A 1 MiB term needs 3 MiB + 4 KiB, plus the stream's first reader-slot file (128 slots).
    match Publication::builder("big").dir(at).term_length(1 << 20).create() {
        Err(Error::InsufficientSpace { needed, available, .. }) => {
            // A header page, the doorbell page and a page per slot.
            assert_eq!(needed, 3 * (1 << 20) + 4096 + (8192 + 128 * 4096));
            assert!(available <= 1 << 20, "available {available}");
        }
        other => panic!("expected InsufficientSpace, got {other:?}"),
    }
    assert_eq!(names_in(at), Vec::<String>::new(), "nothing left behind");
    // Two 200 KiB logs (with 16 reader slots each) fit, the space check counts what is left.
    let small = |name| Publication::builder(name).dir(at).term_length(TERM).max_readers(16).create();
    let a = small("a").unwrap();
    let b = small("b").unwrap();
    let filler = at.join("filler");
    let free = fs_available(at);
    std::fs::write(&filler, vec![1u8; free.saturating_sub(8192) as usize]).unwrap();
    let before = names_in(at);
    match create(at, "c") {
        Err(Error::InsufficientSpace { needed, available, .. }) => assert!(available < needed),
        other => panic!("expected InsufficientSpace, got {other:?}"),
    }
    match open(at, "d") {
        Err(Error::InsufficientSpace { .. }) => {}
        other => {
            panic!("a reader that cannot create its slot file: expected InsufficientSpace, got {other:?}")
        }
    }
    assert_eq!(names_in(at), before, "nothing left behind");
    drop((a, b));
    println!("[tmpfs] full file system: InsufficientSpace with needed/available, nothing left behind");
}

fn fs_available(dir: &Path) -> u64 {
    let _spawn = spawning();
    let out = Command::new("df").args(["--output=avail", "-B1"]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Every slot held by a live reader: `TooManyReaders`; a slot is free again as soon as its
/// reader leaves or its process dies.
#[test]
fn too_many_readers_is_a_typed_error_and_slots_come_back() {
    let dir = ShmDir::new("slots");
    let at = dir.path();
    let publication = Publication::builder("s").dir(at).term_length(TERM).max_readers(2).create().unwrap();
    let one = open(at, "s").unwrap();
    let two = open(at, "s").unwrap();
    match open(at, "s") {
        Err(Error::TooManyReaders { slots: 2, .. }) => {}
        other => panic!("expected TooManyReaders, got {other:?}"),
    }
    drop(one);
    let three = open(at, "s").expect("a slot freed by a reader leaving");
    // A reader process killed: its slot is free at once (the kernel dropped its lock).
    drop(three);
    let cfg = Cfg::new().set("dir", at.display()).set("name", "s");
    let mut peer = Peer::spawn("holder", "subscriber", &cfg);
    peer.expect("opened", T10);
    assert!(matches!(open(at, "s"), Err(Error::TooManyReaders { .. })));
    peer.kill();
    let four = open(at, "s").expect("a slot freed by a reader's death");
    drop((two, four, publication));
    // A reader creating the slot file sizes it too.
    let dir = ShmDir::new("slots2");
    let _a = Subscription::builder("r").dir(dir.path()).max_readers(1).open().unwrap();
    assert!(matches!(open(dir.path(), "r"), Err(Error::TooManyReaders { slots: 1, .. })));
}

/// Names that are not one plain file name are refused by both sides, and nothing is created.
#[test]
fn bad_names_are_rejected_and_create_nothing() {
    let dir = ShmDir::new("names");
    let long = "x".repeat(201);
    for name in
        ["", ".", "..", "../escape", "a/b", "/abs", "nul\0byte", ".hidden", "tab\tname", "nl\n", &long]
    {
        let p = create(dir.path(), name);
        assert!(matches!(p, Err(Error::InvalidName { .. })), "{name:?}: {p:?}");
        let s = open(dir.path(), name);
        assert!(matches!(s, Err(Error::InvalidName { .. })), "{name:?}: {s:?}");
    }
    assert_eq!(dir.entries(), Vec::<String>::new());
    assert!(!dir.path().parent().unwrap().join("escape.log").exists());
    // The longest accepted name works.
    let ok = "y".repeat(200);
    let p = create(dir.path(), &ok).unwrap();
    assert!(open(dir.path(), &ok).unwrap().session_id() == Some(p.session_id()));
}

/// A missing directory is created, mode 0700 at every level created; files are 0600 unless
/// asked otherwise; world-writable modes are refused.
#[test]
fn missing_directory_is_created_private() {
    let base = ShmDir::new("mkdir");
    let deep = base.path().join("a").join("b").join("c");
    let p = Publication::builder("s").dir(&deep).term_length(TERM).create().unwrap();
    for d in [base.path().join("a"), base.path().join("a/b"), deep.clone()] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    for f in [raw::log_path(&deep, "s"), raw::readers_path(&deep, "s")] {
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777, 0o600, "{}", f.display());
    }
    drop(p);
    let p = Publication::builder("g").dir(&deep).term_length(TERM).file_mode(0o640).create().unwrap();
    assert_eq!(std::fs::metadata(p.path()).unwrap().permissions().mode() & 0o7777, 0o640);
    for mode in [0o666, 0o602, 0o1600] {
        let r = Publication::builder("w").dir(&deep).term_length(TERM).file_mode(mode).create();
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{mode:o}: {r:?}");
        let r = Subscription::builder("w").dir(&deep).file_mode(mode).open();
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{mode:o}: {r:?}");
    }
    // A regular file where the directory should be.
    let file = base.path().join("plain");
    std::fs::write(&file, b"").unwrap();
    let r = Publication::builder("s").dir(&file).term_length(TERM).create();
    assert!(r.is_err(), "{r:?}");
}

/// Files that belong to another user, or that anyone may write, are refused (a typed
/// `PermissionDenied`) and left untouched; so is a default directory of another user.
#[test]
fn files_of_another_user_or_writable_by_anyone_are_refused() {
    if !is_root() {
        println!("[owner] skipped: changing owners needs root");
        return;
    }
    const NOBODY: u32 = 65534;
    let chown = |p: &Path| std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
    let chmod = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let denied = |what: &str, r: Result<(), Error>| {
        assert!(matches!(r, Err(Error::PermissionDenied { .. })), "{what}: {r:?}");
    };
    type Damage<'a> = &'a dyn Fn(&Path);
    let cases: &[(&str, Damage)] = &[
        ("log owned by nobody", &|d| chown(&raw::log_path(d, "o"))),
        ("log mode 0666", &|d| chmod(&raw::log_path(d, "o"), 0o666)),
        ("slot file owned by nobody", &|d| chown(&raw::readers_path(d, "o"))),
        ("slot file mode 0602", &|d| chmod(&raw::readers_path(d, "o"), 0o602)),
    ];
    for (what, damage) in cases {
        let dir = ShmDir::new("owner");
        let p =
            Publication::builder("o").dir(dir.path()).term_length(TERM).keep_files(true).create().unwrap();
        drop(open(dir.path(), "o").unwrap()); // leaves the slot file
        drop(p);
        damage(dir.path());
        let log = raw::log_path(dir.path(), "o");
        let before = (std::fs::metadata(&log).unwrap().ino(), std::fs::read(&log).unwrap());
        denied(what, open(dir.path(), "o").map(drop));
        denied(what, create(dir.path(), "o").map(drop));
        let after = (std::fs::metadata(&log).unwrap().ino(), std::fs::read(&log).unwrap());
        assert!(before == after, "{what}: the file was touched");
    }
    // The default directory (here via SHMLOG_DIR, in a child so the variable stays there) must
    // be ours: someone else's directory under our name in /dev/shm is a trap.
    let dir = ShmDir::new("foreigndir");
    let foreign = dir.path().join("home");
    std::fs::create_dir(&foreign).unwrap();
    chown(&foreign);
    let foreign_str = foreign.display().to_string();
    let cfg = Cfg::new().set("name", "x");
    let mut peer = Peer::spawn_with_env("default-dir", "open_default", &cfg, &[("SHMLOG_DIR", &foreign_str)]);
    let result = peer.expect("result", T10);
    assert_eq!(result.num("ok"), 0);
    assert!(result.get("err").is_some_and(|e| e.starts_with("PermissionDenied")), "{}", result.raw);
    peer.wait_success(T10);
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 0, "nothing created in it");
    println!("[owner] foreign and world-writable files refused untouched; foreign default dir refused");
}

/// Symlinks are never followed: at the log path, at the slot-file path, as the directory. The
/// target is never created, opened for writing or changed.
#[test]
fn symlinks_are_never_followed() {
    let dir = ShmDir::new("symlink");
    let outside = ShmDir::new("symlink-target");
    let target = outside.path().join("precious");
    std::fs::write(&target, b"do not touch").unwrap();
    let at = dir.path();
    let denied = |what: &str, r: Result<(), Error>| {
        assert!(matches!(r, Err(Error::PermissionDenied { .. })), "{what}: {r:?}");
    };
    let untouched = |what: &str| {
        assert_eq!(std::fs::read(&target).unwrap(), b"do not touch", "{what}");
    };
    // At the log path, to an existing file and to a missing one.
    std::os::unix::fs::symlink(&target, raw::log_path(at, "l")).unwrap();
    denied("log symlink: open", open(at, "l").map(drop));
    denied("log symlink: create", create(at, "l").map(drop));
    untouched("log symlink");
    let missing = outside.path().join("missing");
    std::os::unix::fs::symlink(&missing, raw::log_path(at, "m")).unwrap();
    denied("dangling log symlink: create", create(at, "m").map(drop));
    assert!(!missing.exists(), "the symlink's target was created");
    // At the slot-file path.
    std::os::unix::fs::symlink(&target, raw::readers_path(at, "r")).unwrap();
    denied("slot symlink: open", open(at, "r").map(drop));
    denied("slot symlink: create", create(at, "r").map(drop));
    untouched("slot symlink");
    // The directory itself.
    let linked = outside.path().join("linkdir");
    std::os::unix::fs::symlink(at, &linked).unwrap();
    denied("directory symlink: create", create(&linked, "d").map(drop));
    denied("directory symlink: open", open(&linked, "d").map(drop));
    // Nothing else appeared: no temporaries, no files through the links. (A failed create
    // leaves the stream's reader-slot file, shared by all its sessions.)
    let mut left = names_in(at);
    left.retain(|n| !matches!(n.as_str(), "l.readers" | "m.readers"));
    assert_eq!(left, vec!["l.log", "m.log", "r.readers"]);
    for link in ["l.log", "m.log", "r.readers"] {
        assert!(std::fs::symlink_metadata(at.join(link)).unwrap().file_type().is_symlink(), "{link}");
    }
    assert_eq!(names_in(outside.path()), vec!["linkdir", "precious"]);
}
