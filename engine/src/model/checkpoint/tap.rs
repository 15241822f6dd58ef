//! Named intermediate tensors of the checkpoint forward pass, for comparing it op by op with
//! llama.cpp's graph (its `cb_eval` callback names the same tensors: `attn_norm`, `Qcur`, `Kcur`,
//! `Vcur`, `kqv_out`, `attn_out`, `ffn_inp`, `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_swiglu`,
//! `ffn_out`, `l_out`, `result_norm`). A tap is installed on the calling thread for the duration of
//! one closure; without one each `emit` is a thread-local check and nothing else. Observes only:
//! never changes a value.

use std::cell::RefCell;

type Sink = Box<dyn FnMut(&str, usize, &[f32])>;

thread_local! {
    static TAP: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

/// Run `body` with `sink(name, layer, values)` called for every named tensor the forward pass
/// computes on this thread (values row-major, [rows, width]).
pub fn with_tap<R>(sink: impl FnMut(&str, usize, &[f32]) + 'static, body: impl FnOnce() -> R) -> R {
    let old = TAP.with(|t| t.borrow_mut().replace(Box::new(sink)));
    let r = body();
    TAP.with(|t| *t.borrow_mut() = old);
    r
}

/// Hand `values` to the installed tap, if any.
#[inline]
pub(crate) fn emit(name: &str, layer: usize, values: &[f32]) {
    TAP.with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            if let Some(f) = t.as_mut() {
                f(name, layer, values);
            }
        }
    });
}
