//! The precompiled-module cache: compiled, validated wasm policy modules
//! kept in memory, keyed by the SHA-256 of the module's bytes and the
//! compatibility hash of the engine that compiled them (wasmtime's
//! `Engine::precompile_compatibility_hash`: its version, target and
//! settings, here also whether the engine meters fuel).
//!
//! A hit skips compilation and validation (the expensive part of a load,
//! about 10 ms for `perf.wasm`) and leaves only instantiation and
//! initialisation (tens of microseconds). Only modules that compiled and
//! passed validation are kept; a refused module is compiled (and refused)
//! again each time. A `wasmtime::Module` is a shared handle, so a hit is a
//! reference-count increment.
//!
//! Why in memory and not `Module::serialize` to disk: loading serialized
//! code is `unsafe` in wasmtime (the bytes are trusted as machine code),
//! so a cache directory would become something an attacker could write
//! native code into; the dataplane is one long-lived process, so the
//! in-process map already serves every swap after the first load of a
//! module. See `docs/policy-abi.md`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use wasmtime::Module;

use super::wasm::{LoadError, WasmLimits, WasmPolicy};

/// What a cached module is found by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// SHA-256 of the module's bytes.
    pub sha256: [u8; 32],
    /// Hash of the compiling engine's compatibility hash and its kind
    /// (epoch or fuel interruption).
    pub engine: u64,
}

/// Counters of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheCounters {
    /// Loads served from the cache.
    pub hits: u64,
    /// Loads that compiled (and then cached, if valid).
    pub misses: u64,
    /// Modules held.
    pub entries: u64,
}

/// Compiled modules by [`CacheKey`].
#[derive(Default)]
pub struct ModuleCache {
    map: Mutex<HashMap<CacheKey, Module>>,
    counters: Mutex<CacheCounters>,
}

impl ModuleCache {
    /// The process-wide cache every cached load uses.
    pub fn global() -> &'static ModuleCache {
        static CACHE: OnceLock<ModuleCache> = OnceLock::new();
        CACHE.get_or_init(ModuleCache::default)
    }

    /// The key of `bytes` compiled for `limits`' engine.
    pub fn key(bytes: &[u8], limits: WasmLimits) -> Result<CacheKey, LoadError> {
        let engine = WasmPolicy::engine_for(limits)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        WasmPolicy::engine_kind(limits).hash(&mut h);
        Ok(CacheKey { sha256: Sha256::digest(bytes).into(), engine: h.finish() })
    }

    /// The compiled module for `bytes`, from the cache or compiled (and
    /// validated) now; `true` if it came from the cache. The size cap of
    /// `limits` applies either way.
    pub fn get_or_compile(&self, bytes: &[u8], limits: WasmLimits) -> Result<(Module, bool), LoadError> {
        if bytes.len() > limits.max_module_bytes {
            return Err(LoadError::TooLarge { len: bytes.len(), max: limits.max_module_bytes });
        }
        let key = Self::key(bytes, limits)?;
        if let Some(m) = self.map.lock().get(&key) {
            self.counters.lock().hits += 1;
            return Ok((m.clone(), true));
        }
        // Compile outside the lock: another load may run meanwhile.
        let module = WasmPolicy::compile(bytes, limits);
        let mut c = self.counters.lock();
        c.misses += 1;
        let module = module?;
        let mut map = self.map.lock();
        map.insert(key, module.clone());
        c.entries = map.len() as u64;
        Ok((module, false))
    }

    /// Forgets every module (the next load of each compiles again).
    pub fn clear(&self) {
        self.map.lock().clear();
        self.counters.lock().entries = 0;
    }

    /// Counters so far.
    pub fn counters(&self) -> CacheCounters {
        *self.counters.lock()
    }
}

/// Shared module bytes (a `.wasm` file read once, an embedded module).
pub type ModuleBytes = Arc<[u8]>;
