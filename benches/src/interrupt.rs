//! The cost of wasmtime's two ways to bound a call, apart from any policy:
//! a tiny hand-assembled module whose `spin(n)` export loops `n` times,
//! compiled by three engines (no interruption, epoch deadlines, fuel), so
//! that the per-call and per-loop-iteration overhead of each mechanism is
//! measured against the unbounded code. The dataplane's host
//! (`perf_dataplane::policy::wasm`) offers epoch and fuel; this shows what
//! each costs.

use wasmtime::{Config, Engine, Instance, Module, Store, TypedFunc};

/// How a call is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Not at all.
    None,
    /// Epoch deadline (checked at function entry and loop back-edges).
    Epoch,
    /// Fuel (counted per instruction block).
    Fuel,
    /// Both, as the host's default call budget (`Interruption::Budget`).
    Both,
}

impl Bound {
    /// Its label in reports.
    pub fn label(self) -> &'static str {
        match self {
            Bound::None => "none",
            Bound::Epoch => "epoch",
            Bound::Fuel => "fuel",
            Bound::Both => "both",
        }
    }
}

/// The module: `(func (export "spin") (param i32) (result i32))` counting
/// its argument down to zero and returning the iterations run.
pub fn spin_module() -> Vec<u8> {
    let body: &[u8] = &[
        0x01, 0x01, 0x7f, // one local i32
        0x02, 0x40, // block
        0x03, 0x40, // loop
        0x20, 0x00, 0x45, 0x0d, 0x01, // local.get 0; i32.eqz; br_if 1
        0x20, 0x00, 0x41, 0x01, 0x6b, 0x21, 0x00, // n -= 1
        0x20, 0x01, 0x41, 0x01, 0x6a, 0x21, 0x01, // count += 1
        0x0c, 0x00, 0x0b, 0x0b, // br 0; end; end
        0x20, 0x01, 0x0b, // local.get 1; end
    ];
    let section = |id: u8, content: &[u8]| {
        let mut s = vec![id, content.len() as u8];
        s.extend_from_slice(content);
        s
    };
    let mut code = vec![0x01, body.len() as u8];
    code.extend_from_slice(body);
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    m.extend(section(0x01, &[0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f]));
    m.extend(section(0x03, &[0x01, 0x00]));
    m.extend(section(0x07, &[0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00]));
    m.extend(section(0x0a, &code));
    m
}

/// An instance of [`spin_module`] under one bound, ready to call.
pub struct Spinner {
    store: Store<()>,
    spin: TypedFunc<i32, i32>,
    bound: Bound,
}

impl Spinner {
    /// Compiles and instantiates the module on an engine for `bound`.
    pub fn new(bound: Bound) -> wasmtime::Result<Self> {
        let mut cfg = Config::new();
        match bound {
            Bound::None => {}
            Bound::Epoch => {
                cfg.epoch_interruption(true);
            }
            Bound::Fuel => {
                cfg.consume_fuel(true);
            }
            Bound::Both => {
                cfg.consume_fuel(true).epoch_interruption(true);
            }
        }
        let engine = Engine::new(&cfg)?;
        let module = Module::new(&engine, spin_module())?;
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[])?;
        let spin = instance.get_typed_func::<i32, i32>(&mut store, "spin")?;
        Ok(Spinner { store, spin, bound })
    }

    /// One call of `spin(n)`, armed the way the dataplane's host arms a
    /// hook call (a deadline or a fuel budget set before each call).
    pub fn call(&mut self, n: i32) -> wasmtime::Result<i32> {
        match self.bound {
            Bound::None => {}
            Bound::Epoch => self.store.set_epoch_deadline(1 << 20),
            Bound::Fuel => self.store.set_fuel(u64::MAX / 2)?,
            Bound::Both => {
                self.store.set_epoch_deadline(1 << 20);
                self.store.set_fuel(u64::MAX / 2)?;
            }
        }
        self.spin.call(&mut self.store, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_runs_under_each_bound() {
        for b in [Bound::None, Bound::Epoch, Bound::Fuel, Bound::Both] {
            let mut s = Spinner::new(b).expect("the hand-assembled module compiles");
            assert_eq!(s.call(1000).expect("call"), 1000, "{b:?}");
            assert_eq!(s.call(0).expect("call"), 0, "{b:?}");
        }
    }

    #[test]
    fn fuel_stops_a_long_spin() {
        let mut s = Spinner::new(Bound::Fuel).expect("compiles");
        s.store.set_fuel(1000).expect("fuel");
        assert!(s.spin.call(&mut s.store, i32::MAX).is_err(), "out of fuel");
    }
}
