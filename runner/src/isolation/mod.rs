//! Isolation as a contract: each tenant's entitlement computed from the
//! NIC's bottlenecks and the tenants' demands ([`entitlement`]), and the
//! victim x attacker matrix that judges policies against it ([`cells`],
//! [`matrix`]), or random mixes ([`random`]). See `docs/isolation.md`.

pub mod cells;
pub mod contract;
pub mod entitlement;
pub mod matrix;
pub mod random;
