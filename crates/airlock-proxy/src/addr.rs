//! Which destination addresses the proxy refuses by default (N3).
//!
//! [`classify`] names the class of every address a sandbox must not reach through a name or
//! literal: loopback, RFC 1918 private, link-local (which holds the cloud metadata service
//! 169.254.169.254), CGNAT (RFC 6598), IPv6 unique-local (RFC 4193, which holds AWS's
//! `fd00:ec2::254`), multicast, unspecified, broadcast and reserved space. IPv6 forms that embed
//! an IPv4 address (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are
//! classified by the embedded address, so `::ffff:127.0.0.1` is loopback too.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused unless a rule names it exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16.
    Private,
    /// 169.254/16, fe80::/10 (except the metadata addresses).
    LinkLocal,
    /// The cloud metadata service: 169.254.169.254, fd00:ec2::254.
    Metadata,
    /// 100.64/10 (RFC 6598 carrier-grade NAT).
    Cgnat,
    /// fc00::/7, fec0::/10 (deprecated site-local).
    UniqueLocal,
    /// 224/4, ff00::/8.
    Multicast,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// 255.255.255.255, 240/4.
    Reserved,
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::LinkLocal => "link-local",
            AddrClass::Metadata => "cloud metadata",
            AddrClass::Cgnat => "carrier-grade NAT",
            AddrClass::UniqueLocal => "unique-local",
            AddrClass::Multicast => "multicast",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Reserved => "reserved",
        })
    }
}

const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// The refused class of `ip`, or `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<AddrClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddrClass> {
    let [a, b, ..] = ip.octets();
    if ip == METADATA_V4 {
        Some(AddrClass::Metadata)
    } else if a == 0 {
        Some(AddrClass::Unspecified)
    } else if a == 127 {
        Some(AddrClass::Loopback)
    } else if a == 10 || (a == 172 && (16..32).contains(&b)) || (a == 192 && b == 168) {
        Some(AddrClass::Private)
    } else if a == 169 && b == 254 {
        Some(AddrClass::LinkLocal)
    } else if a == 100 && (64..128).contains(&b) {
        Some(AddrClass::Cgnat)
    } else if (224..240).contains(&a) {
        Some(AddrClass::Multicast)
    } else if a >= 240 {
        Some(AddrClass::Reserved)
    } else {
        None
    }
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddrClass> {
    let seg = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    if ip == METADATA_V6 {
        Some(AddrClass::Metadata)
    } else if ip.is_unspecified() {
        Some(AddrClass::Unspecified)
    } else if ip.is_loopback() {
        Some(AddrClass::Loopback)
    } else if seg[0] & 0xfe00 == 0xfc00 || seg[0] & 0xffc0 == 0xfec0 {
        Some(AddrClass::UniqueLocal)
    } else if seg[0] & 0xffc0 == 0xfe80 {
        Some(AddrClass::LinkLocal)
    } else if seg[0] & 0xff00 == 0xff00 {
        Some(AddrClass::Multicast)
    } else {
        None
    }
}

/// The IPv4 address inside an IPv4-mapped, NAT64 or 6to4 IPv6 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let o = ip.octets();
    if let Some(v4) = ip.to_ipv4_mapped() {
        Some(v4)
    } else if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]))
    } else if seg[0] == 0x2002 {
        Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_internal_address_class_is_refused() {
        let cases: &[(&str, AddrClass)] = &[
            ("127.0.0.1", AddrClass::Loopback),
            ("127.9.9.9", AddrClass::Loopback),
            ("::1", AddrClass::Loopback),
            ("::ffff:127.0.0.1", AddrClass::Loopback),
            ("64:ff9b::7f00:1", AddrClass::Loopback),
            ("2002:7f00:1::", AddrClass::Loopback),
            ("10.1.2.3", AddrClass::Private),
            ("172.16.0.1", AddrClass::Private),
            ("172.31.255.255", AddrClass::Private),
            ("192.168.1.1", AddrClass::Private),
            ("169.254.1.1", AddrClass::LinkLocal),
            ("fe80::1", AddrClass::LinkLocal),
            ("169.254.169.254", AddrClass::Metadata),
            ("::ffff:169.254.169.254", AddrClass::Metadata),
            ("fd00:ec2::254", AddrClass::Metadata),
            ("100.64.0.1", AddrClass::Cgnat),
            ("100.127.255.255", AddrClass::Cgnat),
            ("fd12:3456::1", AddrClass::UniqueLocal),
            ("fc00::1", AddrClass::UniqueLocal),
            ("224.0.0.1", AddrClass::Multicast),
            ("ff02::1", AddrClass::Multicast),
            ("0.0.0.0", AddrClass::Unspecified),
            ("::", AddrClass::Unspecified),
            ("255.255.255.255", AddrClass::Reserved),
            ("240.0.0.1", AddrClass::Reserved),
        ];
        for (text, class) in cases {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), Some(*class), "{text}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for text in [
            "1.1.1.1",
            "140.82.112.3",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), None, "{text}");
        }
    }
}
