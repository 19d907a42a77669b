// Package freeport finds loopback TCP ports that nothing listens on, for
// a server a test or a benchmark starts as another process (PostgreSQL,
// RabbitMQ, etcd, a service binary), which must be told its ports before
// it binds them.
//
// A port is chosen at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), never from it. The kernel hands ephemeral
// ports to every outbound connection, and a mesh under test opens
// thousands: a port taken from that range could be given to one of them
// between its choice and its server's bind (seconds, for a service started
// late or restarted on the same address), and the server would fail with
// "address already in use". Below the range only an explicit bind can take
// it, such as another test's pick of the same port out of thousands.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

const (
	// lowest is the lowest port chosen: above the well-known and most
	// registered servers' ports (PostgreSQL's 5432, RabbitMQ's 5672 and
	// 15672, etcd's 2379).
	lowest = 20000
	// ephemeralRangeFile holds the first and last port the kernel hands
	// out to connections and to binds of port 0.
	ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	// attempts bounds the tries for one port; each fails only when the
	// port is bound already.
	attempts = 200
)

// Ports returns n distinct loopback ports that were free a moment ago,
// for one server that needs several (RabbitMQ's AMQP and distribution
// ports): each is held until all are chosen, so the same one cannot be
// returned twice.
func Ports(n int) ([]int, error) {
	below := ephemeralStart()
	var (
		held  []net.Listener
		ports []int
	)
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := listen(below)
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port returns a loopback port that was free a moment ago.
func Port() (int, error) {
	ports, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Addr returns "127.0.0.1:port" for a port that was free a moment ago.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// listen binds a random port in [lowest, below). Where there is no room
// below the ephemeral range (an unusual kernel setting, or a system
// without the file), it lets the kernel choose, as the only choice left.
func listen(below int) (net.Listener, error) {
	if below-lowest < 1000 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	var err error
	for range attempts {
		port := lowest + rand.IntN(below-lowest)
		var l net.Listener
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("%d random ports in [%d, %d) were all taken; the last: %w", attempts, lowest, below, err)
}

// ephemeralStart is the first port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralStart() int {
	raw, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(raw))
	if len(fields) != 2 {
		return 0
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return start
}
