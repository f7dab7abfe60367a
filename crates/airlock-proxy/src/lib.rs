//! airlock-proxy: the host-side egress proxy.
