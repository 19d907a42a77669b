package ssrfguard

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddressClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string // "" is the zero netip.Addr
		want string
	}{
		// Public unicast: let through. (Classified only, never dialed.)
		{"93.184.215.14", ""},
		{"8.8.8.8", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"169.255.0.1", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
		// IPv4.
		{"127.0.0.1", whatLoopback},
		{"127.255.255.254", whatLoopback},
		{"10.0.0.7", whatPrivate},
		{"172.16.0.1", whatPrivate},
		{"172.31.255.255", whatPrivate},
		{"192.168.1.1", whatPrivate},
		{"100.64.0.1", whatShared},
		{"100.127.255.255", whatShared},
		{"100.100.100.200", whatMetadata},
		{"169.254.169.254", whatMetadata},
		{"169.254.1.1", whatLinkLocal},
		{"0.0.0.0", whatUnspecified},
		{"0.1.2.3", whatUnspecified},
		{"224.0.0.1", whatMulticast},
		{"239.255.255.250", whatMulticast},
		{"255.255.255.255", whatBroadcast},
		{"240.0.0.1", whatReserved},
		{"192.0.0.170", whatReserved},
		{"198.18.0.1", whatBenchmarking},
		{"192.0.2.1", whatDocumentation},
		// IPv6.
		{"::1", whatLoopback},
		{"::", whatUnspecified},
		{"fe80::1", whatLinkLocal},
		{"fe80::1%eth0", whatLinkLocal},
		{"fc00::1", whatPrivate},
		{"fd12:3456::1", whatPrivate},
		{"fd00:ec2::254", whatMetadata},
		{"fec0::1", whatPrivate},
		{"ff02::1", whatMulticast},
		{"2001:db8::1", whatDocumentation},
		{"2001::1", whatReserved},
		{"64:ff9b:1::1", whatPrivate},
		// IPv4 inside IPv6.
		{"::ffff:127.0.0.1", whatLoopback},
		{"::ffff:10.0.0.1", whatPrivate},
		{"::ffff:169.254.169.254", whatMetadata},
		{"::ffff:0.0.0.0", whatUnspecified},
		{"64:ff9b::a00:1", whatPrivate},      // NAT64 of 10.0.0.1
		{"64:ff9b::a9fe:a9fe", whatMetadata}, // NAT64 of 169.254.169.254
		{"2002:7f00:1::", whatLoopback},      // 6to4 of 127.0.0.1
		{"::127.0.0.1", whatLoopback},        // IPv4-compatible
		{"::8.8.8.8", whatReserved},          // IPv4-compatible, deprecated
		{"", whatInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			var addr netip.Addr
			if tt.addr != "" {
				addr = netip.MustParseAddr(tt.addr)
			}
			require.Equal(t, tt.want, addressClass(addr))
		})
	}
}

func TestGuardAllows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		allowed []string
		addr    string
		want    bool
	}{
		{"public without allow-list", nil, "93.184.215.14", true},
		{"loopback without allow-list", nil, "127.0.0.1", false},
		{"loopback allowed", []string{"127.0.0.0/8"}, "127.0.0.5", true},
		{"mapped loopback allowed by the IPv4 network", []string{"127.0.0.0/8"}, "::ffff:127.0.0.1", true},
		{"IPv6 loopback not in the IPv4 network", []string{"127.0.0.0/8"}, "::1", false},
		{"IPv6 loopback allowed", []string{"::1/128"}, "::1", true},
		{"other private range still refused", []string{"127.0.0.0/8"}, "10.0.0.1", false},
		{"private network allowed", []string{"10.0.0.0/8"}, "10.1.2.3", true},
		{"metadata outside a narrow allow-list", []string{"169.254.0.0/24"}, "169.254.169.254", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var g Guard
			for _, p := range tt.allowed {
				g.Allowed = append(g.Allowed, netip.MustParsePrefix(p))
			}
			ok, what := g.allows(netip.MustParseAddr(tt.addr))
			require.Equal(t, tt.want, ok)
			require.Equal(t, tt.want, what == "")
		})
	}
}

func TestGuardControl(t *testing.T) {
	t.Parallel()
	g := Guard{}
	tests := []struct {
		address string
		want    string // "" means allowed
	}{
		{"93.184.215.14:443", ""},
		{"[2606:4700:4700::1111]:443", ""},
		{"10.0.0.7:80", "target refused: 10.0.0.7 is a private address"},
		{"[::ffff:127.0.0.1]:80", "target refused: ::ffff:127.0.0.1 is a loopback address"},
		{"[fe80::1%eth0]:80", "target refused: fe80::1%eth0 is a link-local address"},
		{"not-an-address", "target refused: not-an-address is not a valid IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			t.Parallel()
			err := g.Control(context.Background(), "tcp", tt.address, nil)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestParseNetworks(t *testing.T) {
	t.Parallel()
	got, err := ParseNetworks([]string{"127.0.0.0/8", "::1", "10.1.2.3/8"})
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8"),
	}, got)
	_, err = ParseNetworks([]string{"localhost"})
	require.ErrorContains(t, err, `"localhost"`)
}
