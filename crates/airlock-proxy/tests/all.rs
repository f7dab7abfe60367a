//! airlock-proxy against real servers on loopback (one test binary, see ARCHITECTURE §4).

mod answers;
mod audit;
mod common;
mod denials;
mod host;
mod live;
mod secrets;
mod tls;
