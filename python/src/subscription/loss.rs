//! `shmlog.Loss`: messages a subscription knows it did not deliver.

use pyo3::prelude::*;
use shmlog::{Loss, LossCause};

/// Messages a subscription did not deliver and knows it did not: a message whose start position
/// lies in `[from_, to)` of session `session_id` was not delivered.
#[pyclass(module = "shmlog._shmlog", name = "Loss", frozen)]
pub struct PyLoss(pub Loss);

#[pymethods]
impl PyLoss {
    /// The session whose messages were missed.
    #[getter]
    fn session_id(&self) -> i32 {
        self.0.session_id
    }

    /// Stream position of the first byte missed.
    #[getter]
    fn from_(&self) -> i64 {
        self.0.from
    }

    /// Position at which delivery resumed.
    #[getter]
    fn to(&self) -> i64 {
        self.0.to
    }

    /// Why: `'joined-late'`, `'sessions-missed'`, `'fault'` or `'lapped'` (an untethered
    /// subscription the publisher overtook).
    #[getter]
    fn cause(&self) -> &'static str {
        match self.0.cause {
            LossCause::JoinedLate => "joined-late",
            LossCause::SessionsMissed { .. } => "sessions-missed",
            LossCause::Fault => "fault",
            LossCause::Lapped => "lapped",
            LossCause::Purged => "purged",
            LossCause::NotRecorded => "not-recorded",
            _ => "other",
        }
    }

    /// For `'sessions-missed'`: how many whole sessions at most; else `None`.
    #[getter]
    fn sessions(&self) -> Option<u32> {
        match self.0.cause {
            LossCause::SessionsMissed { sessions } => Some(sessions),
            _ => None,
        }
    }

    fn __str__(&self) -> String {
        self.0.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "<shmlog.Loss session {} [{}, {}) {}>",
            self.0.session_id,
            self.0.from,
            self.0.to,
            self.cause()
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyLoss>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.0.hash(&mut h);
        h.finish()
    }
}
