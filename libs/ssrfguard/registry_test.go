package ssrfguard

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// probe is one address and how the guard must class it ("" lets it through).
type probe struct {
	addr string
	want string
}

// TestIANASpecialPurposeRegistries has one row per entry of IANA's IPv4 and
// IPv6 Special-Purpose Address Registries (and per extra range the guard
// refuses), each probing the first and last address of the entry and, where
// the neighbour is not itself special, the addresses just outside it. Every
// IPv4 probe is also checked in its IPv4-mapped (::ffff:0:0/96) and NAT64
// (64:ff9b::/96) forms, which must be classed as the IPv4 address they carry.
func TestIANASpecialPurposeRegistries(t *testing.T) {
	t.Parallel()
	const public = ""
	tests := []struct {
		entry  string
		probes []probe
	}{
		// IANA IPv4 Special-Purpose Address Registry.
		{"0.0.0.0/8 this network", []probe{{"0.0.0.0", whatUnspecified}, {"0.255.255.255", whatUnspecified}, {"1.0.0.0", public}}},
		{"0.0.0.0/32 this host on this network", []probe{{"0.0.0.0", whatUnspecified}}},
		{"10.0.0.0/8 private-use", []probe{{"10.0.0.0", whatPrivate}, {"10.255.255.255", whatPrivate}, {"9.255.255.255", public}, {"11.0.0.0", public}}},
		{"100.64.0.0/10 shared address space", []probe{{"100.64.0.0", whatShared}, {"100.127.255.255", whatShared}, {"100.63.255.255", public}, {"100.128.0.0", public}}},
		{"127.0.0.0/8 loopback", []probe{{"127.0.0.0", whatLoopback}, {"127.255.255.255", whatLoopback}, {"126.255.255.255", public}, {"128.0.0.0", public}}},
		{"169.254.0.0/16 link local", []probe{{"169.254.0.0", whatLinkLocal}, {"169.254.255.255", whatLinkLocal}, {"169.253.255.255", public}, {"169.255.0.0", public}}},
		{"172.16.0.0/12 private-use", []probe{{"172.16.0.0", whatPrivate}, {"172.31.255.255", whatPrivate}, {"172.15.255.255", public}, {"172.32.0.0", public}}},
		{"192.0.0.0/24 IETF protocol assignments", []probe{{"192.0.0.0", whatReserved}, {"192.0.0.11", whatReserved}, {"192.0.0.255", whatReserved}, {"191.255.255.255", public}, {"192.0.1.0", public}}},
		{"192.0.0.0/29 IPv4 service continuity prefix", []probe{{"192.0.0.0", whatReserved}, {"192.0.0.7", whatReserved}}},
		{"192.0.0.8/32 IPv4 dummy address", []probe{{"192.0.0.8", whatReserved}}},
		{"192.0.0.9/32 port control protocol anycast (globally reachable)", []probe{{"192.0.0.9", public}}},
		{"192.0.0.10/32 TURN anycast (globally reachable)", []probe{{"192.0.0.10", public}}},
		{"192.0.0.170/32 and 192.0.0.171/32 NAT64/DNS64 discovery", []probe{{"192.0.0.170", whatReserved}, {"192.0.0.171", whatReserved}}},
		{"192.0.2.0/24 documentation (TEST-NET-1)", []probe{{"192.0.2.0", whatDocumentation}, {"192.0.2.255", whatDocumentation}, {"192.0.1.255", public}, {"192.0.3.0", public}}},
		{"192.31.196.0/24 AS112-v4 (globally reachable)", []probe{{"192.31.196.0", public}, {"192.31.196.255", public}}},
		{"192.52.193.0/24 AMT (globally reachable)", []probe{{"192.52.193.0", public}, {"192.52.193.255", public}}},
		{"192.88.99.0/24 deprecated 6to4 relay anycast", []probe{{"192.88.99.0", whatReserved}, {"192.88.99.1", whatReserved}, {"192.88.99.2", whatReserved}, {"192.88.99.255", whatReserved}, {"192.88.98.255", public}, {"192.88.100.0", public}}},
		{"192.168.0.0/16 private-use", []probe{{"192.168.0.0", whatPrivate}, {"192.168.255.255", whatPrivate}, {"192.167.255.255", public}, {"192.169.0.0", public}}},
		{"192.175.48.0/24 AS112 direct delegation (globally reachable)", []probe{{"192.175.48.0", public}, {"192.175.48.255", public}}},
		{"198.18.0.0/15 benchmarking", []probe{{"198.18.0.0", whatBenchmarking}, {"198.19.255.255", whatBenchmarking}, {"198.17.255.255", public}, {"198.20.0.0", public}}},
		{"198.51.100.0/24 documentation (TEST-NET-2)", []probe{{"198.51.100.0", whatDocumentation}, {"198.51.100.255", whatDocumentation}, {"198.51.99.255", public}, {"198.51.101.0", public}}},
		{"203.0.113.0/24 documentation (TEST-NET-3)", []probe{{"203.0.113.0", whatDocumentation}, {"203.0.113.255", whatDocumentation}, {"203.0.112.255", public}, {"203.0.114.0", public}}},
		{"240.0.0.0/4 reserved", []probe{{"240.0.0.0", whatReserved}, {"255.255.255.254", whatReserved}}},
		{"255.255.255.255/32 limited broadcast", []probe{{"255.255.255.255", whatBroadcast}}},
		// IPv4 ranges outside the registry.
		{"224.0.0.0/4 multicast", []probe{{"224.0.0.0", whatMulticast}, {"239.255.255.255", whatMulticast}, {"223.255.255.255", public}}},
		{"cloud metadata", []probe{{"169.254.169.254", whatMetadata}, {"100.100.100.200", whatMetadata}}},

		// IANA IPv6 Special-Purpose Address Registry.
		{"::1/128 loopback", []probe{{"::1", whatLoopback}}},
		{"::/128 unspecified", []probe{{"::", whatUnspecified}}},
		{"::ffff:0:0/96 IPv4-mapped, classed by the IPv4 address", []probe{
			{"::ffff:0.0.0.0", whatUnspecified}, {"::ffff:127.0.0.1", whatLoopback}, {"::ffff:192.88.99.1", whatReserved},
			{"::ffff:255.255.255.255", whatBroadcast}, {"::ffff:8.8.8.8", public},
		}},
		{"64:ff9b::/96 IPv4-IPv6 translation (globally reachable), classed by the IPv4 address", []probe{
			{"64:ff9b::", whatUnspecified}, {"64:ff9b::808:808", public}, {"64:ff9b::c058:6301", whatReserved},
			{"64:ff9b::ffff:ffff", whatBroadcast}, {"64:ff9b:0:0:1::", public},
		}},
		{"64:ff9b:1::/48 local-use IPv4/IPv6 translation", []probe{{"64:ff9b:1::", whatPrivate}, {"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", whatPrivate}, {"64:ff9b:2::", public}}},
		{"100::/64 discard-only", []probe{{"100::", whatReserved}, {"100::ffff:ffff:ffff:ffff", whatReserved}, {"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", public}}},
		{"100:0:0:1::/64 dummy IPv6 prefix", []probe{{"100:0:0:1::", whatReserved}, {"100:0:0:1:ffff:ffff:ffff:ffff", whatReserved}, {"100:0:0:2::", public}}},
		{"2001::/23 IETF protocol assignments", []probe{{"2001:1::4", whatReserved}, {"2001:100::", whatReserved}, {"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", whatReserved}, {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", public}, {"2001:200::", public}}},
		{"2001::/32 Teredo", []probe{{"2001::", whatReserved}, {"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", whatReserved}}},
		{"2001:1::1/128 port control protocol anycast (globally reachable)", []probe{{"2001:1::1", public}}},
		{"2001:1::2/128 TURN anycast (globally reachable)", []probe{{"2001:1::2", public}}},
		{"2001:1::3/128 DNS-SD SRP anycast (globally reachable)", []probe{{"2001:1::3", public}, {"2001:1::", whatReserved}}},
		{"2001:2::/48 benchmarking", []probe{{"2001:2::", whatBenchmarking}, {"2001:2:0:ffff:ffff:ffff:ffff:ffff", whatBenchmarking}, {"2001:2:1::", whatReserved}}},
		{"2001:3::/32 AMT (globally reachable)", []probe{{"2001:3::", public}, {"2001:3:ffff:ffff:ffff:ffff:ffff:ffff", public}, {"2001:4::", whatReserved}}},
		{"2001:4:112::/48 AS112-v6 (globally reachable)", []probe{{"2001:4:112::", public}, {"2001:4:112:ffff:ffff:ffff:ffff:ffff", public}, {"2001:4:113::", whatReserved}}},
		{"2001:10::/28 deprecated ORCHID", []probe{{"2001:10::", whatIdentifier}, {"2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", whatIdentifier}, {"2001:f:ffff:ffff:ffff:ffff:ffff:ffff", whatReserved}}},
		{"2001:20::/28 ORCHIDv2", []probe{{"2001:20::", whatIdentifier}, {"2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", whatIdentifier}}},
		{"2001:30::/28 drone remote ID entity tags", []probe{{"2001:30::", whatIdentifier}, {"2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", whatIdentifier}, {"2001:40::", whatReserved}}},
		{"2001:db8::/32 documentation", []probe{{"2001:db8::", whatDocumentation}, {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", whatDocumentation}, {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", public}, {"2001:db9::", public}}},
		{"2002::/16 6to4, classed by the IPv4 address", []probe{{"2002:808:808::", public}, {"2002:a00:1::", whatPrivate}, {"2002:c058:6301::", whatReserved}, {"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", whatBroadcast}}},
		{"2620:4f:8000::/48 AS112 direct delegation (globally reachable)", []probe{{"2620:4f:8000::", public}, {"2620:4f:8000:ffff:ffff:ffff:ffff:ffff", public}}},
		{"3fff::/20 documentation", []probe{{"3fff::", whatDocumentation}, {"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", whatDocumentation}, {"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", public}, {"3fff:1000::", public}}},
		{"5f00::/16 segment routing (SRv6) SIDs", []probe{{"5f00::", whatReserved}, {"5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", whatReserved}, {"5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", public}, {"5f01::", public}}},
		{"fc00::/7 unique-local", []probe{{"fc00::", whatPrivate}, {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", whatPrivate}, {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", public}}},
		{"fe80::/10 link-local unicast", []probe{{"fe80::", whatLinkLocal}, {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", whatLinkLocal}, {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", public}}},
		// IPv6 ranges outside the registry.
		{"fec0::/10 deprecated site-local", []probe{{"fec0::", whatPrivate}, {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", whatPrivate}}},
		{"ff00::/8 multicast", []probe{{"ff00::", whatMulticast}, {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", whatMulticast}}},
		{"::/96 IPv4-compatible (deprecated)", []probe{{"::8.8.8.8", whatReserved}, {"::10.0.0.1", whatPrivate}}},
		{"AWS IMDS over IPv6", []probe{{"fd00:ec2::254", whatMetadata}}},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			t.Parallel()
			for _, p := range tt.probes {
				addr := netip.MustParseAddr(p.addr)
				require.Equal(t, p.want, addressClass(addr), "%s", p.addr)
				if !addr.Is4() {
					continue
				}
				b := addr.As4()
				mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
				require.Equal(t, p.want, addressClass(mapped), "%s", mapped)
				nat64 := netip.AddrFrom16([16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
				require.Equal(t, p.want, addressClass(nat64), "%s", nat64)
			}
		})
	}
}
