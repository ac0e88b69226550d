//! Hand-written policy modules in WAT: every export of the ABI, with
//! hooks and version that a test can replace.

use std::borrow::Cow;

use perf_dataplane::policy::wasm::{LoadError, WasmLimits, WasmPolicy};

/// A WAT module with every export of the ABI; the hooks' bodies and the
/// version word can be replaced.
pub struct Wat {
    pub version: u32,
    pub imports: &'static str,
    pub on_tick: Cow<'static, str>,
    pub on_request: &'static str,
    pub memory_pages: u32,
    pub name_at: u32,
    pub omit: Option<&'static str>,
    /// More module fields (functions, data), in WAT.
    pub extra: String,
}

impl Default for Wat {
    fn default() -> Self {
        Wat {
            version: 1 << 16,
            imports: "",
            on_tick: "(i32.const 0)".into(),
            on_request: "(i64.const 0)",
            memory_pages: 8,
            name_at: 459000,
            omit: None,
            extra: String::new(),
        }
    }
}

impl Wat {
    /// The module's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let exports = [
            ("perf_abi_version", format!("(result i32) (i32.const {})", self.version)),
            ("perf_init", "(result i32) (i32.const 0)".into()),
            ("perf_on_tenant", "(param i32 i32 i32)".into()),
            ("perf_on_request", format!("(result i64) {}", self.on_request)),
            ("perf_on_tick", format!("(param i64 i32) (result i32) {}", self.on_tick)),
            ("perf_tick_interval_ns", "(result i64) (i64.const 1000000)".into()),
            // Stats at 0, plans after 4096 x 64 B, the request slot after 4096 x 48 B more.
            ("perf_stats_ptr", "(result i32) (i32.const 0)".into()),
            ("perf_plans_ptr", "(result i32) (i32.const 262144)".into()),
            ("perf_request_ptr", "(result i32) (i32.const 458752)".into()),
            ("perf_max_tenants", "(result i32) (i32.const 4096)".into()),
            ("perf_name_ptr", format!("(result i32) (i32.const {})", self.name_at)),
            ("perf_name_len", "(result i32) (i32.const 3)".into()),
        ];
        let funcs: String = exports
            .iter()
            .filter(|(n, _)| Some(*n) != self.omit)
            .map(|(n, body)| format!("(func (export \"{n}\") {body})\n"))
            .collect();
        let text = format!(
            "(module {imports}\n(memory (export \"memory\") {pages})\n{funcs}{extra}\n(data (i32.const {name_at}) \"wat\"))",
            imports = self.imports,
            extra = self.extra,
            pages = self.memory_pages,
            name_at = self.name_at
        );
        wat::parse_str(&text).expect("test WAT parses")
    }

    /// Loads it (compiling every time).
    pub fn load(&self, limits: WasmLimits) -> Result<WasmPolicy, LoadError> {
        WasmPolicy::from_bytes(&self.bytes(), limits)
    }
}
