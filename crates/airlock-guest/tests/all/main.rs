//! Integration tests of airlock-guest: the guest server runs in a child process of the test
//! binary (re-executed into [`fixture::guest_server_entry`]) over a control socketpair, with
//! no namespaces, exactly as the runtime drives it.
mod exec;
mod fixture;
mod lifecycle;
mod protocol;
mod sessions;
mod transfer;
