//! Which addresses the sidecar may dial. Only public unicast addresses are dialable by default;
//! every special-purpose range is refused even when an allowed name resolves into it, because a
//! name's owner (or an attacker who controls its DNS) decides where it points (DNS rebinding).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// What kind of address this is, by the IANA special-purpose registries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressClass {
    /// Globally routable unicast: the only class dialled without an explicit rule.
    Public,
    Unspecified,
    Loopback,
    /// 169.254.0.0/16 and fe80::/10; 169.254.169.254 is the cloud metadata endpoint.
    LinkLocal,
    /// 10/8, 172.16/12, 192.168/16, and the deprecated IPv6 site-local fec0::/10.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT.
    SharedAddressSpace,
    /// fc00::/7, including AWS's IPv6 metadata address fd00:ec2::254.
    UniqueLocal,
    /// 64:ff9b::/96 and 64:ff9b:1::/48: IPv4 reached through a NAT64 gateway, so any IPv4
    /// address, private ones included, can hide behind it.
    Nat64,
    /// 2002::/16: 6to4, which embeds an IPv4 address.
    SixToFour,
    /// 2001::/32: Teredo, which embeds an IPv4 address.
    Teredo,
    Multicast,
    Broadcast,
    /// TEST-NET-1/2/3, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// Benchmarking, protocol assignments, future use, discard and other reserved blocks.
    Reserved,
}

impl AddressClass {
    pub fn is_public(self) -> bool {
        self == AddressClass::Public
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            AddressClass::Public => "public",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Private => "private",
            AddressClass::SharedAddressSpace => "shared address space (CGNAT)",
            AddressClass::UniqueLocal => "unique local (ULA)",
            AddressClass::Nat64 => "NAT64",
            AddressClass::SixToFour => "6to4",
            AddressClass::Teredo => "Teredo",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Documentation => "documentation",
            AddressClass::Reserved => "reserved",
        };
        f.write_str(text)
    }
}

pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    const TABLE: [([u8; 4], u32, AddressClass); 17] = [
        ([255, 255, 255, 255], 32, AddressClass::Broadcast),
        ([0, 0, 0, 0], 8, AddressClass::Unspecified),
        ([10, 0, 0, 0], 8, AddressClass::Private),
        ([100, 64, 0, 0], 10, AddressClass::SharedAddressSpace),
        ([127, 0, 0, 0], 8, AddressClass::Loopback),
        ([169, 254, 0, 0], 16, AddressClass::LinkLocal),
        ([172, 16, 0, 0], 12, AddressClass::Private),
        ([192, 0, 0, 0], 24, AddressClass::Reserved),
        ([192, 0, 2, 0], 24, AddressClass::Documentation),
        ([192, 31, 196, 0], 24, AddressClass::Reserved),
        ([192, 52, 193, 0], 24, AddressClass::Reserved),
        ([192, 88, 99, 0], 24, AddressClass::Reserved),
        ([192, 168, 0, 0], 16, AddressClass::Private),
        ([198, 18, 0, 0], 15, AddressClass::Reserved),
        ([198, 51, 100, 0], 24, AddressClass::Documentation),
        ([203, 0, 113, 0], 24, AddressClass::Documentation),
        ([224, 0, 0, 0], 4, AddressClass::Multicast),
    ];
    if let Some((_, _, class)) = TABLE
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
    {
        return *class;
    }
    if in_v4(ip, [240, 0, 0, 0], 4) {
        return AddressClass::Reserved;
    }
    AddressClass::Public
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if let Some(v4) = ip.to_ipv4_mapped() {
        // ::ffff:a.b.c.d is the IPv4 address itself.
        return classify_v4(v4);
    }
    const TABLE: [([u16; 8], u32, AddressClass); 15] = [
        ([0, 0, 0, 0, 0, 0, 0, 0], 128, AddressClass::Unspecified),
        ([0, 0, 0, 0, 0, 0, 0, 1], 128, AddressClass::Loopback),
        ([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, AddressClass::Nat64),
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, AddressClass::Nat64),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, AddressClass::Reserved),
        (
            [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
            32,
            AddressClass::Documentation,
        ),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, AddressClass::Teredo),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, AddressClass::Reserved),
        ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, AddressClass::SixToFour),
        (
            [0x3fff, 0, 0, 0, 0, 0, 0, 0],
            20,
            AddressClass::Documentation,
        ),
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, AddressClass::Reserved),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, AddressClass::UniqueLocal),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, AddressClass::LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, AddressClass::Private),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, AddressClass::Multicast),
    ];
    if let Some((_, _, class)) = TABLE
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
    {
        return *class;
    }
    // Only 2000::/3 is allocated for global unicast; everything else (including the deprecated
    // IPv4-compatible ::/96) is not somewhere a request should go.
    if in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        AddressClass::Public
    } else {
        AddressClass::Reserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressClass::*;

    /// The classification table, row by row, at both edges of each range where it matters.
    #[test]
    fn every_special_purpose_range() {
        let rows: &[(&str, AddressClass)] = &[
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("0.0.0.0", Unspecified),
            ("0.255.255.255", Unspecified),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("11.0.0.1", Public),
            ("100.63.255.255", Public),
            ("100.64.0.1", SharedAddressSpace),
            ("100.127.255.255", SharedAddressSpace),
            ("100.128.0.0", Public),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("169.254.169.254", LinkLocal),
            ("169.254.0.1", LinkLocal),
            ("172.15.255.255", Public),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("172.32.0.0", Public),
            ("192.0.0.8", Reserved),
            ("192.0.2.10", Documentation),
            ("192.88.99.1", Reserved),
            ("192.168.1.1", Private),
            ("198.18.0.1", Reserved),
            ("198.19.255.255", Reserved),
            ("198.51.100.7", Documentation),
            ("203.0.113.10", Documentation),
            ("224.0.0.1", Multicast),
            ("239.255.255.255", Multicast),
            ("240.0.0.1", Reserved),
            ("255.255.255.255", Broadcast),
            ("2606:4700::1111", Public),
            ("2a00:1450:4001::200e", Public),
            ("::", Unspecified),
            ("::1", Loopback),
            ("::ffff:10.0.0.1", Private),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::ffff:8.8.8.8", Public),
            ("::10.0.0.1", Reserved),
            ("64:ff9b::a00:1", Nat64),
            ("64:ff9b::808:808", Nat64),
            ("64:ff9b:1::1", Nat64),
            ("100::1", Reserved),
            ("2001::1", Teredo),
            ("2001:0:ffff::1", Teredo),
            ("2001:2::1", Reserved),
            ("2001:db8::1", Documentation),
            ("2002:a00:1::1", SixToFour),
            ("3fff::1", Documentation),
            ("5f00::1", Reserved),
            ("fc00::1", UniqueLocal),
            ("fd00:ec2::254", UniqueLocal),
            ("fe80::1", LinkLocal),
            ("fec0::1", Private),
            ("ff02::1", Multicast),
            ("4000::1", Reserved),
        ];
        for (text, class) in rows {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), *class, "{text}");
        }
    }
}
