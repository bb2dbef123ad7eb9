//! The in bridge's duty cycle apart from Aeron (`inbound/cycle.rs`), as the bridge runs it, with
//! no resume file, for the cargo-fuzz target `bridge_in` (`fuzz/`). Built only with
//! `--cfg shmlog_fuzz` (`.ci/fuzz.sh` sets it); not API, no stability promised.

pub mod bridge_in {
    pub use crate::builder::BackPressure;
    use crate::builder::ResumeFile;
    use crate::inbound::InCore;
    pub use crate::inbound::{
        source_span, Fragment, ImageInfo, Next, Offer, BEGIN, END, MAX_ASSEMBLIES, MAX_RETIRED,
    };
    pub use crate::status::{BridgeDirection, BridgeInfo, Loss, LossCause, MAX_LOSSES};
    pub use crate::wire::{encode, AFTER_DROP, FRESH_START, LOST, SENT_AGAIN};

    /// An in bridge's `InCore` with a detached resume file.
    #[allow(missing_debug_implementations)]
    pub struct Core {
        core: InCore,
        resume: ResumeFile,
    }

    impl Core {
        /// For a local stream whose longest message is `max_message_len`.
        pub fn new(max_message_len: usize) -> Self {
            Core { core: InCore::new(max_message_len), resume: ResumeFile::detached() }
        }

        /// A fragment of image `image` of the last list given to [`Core::sync_images`].
        pub fn on_fragment(
            &mut self,
            image: usize,
            f: Fragment<'_>,
            offer: &mut Offer<'_>,
            policy: BackPressure,
            info: &mut BridgeInfo,
        ) -> Next {
            self.core.on_fragment(image, f, offer, policy, info, &self.resume)
        }

        pub fn retry_held(&mut self, offer: &mut Offer<'_>, info: &mut BridgeInfo) -> bool {
            self.core.retry_held(offer, info, &self.resume)
        }

        pub fn sync_images(&mut self, list: &[ImageInfo]) {
            self.core.sync_images(list)
        }

        pub fn may_poll(&self, image: usize) -> bool {
            self.core.may_poll(image)
        }

        pub fn polled(&mut self, image: usize, fragments: usize) {
            self.core.polled(image, fragments)
        }

        /// Messages in assembly, the longest one and the largest buffer behind one.
        pub fn assembly_bytes(&mut self) -> (usize, usize, usize) {
            self.core.assembly_bytes()
        }

        pub fn image_count(&self) -> usize {
            self.core.image_count()
        }

        pub fn source_count(&self) -> usize {
            self.core.source_count()
        }

        pub fn is_holding(&self) -> bool {
            self.core.is_holding()
        }
    }
}
