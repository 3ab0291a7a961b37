//! cachalot-wasm: the browser's door to cachalot. A thin wasm-bindgen adapter over
//! `cachalot-core` and its simulated device: it owns core state, converts types between
//! Rust and JavaScript, and maps every error to a JS `Error` through `error::js_error`.
//!
//! JavaScript sees three classes: [`Allocator`] (one allocator over a `SimDevice`: malloc,
//! free, record_stream, empty_cache, explained decisions, snapshot, stats, memory_summary,
//! and a trace it steps through), [`TraceFile`] (a parsed trace) and [`ReplayRun`] (one
//! whole cold pass of a trace, with its timeline and the figures `cachalot replay --json`
//! prints), and two functions, [`epoch_calls::epoch_calls_json`] (the driver calls of two
//! passes of a trace, with and without `empty_cache()` between them) and
//! [`fit_search::fit_cards_json`] (the cards `TraceFile.fit_json`, the smallest device a trace
//! fits on, checks). No allocator logic
//! lives here: every decision is the core's. The file reader behind `TraceFile` is plain
//! Rust ([`reader`], within [`reader::BROWSER_LIMITS`]), so that it can be fuzzed natively
//! (`fuzz/doors/browser.rs`).
//!
//! Byte counts and addresses cross as JS numbers (`f64`): simulated addresses and every
//! size a device can hold are below 2^53, so they are exact; `js_number` checks it.
//! Arguments arrive as `JsValue`s and are checked for their JavaScript type first
//! (`js_argument`): a wrong one throws an `Error` naming the argument, never a coercion.
#![forbid(unsafe_code)]

mod allocator_handle;
mod decisions;
mod epoch_calls;
mod error;
mod fit_search;
mod js_argument;
mod js_number;
mod memory_map;
pub mod reader;
mod recorded_access;
mod recorded_run;
mod replay_run;
mod slim_snapshot;
mod snapshot_map;
mod trace_cursor;
mod trace_file;

pub use allocator_handle::Allocator;
pub use fit_search::fit_cards_json;
pub use replay_run::ReplayRun;
pub use trace_file::{describe, TraceFile};
