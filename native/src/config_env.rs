//! Where a native allocator's config comes from when the caller gives none: the
//! `CACHALOT_ALLOC_CONF` environment variable, in `PYTORCH_CUDA_ALLOC_CONF` syntax.
//!
//! Invariant: an unset or empty variable means the defaults; a set one is parsed exactly like
//! a config string passed in, so a bad value is an error naming the variable and the key.

use cachalot_core::Config;

use crate::error::Error;

/// The environment variable native allocators read their config from.
pub const CONFIG_ENV: &str = "CACHALOT_ALLOC_CONF";

/// Parses a config string given by the caller.
pub fn parse(text: &str) -> Result<Config, Error> {
    Config::parse(text).map_err(|e| Error::Config(e.to_string()))
}

/// The config `CACHALOT_ALLOC_CONF` asks for (the defaults when it is unset or empty).
pub fn from_env() -> Result<Config, Error> {
    match std::env::var(CONFIG_ENV) {
        Ok(text) => Config::parse(&text).map_err(|e| Error::Config(format!("{CONFIG_ENV}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(Config::default()),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::Config(format!("{CONFIG_ENV} is not valid UTF-8"))),
    }
}
