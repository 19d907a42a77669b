// Package ssrfguard refuses outgoing connections to addresses a
// multi-tenant service must not reach on a tenant's behalf: loopback,
// private, link-local, cloud metadata and other special-purpose ranges,
// unless an allow-list opens them. It checks the address a socket is about
// to connect to (a net.Dialer ControlContext hook), after DNS resolution, so
// a name whose answer changes between a check and the connect (DNS
// rebinding) cannot get through. The dispatcher guards job targets with it,
// alerting its webhook channels.
package ssrfguard

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
)

// specialRange is one row of the SSRF guard's table: addresses in prefix are
// refused as what (a phrase completing "X is ..."), or let through when what
// is globallyReachable.
type specialRange struct {
	prefix netip.Prefix
	what   string
}

// Phrases of the refusal reasons.
const (
	whatLoopback      = "a loopback address"
	whatPrivate       = "a private address"
	whatLinkLocal     = "a link-local address"
	whatMetadata      = "a cloud metadata address"
	whatUnspecified   = "an unspecified address"
	whatMulticast     = "a multicast address"
	whatBroadcast     = "a broadcast address"
	whatShared        = "a shared (CGNAT) address"
	whatReserved      = "a reserved address"
	whatDocumentation = "a documentation address"
	whatBenchmarking  = "a benchmarking address"
	whatIdentifier    = "an identifier, not a routable address"
	whatInvalid       = "not a valid IP address"
)

// globallyReachable marks a row that lets its prefix through although a
// wider row below refuses it, or that only records a registry entry whose
// "Globally Reachable" column is True.
const globallyReachable = ""

// specialRanges is the SSRF guard's immutable table, most specific first
// (the first matching row decides; a row whose what is globallyReachable
// lets the address through). It holds every entry of IANA's IPv4 and IPv6
// Special-Purpose Address Registries (reviewed 2026-11: a new entry needs
// a row here and one in registry_test.go), refused where the registry's
// "Globally Reachable" column is False or N/A and let through where it is
// True, except where a comment says why not; and a few ranges that are
// not in those registries but that no tenant may reach: cloud metadata
// endpoints, multicast, site-local.
//
// Three registry entries have no row because the address is judged by the
// IPv4 address it carries (see addressClass): ::ffff:0:0/96 (IPv4-mapped,
// "not globally reachable" as IPv6, but a socket to one is a connection to
// its IPv4 address, so that address decides), 64:ff9b::/96 (NAT64, True)
// and 2002::/16 (6to4, N/A: the relay connects to the embedded address).
var specialRanges = [...]specialRange{
	// IPv4.
	{netip.MustParsePrefix("169.254.169.254/32"), whatMetadata}, // AWS, GCP, Azure, OCI, DigitalOcean
	{netip.MustParsePrefix("100.100.100.200/32"), whatMetadata}, // Alibaba Cloud
	{netip.MustParsePrefix("255.255.255.255/32"), whatBroadcast},
	{netip.MustParsePrefix("0.0.0.0/8"), whatUnspecified}, // "this network" and 0.0.0.0/32; Linux connects 0.0.0.0 to localhost
	{netip.MustParsePrefix("127.0.0.0/8"), whatLoopback},
	{netip.MustParsePrefix("10.0.0.0/8"), whatPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), whatPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), whatPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), whatShared},
	{netip.MustParsePrefix("169.254.0.0/16"), whatLinkLocal},
	// 192.0.0.0/24, IETF protocol assignments, is not globally reachable
	// and holds 192.0.0.0/29 (IPv4 service continuity, DS-Lite),
	// 192.0.0.8/32 (IPv4 dummy address) and 192.0.0.170-171 (NAT64/DNS64
	// discovery); its two anycast services are globally reachable.
	{netip.MustParsePrefix("192.0.0.9/32"), globallyReachable},  // Port Control Protocol anycast
	{netip.MustParsePrefix("192.0.0.10/32"), globallyReachable}, // TURN anycast
	{netip.MustParsePrefix("192.0.0.0/24"), whatReserved},
	{netip.MustParsePrefix("192.0.2.0/24"), whatDocumentation},    // TEST-NET-1
	{netip.MustParsePrefix("198.51.100.0/24"), whatDocumentation}, // TEST-NET-2
	{netip.MustParsePrefix("203.0.113.0/24"), whatDocumentation},  // TEST-NET-3
	{netip.MustParsePrefix("198.18.0.0/15"), whatBenchmarking},    // often used inside networks
	{netip.MustParsePrefix("192.31.196.0/24"), globallyReachable}, // AS112-v4
	{netip.MustParsePrefix("192.52.193.0/24"), globallyReachable}, // AMT
	{netip.MustParsePrefix("192.175.48.0/24"), globallyReachable}, // AS112 direct delegation
	// Deprecated 6to4 relay anycast (RFC 7526), N/A in the registry: the
	// relays that still answer are operated inside provider networks. The
	// 6a44 relay anycast address 192.88.99.2, marked globally reachable,
	// is refused with its deprecated block: no job targets a tunnel relay.
	{netip.MustParsePrefix("192.88.99.0/24"), whatReserved},
	{netip.MustParsePrefix("224.0.0.0/4"), whatMulticast}, // not in the registry; never a unicast target
	{netip.MustParsePrefix("240.0.0.0/4"), whatReserved},
	// IPv6.
	{netip.MustParsePrefix("fd00:ec2::254/128"), whatMetadata}, // AWS IMDS over IPv6
	{netip.MustParsePrefix("::1/128"), whatLoopback},
	{netip.MustParsePrefix("::/128"), whatUnspecified},
	{netip.MustParsePrefix("fe80::/10"), whatLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), whatPrivate},       // deprecated site-local, not in the registry
	{netip.MustParsePrefix("fc00::/7"), whatPrivate},        // unique local
	{netip.MustParsePrefix("64:ff9b:1::/48"), whatPrivate},  // local-use IPv4/IPv6 translation
	{netip.MustParsePrefix("ff00::/8"), whatMulticast},      // not in the registry; never a unicast target
	{netip.MustParsePrefix("100::/64"), whatReserved},       // discard-only
	{netip.MustParsePrefix("100:0:0:1::/64"), whatReserved}, // dummy IPv6 prefix
	// 2001::/23, IETF protocol assignments, is not globally reachable;
	// these entries inside it are.
	{netip.MustParsePrefix("2001:1::1/128"), globallyReachable},   // Port Control Protocol anycast
	{netip.MustParsePrefix("2001:1::2/128"), globallyReachable},   // TURN anycast
	{netip.MustParsePrefix("2001:1::3/128"), globallyReachable},   // DNS-SD service registration protocol anycast
	{netip.MustParsePrefix("2001:3::/32"), globallyReachable},     // AMT
	{netip.MustParsePrefix("2001:4:112::/48"), globallyReachable}, // AS112-v6
	{netip.MustParsePrefix("2001::/32"), whatReserved},            // Teredo (N/A): the embedded IPv4 is obfuscated
	{netip.MustParsePrefix("2001:2::/48"), whatBenchmarking},
	// ORCHID (deprecated, N/A), ORCHIDv2 and drone remote ID entity tags
	// (both marked globally reachable) are cryptographic host identifiers
	// that RFC 7343 and RFC 9374 say are not routable at the IP layer: a
	// socket to one reaches whatever a local overlay maps it to, never a
	// public host, so all three are refused.
	{netip.MustParsePrefix("2001:10::/28"), whatIdentifier},
	{netip.MustParsePrefix("2001:20::/28"), whatIdentifier},
	{netip.MustParsePrefix("2001:30::/28"), whatIdentifier},
	{netip.MustParsePrefix("2001::/23"), whatReserved},
	{netip.MustParsePrefix("2001:db8::/32"), whatDocumentation},
	{netip.MustParsePrefix("3fff::/20"), whatDocumentation},
	{netip.MustParsePrefix("2620:4f:8000::/48"), globallyReachable}, // AS112 direct delegation
	{netip.MustParsePrefix("5f00::/16"), whatReserved},              // segment routing (SRv6) SIDs
}

