//! Arguments as JavaScript passes them, checked before use.
//!
//! wasm-bindgen converts a parameter typed `f64`, `bool` or `&str` the way JavaScript coerces
//! values: `null` became 0 (a memory fraction of 0, which refuses every malloc), `true` 1,
//! `"4096"` 4096, `NaN` a position of 0, and a number where text was due trapped inside the
//! module ("memory access out of bounds"). So the exports take `&JsValue` and convert it here.
//!
//! Invariant: a value converts only if it has the JavaScript type asked for (and, for whole
//! numbers, passes `js_number`'s checks); otherwise the error names what the value was for
//! and what it was.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::error::js_error;
use crate::js_number::to_u64;

#[wasm_bindgen]
extern "C" {
    /// JavaScript's `Uint8Array`, as far as reading one goes.
    #[wasm_bindgen(js_name = Uint8Array)]
    type Bytes;

    /// A copy of the bytes.
    #[wasm_bindgen(method)]
    fn slice(this: &Bytes) -> Vec<u8>;
}

/// What `value` is, in words: "null", "undefined", "an array", "an object", "a string"...
fn kind(value: &JsValue) -> String {
    if value.is_null() {
        return "null".into();
    }
    if value.is_undefined() {
        return "undefined".into();
    }
    if value.is_array() {
        return "an array".into();
    }
    match value.js_typeof().as_string().unwrap_or_default().as_str() {
        "object" => "an object".into(),
        name => format!("a {name}"),
    }
}

/// `value` as a number.
pub fn number(value: &JsValue, what: &str) -> Result<f64, JsError> {
    value.as_f64().ok_or_else(|| js_error(format!("{what} must be a number, got {}", kind(value))))
}

/// `value` as a whole number from 0 to 2^53.
pub fn whole(value: &JsValue, what: &str) -> Result<u64, JsError> {
    to_u64(number(value, what)?, what).map_err(js_error)
}

/// `value` as a count or position: a whole number, at most `usize::MAX` (beyond any trace).
pub fn count(value: &JsValue, what: &str) -> Result<usize, JsError> {
    Ok(usize::try_from(whole(value, what)?).unwrap_or(usize::MAX))
}

/// `value` as `true` or `false`.
pub fn flag(value: &JsValue, what: &str) -> Result<bool, JsError> {
    value.as_bool().ok_or_else(|| js_error(format!("{what} must be true or false, got {}", kind(value))))
}

/// `value` as a string.
pub fn text(value: &JsValue, what: &str) -> Result<String, JsError> {
    value.as_string().ok_or_else(|| js_error(format!("{what} must be a string, got {}", kind(value))))
}

/// `value` as bytes: a `Uint8Array`'s, or a string's UTF-8.
pub fn bytes(value: &JsValue, what: &str) -> Result<Vec<u8>, JsError> {
    if let Some(s) = value.as_string() {
        return Ok(s.into_bytes());
    }
    match value.dyn_ref::<Bytes>() {
        Some(b) => Ok(b.slice()),
        None => Err(js_error(format!("{what} must be a Uint8Array or a string, got {}", kind(value)))),
    }
}
