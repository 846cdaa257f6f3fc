//! Wire formats shared by the sidecar that serves them and the probe and agents that speak them:
//! pure functions from bytes to values and back, with no socket and no runtime. The containment
//! probe (af-guard) builds its DNS queries and ClientHellos here without linking the proxy.
//!
//! - [`dns_wire`]: a query's question read label by label, the responder's own answers, the
//!   queries it forwards and the probe sends.
//! - [`client_hello`]: the server name out of a TLS ClientHello arriving in pieces, and a minimal
//!   ClientHello to send.

pub mod client_hello;
pub mod dns_wire;
