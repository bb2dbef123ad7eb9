//! Target `bridge_status`: the status file a bridge leaves for `shmlog stat`, as hostile text.
//!
//! Properties: parsing never panics; what parses is within bounds (positions ≥ -1, losses at
//! most `MAX_LOSSES`, each `0 <= from <= to`); and what parses writes back as text that parses
//! to the same state (the writer and the parser agree on every accepted file).

use shmlog_bridge::status::{BridgeDirection, BridgeInfo, MAX_LOSSES};

pub fn bridge_status(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Some(b) = BridgeInfo::parse("s", BridgeDirection::In, 7, text) else { return };
    assert!(b.losses.len() <= MAX_LOSSES, "{} losses", b.losses.len());
    assert!(b.source_position >= -1 && b.resume_position >= -1, "{b:?}");
    for l in &b.losses {
        assert!(0 <= l.from && l.from <= l.to, "{l:?}");
    }
    let again = BridgeInfo::parse("s", BridgeDirection::In, 7, &b.to_text()).expect("its own text parses");
    assert_eq!(again, b, "written and read back differ");
}
