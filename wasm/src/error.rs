//! The one place an error becomes a JavaScript `Error`: every fallible call of the adapter
//! maps its error (allocator, config, trace, replay or argument) through [`js_error`], so the
//! message a person reads in the page is exactly the core's `Display` text. An error the page
//! can act on carries what it needs as a property of its own ([`js_error_with`]).

use core::fmt::Display;

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// `Reflect.set(target, key, value)`: sets a property on a JavaScript object.
    #[wasm_bindgen(js_namespace = Reflect, js_name = set)]
    fn reflect_set(target: &JsValue, key: &JsValue, value: &JsValue) -> bool;
}

/// A JavaScript `Error` whose message is `e`'s `Display` text.
pub fn js_error(e: impl Display) -> JsError {
    JsError::new(&e.to_string())
}

/// A JavaScript `Error` whose message is `e`'s `Display` text and whose property `key` is
/// `value`.
pub fn js_error_with(e: impl Display, key: &str, value: JsValue) -> JsValue {
    let error: JsValue = js_error(e).into();
    reflect_set(&error, &JsValue::from_str(key), &value);
    error
}
