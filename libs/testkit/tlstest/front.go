package tlstest

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
)

// Front terminates TLS with cfg in front of upstream (a plain "host:port"
// such as the test broker or database), as a server with a TLS listener
// would, and returns its own "host:port"; t.Cleanup stops it. prelude, if
// set, runs on each connection before the handshake (PostgreSQL's
// SSLRequest is answered in clear); false drops the connection.
func Front(t testing.TB, cfg *tls.Config, upstream string, prelude func(net.Conn) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tlstest: listen: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				if prelude != nil && !prelude(conn) {
					return
				}
				client := tls.Server(conn, cfg)
				if client.Handshake() != nil {
					return
				}
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, client); done <- struct{}{} }()
				go func() { _, _ = io.Copy(client, up); done <- struct{}{} }()
				<-done
			})
		}
	})
	return ln.Addr().String()
}
