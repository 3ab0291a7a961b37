//! `TraceFile.fit_json`: the smallest simulated device a parsed trace runs on under one
//! config, with its driver calls and the named cards' verdicts, by the core's own search
//! (`replay::fit`, the one `cachalot fit` runs on each of its threads); `calls_at_json`, a
//! config's driver calls on a given device (another config's smallest); and
//! `fit_cards_json`, the cards it checks.
//!
//! Invariant: `fit_json` gives one element of `cachalot fit --json`'s `fits` list, field for
//! field, for the same trace and config (the trace's addresses followed, as the CLI does by
//! default), `calls_at_json` at PyTorch's default's smallest device one element of its
//! `where_pytorch_fits.driver_calls`, and `fit_cards_json` its `cards` list.

use cachalot_core::replay::fit::{calls_at, fit, CARDS};
use cachalot_core::Config;
use wasm_bindgen::prelude::*;

use crate::error::js_error;
use crate::js_argument::{number, text};
use crate::js_number::to_capacity;
use crate::trace_file::TraceFile;

#[wasm_bindgen]
impl TraceFile {
    /// The smallest device this trace fits on under `config` (a config string), as JSON:
    /// `capacity_bytes`, `peak_requested_bytes`, `capacity_over_requested`, `driver_calls`,
    /// `alloc_retries`, `cards` and the rest of a `cachalot fit --json` entry. Throws if the
    /// config does not parse, an operation fails for a reason other than memory, or the run
    /// does not fit even the largest simulated device. It replays the trace a dozen times
    /// or more: seconds on a million operations. Each replay runs the trace once, as it was
    /// recorded (`cachalot fit --runs N` runs it several times in a row).
    pub fn fit_json(&self, config: &JsValue) -> Result<String, JsError> {
        let config = Config::parse(&text(config, "config")?).map_err(js_error)?;
        let found =
            fit(&self.trace, &self.trace.ops[..], &config, 1).map_err(|e| js_error(format!("{}: {e}", self.name())))?;
        serde_json::to_string(&found).map_err(js_error)
    }

    /// The driver calls of this trace's replay under `config` on a device of `capacity`
    /// bytes, as JSON: a number, or `null` when it runs out of memory there. Throws as
    /// `fit_json` does, and for a capacity that is not a whole number of bytes.
    pub fn calls_at_json(&self, config: &JsValue, capacity: &JsValue) -> Result<String, JsError> {
        let config = Config::parse(&text(config, "config")?).map_err(js_error)?;
        let capacity = to_capacity(number(capacity, "capacity")?).map_err(js_error)?;
        let calls = calls_at(&self.trace, &self.trace.ops[..], &config, capacity, 1)
            .map_err(|e| js_error(format!("{}: {e}", self.name())))?;
        serde_json::to_string(&calls).map_err(js_error)
    }
}

/// The cards a fit is checked against, as JSON (`cachalot fit --json`'s `cards`: name,
/// examples, total and usable bytes), smallest first.
#[wasm_bindgen]
pub fn fit_cards_json() -> String {
    serde_json::to_string(&CARDS).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_card_is_listed_with_its_usable_bytes() {
        let cards: serde_json::Value = serde_json::from_str(&fit_cards_json()).unwrap();
        assert_eq!(cards.as_array().unwrap().len(), CARDS.len());
        assert_eq!(cards[0]["usable_bytes"], CARDS[0].usable_bytes);
    }
}
