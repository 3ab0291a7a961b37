//! The one place an error becomes a JavaScript `Error`: every fallible call of the adapter
//! maps its error (allocator, config, trace, replay or argument) through [`js_error`], so the
//! message a person reads in the page is exactly the core's `Display` text.

use core::fmt::Display;

use wasm_bindgen::JsError;

/// A JavaScript `Error` whose message is `e`'s `Display` text.
pub fn js_error(e: impl Display) -> JsError {
    JsError::new(&e.to_string())
}