// Prefixes of IPv6 forms that carry an IPv4 address a translator or tunnel
// would connect to; the guard judges them by that address.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")
	v4CompatibleBits = netip.MustParsePrefix("::/96")
)

// addressClass says why addr must not be connected to, as a phrase
// completing "X is ..." ("a private address"), or "" when it is an ordinary
// public unicast address. It does not consult any allow-list. The zone of a
// scoped IPv6 address is ignored.
func addressClass(addr netip.Addr) string {
	if !addr.IsValid() {
		return whatInvalid
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is6() {
		if v4, ok := embeddedIPv4(addr); ok {
			if what := addressClass(v4); what != "" {
				return what
			}
			if v4CompatibleBits.Contains(addr) {
				// Deprecated and never routed; only a misconfigured
				// host would translate it.
				return whatReserved
			}
			return ""
		}
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(addr) {
			return r.what
		}
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address carried by a NAT64 (64:ff9b::/96),
// 6to4 (2002::/16) or IPv4-compatible (::/96 except :: and ::1) address.
func embeddedIPv4(addr netip.Addr) (netip.Addr, bool) {
	b := addr.As16()
	switch {
	case nat64Prefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFourPrefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case v4CompatibleBits.Contains(addr) && addr != netip.IPv6Unspecified() && addr != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}

// RefusedError is what the guard's dial control returns for an address it
// refuses (find it with errors.As): a refusal is final, never worth a retry.
type RefusedError struct {
	Addr string
	What string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("target refused: %s is %s", e.Addr, e.What)
}

// Guard is the SSRF check of every outgoing connection. The zero Guard
// allows only public addresses.
type Guard struct {
	// Allowed opens these networks even where they are special-purpose
	// (tests and local development allow loopback).
	Allowed []netip.Prefix
}

// allows reports whether connecting to addr is permitted: it is public, or
// inside an allowed network (tried both as given and unmapped, so allowing
// 127.0.0.0/8 also allows ::ffff:127.0.0.1).
func (g Guard) allows(addr netip.Addr) (ok bool, what string) {
	addr = addr.WithZone("")
	what = addressClass(addr)
	if what == "" || what == whatInvalid {
		return what == "", what
	}
	if slices.ContainsFunc(g.Allowed, func(p netip.Prefix) bool { return p.Contains(addr) || p.Contains(addr.Unmap()) }) {
		return true, ""
	}
	return false, what
}

// Control is the net.Dialer ControlContext hook: it runs after DNS
// resolution, for the very address a socket is about to connect to, so a
// hostname whose answer changes between a check and the connect (DNS
// rebinding) cannot get through. When a name resolves to several
// addresses, a refused one fails only its own attempt and the dialer tries
// the next. An address that does not parse is refused (fail closed).
func (g Guard) Control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Addr: address, What: whatInvalid}
	}
	if ok, what := g.allows(ap.Addr()); !ok {
		return &RefusedError{Addr: ap.Addr().String(), What: what}
	}
	return nil
}

// ParseNetworks parses an allow-list of CIDRs; a bare address is its own
// /32 or /128. The error names the entry that is neither.
func ParseNetworks(entries []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	for _, s := range entries {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an address", s)
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, nil
}
