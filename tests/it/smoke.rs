use crate::support;
use shmlog::{OfferError, Publication, Subscription};
use support::ShmDir;

#[test]
fn offer_then_poll_in_one_process() {
    let dir = ShmDir::new("smoke");
    let mut publication = Publication::builder("s").dir(dir.path()).term_length(64 * 1024).create().unwrap();
    assert_eq!(publication.offer(b"lost"), Err(OfferError::NotConnected));
    let mut sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
    assert!(publication.is_connected());
    let mut got = Vec::new();
    for i in 0..10_000u32 {
        let msg = i.to_le_bytes();
        loop {
            match publication.offer(&msg) {
                Ok(_) => break,
                Err(OfferError::BackPressured) => {
                    sub.poll(
                        |m: &[u8], _: &shmlog::Header| got.push(u32::from_le_bytes(m.try_into().unwrap())),
                        100,
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    while got.len() < 10_000 {
        sub.poll(|m: &[u8], _: &shmlog::Header| got.push(u32::from_le_bytes(m.try_into().unwrap())), 100);
    }
    assert!(got.iter().copied().eq(0..10_000));
}
