//! `shmlog.wait_any`: one thread waiting on several subscriptions.

use super::PySubscription;
use crate::util;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shmlog::Subscription;
use std::time::Duration;

/// Waits until one of `subscriptions` has something to receive (a message, the end of its
/// session, a fault) or `timeout` seconds pass (`None`: as long as it takes); returns the ones
/// that do, in the order given (`[]` at the timeout). One thread, several streams, no spinning
/// and no GIL while it sleeps: it sleeps on all their doorbells at once. Receive from each with
/// `recv_many(timeout=0)` or `try_recv()` (a message still being fragmented can make one find
/// nothing yet). Ctrl-C interrupts the wait.
#[pyfunction]
#[pyo3(signature = (subscriptions, timeout=None))]
pub(crate) fn wait_any<'py>(
    py: Python<'py>,
    subscriptions: Vec<Bound<'py, PySubscription>>,
    timeout: Option<f64>,
) -> PyResult<Vec<Bound<'py, PySubscription>>> {
    let deadline = util::deadline("timeout", timeout)?;
    for (i, s) in subscriptions.iter().enumerate() {
        if subscriptions[..i].iter().any(|t| t.is(s)) {
            return Err(PyValueError::new_err("wait_any: a subscription is listed twice"));
        }
    }
    let objects: Vec<&PySubscription> = subscriptions.iter().map(|s| s.get()).collect();
    let mut guards = objects.iter().map(|s| s.handle.lock(py)).collect::<PyResult<Vec<_>>>()?;
    let mut inners = Vec::with_capacity(guards.len());
    for (g, s) in guards.iter_mut().zip(&objects) {
        match g.as_mut() {
            Some(inner) => match inner.blocking() {
                Some(_) => inners.push(inner),
                None => return Err(s.handle.closed_error(py)),
            },
            _ => return Err(s.handle.closed_error(py)),
        }
    }
    loop {
        let mut ready = Vec::new();
        for (i, inner) in inners.iter_mut().enumerate() {
            let queued = inner.has_queued();
            if let Some(rx) = inner.blocking() {
                if queued || rx.subscription().wait_readable(Duration::ZERO) {
                    ready.push(subscriptions[i].clone());
                }
            }
        }
        if !ready.is_empty() {
            return Ok(ready);
        }
        let Some(slice) = util::slice(deadline) else { return Ok(ready) };
        let mut subs: Vec<&mut Subscription> =
            inners.iter_mut().filter_map(|inner| inner.blocking().map(|rx| rx.subscription())).collect();
        py.detach(|| Subscription::wait_any(&mut subs, slice));
        py.check_signals()?;
        for s in &objects {
            s.handle.check_open(py)?;
        }
    }
}
